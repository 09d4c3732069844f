/**
 * What the routes of the translated wires (Responses, Messages) share: the wire's body becomes a
 * chat body inside the one chat path (chat/route.ts `chat`: caller, then body, then admission),
 * and the relay's frames are re-written in the wire's own events. Nothing here meters or
 * settles: the chat path did.
 */
import type { Failure } from "../errors.ts";
import { chatFrameOf, type ChatFrame } from "../wires/chat.ts";
import { chat, type ChatResult } from "./chat/route.ts";
import { type Relay, RelayBody, type RelayFrame } from "./chat/relay.ts";
import type { EdgeDeps } from "./deps.ts";
import { isFailure } from "./guard.ts";
import { credentialsOf, readJsonBodyText } from "./request.ts";

/** A wire's stream translation: its opening events, then the events of each relay frame. */
export interface WireStream {
  start(): string;
  frame(frame: ChatFrame): string;
}

/**
 * Runs a wire's request down the chat path: `translate` turns the JSON body (read only once the
 * caller is known) into a chat body, or into the 400 the chat path records and returns.
 * Returns the chat result and the wire's own reading of the request, when it got that far.
 */
export async function chatThroughWire<W>(
  deps: EdgeDeps,
  request: Request,
  requestId: string,
  translate: (raw: unknown) => { request: W; chat: Record<string, unknown> } | Failure,
): Promise<{ result: ChatResult; wire: W | null }> {
  let wire: W | null = null;
  const result = await chat(deps, {
    requestId,
    credentials: credentialsOf(request),
    readBody: async () => {
      const read = await readJsonBodyText(request, deps.env.BODY_BYTES_MAX);
      if (isFailure(read)) return read;
      const translated = translate(read.value);
      if (isFailure(translated)) return translated;
      wire = translated.request;
      // The chat body sent on is the translation: its bytes are what the prompt bound measures.
      return { value: translated.chat, text: JSON.stringify(translated.chat) };
    },
    signal: request.signal,
  });
  return { result, wire };
}

const encoder = new TextEncoder();

/**
 * The relay's frames re-written by `wire`: what Elysia's generator route returns. A client that
 * stops pulling (Elysia returns the iterator) has left, as on chat's own SSE body.
 */
export function wireBody(relay: Relay, wire: WireStream): RelayBody {
  const render = (frames: RelayFrame[]) => {
    let text = "";
    for (const frame of frames) {
      const read = chatFrameOf(frame);
      if (read) text += wire.frame(read);
    }
    return text === "" ? null : encoder.encode(text);
  };
  return new RelayBody(relay, render, encoder.encode(wire.start()));
}

/** Sets a stream's reply headers (Elysia's `set`), as the chat route does. */
export function streamHeaders(set: { headers: Record<string, string | number> }, requestId: string, headers: Record<string, string>): void {
  Object.assign(set.headers, headers);
  set.headers["content-type"] = "text/event-stream";
  set.headers["cache-control"] = "no-cache";
  set.headers["x-request-id"] = requestId;
}
