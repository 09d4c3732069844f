/**
 * The first step of a translating stream decoder: the SSE events a piece of upstream text
 * completes (bounded by the splitter), each event's JSON handed to `dispatch` in order until one
 * ends the piece (done or error). A malformed event, or one past the bound, is an upstream error.
 */
import { chunkToOpenAI, type FinishReason } from "./chatShape.ts";
import type { ChunkDelta } from "./chunk.ts";
import { SseSplitter } from "./sse.ts";
import type { ChatStreamDecoder, ReplyContext, StreamPiece } from "./types.ts";

/** A vendor's JSON event stream → OpenAI chunks: the vendor's decoder says only what each event means. */
export abstract class JsonEventsDecoder implements ChatStreamDecoder {
  private readonly sse = new SseSplitter();

  constructor(protected readonly context: ReplyContext) {}

  push(text: string): StreamPiece {
    return decodeJsonEvents(this.sse, text, (json, data, piece) => this.dispatch(json, data, piece));
  }

  /** Reads one event (`data` is its raw text) into the piece: frames, usage, done or error. */
  protected abstract dispatch(json: unknown, data: string, piece: StreamPiece): void;

  protected frame(piece: StreamPiece, delta: ChunkDelta, text: string, finish: FinishReason | null = null): void {
    piece.frames.push({ chunk: chunkToOpenAI(this.context, delta, finish), json: null, usageOnly: false, text });
  }
}

function decodeJsonEvents(
  sse: SseSplitter,
  text: string,
  dispatch: (json: unknown, data: string, piece: StreamPiece) => void,
): StreamPiece {
  const piece: StreamPiece = { frames: [], done: false };
  let events: ReturnType<SseSplitter["push"]>;
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
