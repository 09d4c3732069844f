/**
 * Chat's own stream over HTTP: the relay's events (src/operations/chat/events.ts) as OpenAI's
 * server-sent events, each batch taken encoded once.
 *
 *   chunk, usage  `data: <chunk JSON>`: the upstream's own text when it sent the chunk as is
 *   keepAlive     `: keep-alive` (a comment: clients ignore it, proxies see the connection alive)
 *   done          `data: [DONE]`
 *   error         `data: {"error":…}` (OpenAI's error body)
 */
import { errorBody } from "../../errors.ts";
import { chunkJson } from "../../providers/chunk.ts";
import type { RelayEvent } from "../../operations/chat/events.ts";
import { type Relay, RelayBody } from "../../operations/chat/relay.ts";

const encoder = new TextEncoder();

/** One event's SSE text. */
export function chatSse(event: RelayEvent): string {
  switch (event.kind) {
    case "chunk":
    case "usage":
      return `data: ${chunkJson(event)}\n\n`;
    case "keepAlive":
      return ": keep-alive\n\n";
    case "done":
      return "data: [DONE]\n\n";
    case "error":
      return `data: ${JSON.stringify(errorBody(event.failure))}\n\n`;
  }
}

/** Chat's SSE body: what Elysia's generator route returns. */
export function sseBody(relay: Relay): RelayBody {
  return new RelayBody(relay, (events) => {
    let text = "";
    for (const event of events) text += chatSse(event);
    return encoder.encode(text);
  });
}
