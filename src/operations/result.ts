/**
 * What a paid operation comes to, whatever the operation and whatever the transport: a refusal,
 * a whole reply, or a chat stream to relay. A transport only encodes it.
 */
import type { Failure } from "../errors.ts";
import type { Relay } from "./chat/relay.ts";

/** A request refused, before or at admission or by its upstream: what its client is told. */
export interface Refused {
  kind: "refused";
  failure: Failure;
  headers: Record<string, string>;
}

/**
 * A whole reply: JSON (a chat completion, or a translated wire's reply), text, or audio as the
 * upstream sends it.
 */
export interface Reply {
  kind: "reply";
  contentType: string;
  body: string | Uint8Array | ReadableStream<Uint8Array>;
  headers: Record<string, string>;
}

/** A chat stream: its relay's frames, settled by the relay at the stream's end. */
export interface Streamed {
  kind: "stream";
  relay: Relay;
  headers: Record<string, string>;
}

/** What a paid operation came to, for a transport to encode. */
export type OperationResult = Refused | Reply | Streamed;

/** What an operation whose reply is whole came to (every operation but chat). */
export type WholeResult = Refused | Reply;
