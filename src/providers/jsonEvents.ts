/**
 * The first step of a translating stream decoder: the SSE events a piece of upstream text
 * completes (bounded by the splitter), each event's JSON handed to `dispatch` in order until one
 * ends the piece (done or error). A malformed event, or one past the bound, is an upstream error.
 */
import { SseSplitter } from "./sse.ts";
import type { StreamPiece } from "./types.ts";

export function decodeJsonEvents(
  sse: SseSplitter,
  text: string,
  dispatch: (json: unknown, data: string, piece: StreamPiece) => void,
): StreamPiece {
  const piece: StreamPiece = { frames: [], done: false };
  let events;
  try {
    events = sse.push(text);
  } catch (error) {
    piece.error = { code: "upstream_error", message: (error as Error).message };
    return piece;
  }
  for (const event of events) {
    if (piece.done || piece.error) break;
    let json: unknown;
    try {
      json = JSON.parse(event.data);
    } catch {
      piece.error = { code: "upstream_error", message: "The upstream sent a malformed stream event." };
      break;
    }
    dispatch(json, event.data, piece);
  }
  return piece;
}
