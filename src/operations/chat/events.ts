/**
 * What a stream's relay (relay.ts) hands its consumer: typed events, never wire text. Each
 * transport encodes them once: chat's SSE (src/http/chat/sse.ts), a translated wire's events
 * (src/wires/through.ts), the NATS service's messages (src/internal/service.ts).
 *
 *   chunk      a chat.completion.chunk as a value, with the upstream's own JSON of it when it is
 *              the upstream's (the chat wire relays that text untouched; src/providers/chunk.ts)
 *   usage      the usage chunk, sent once the stream is settled, its `usage.cost` the bill
 *   keepAlive  a long upstream silence: the connection is alive
 *   done       the stream finished (or was cut at its hold, after its `length` chunks)
 *   error      the stream failed: the failure its client is told
 */
import type { Failure } from "../../errors.ts";
import type { ChunkText } from "../../providers/chunk.ts";

export type RelayEvent =
  | (ChunkText & { kind: "chunk" })
  | (ChunkText & { kind: "usage" })
  | { kind: "keepAlive" }
  | { kind: "done" }
  | { kind: "error"; failure: Failure };

/** What `Relay.taken` returns while the stream goes on with nothing queued. */
export const NOTHING_YET = Object.freeze([]) as unknown as RelayEvent[];
