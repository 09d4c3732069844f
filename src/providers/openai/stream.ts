/**
 * Decodes an OpenAI-style SSE stream into frames to relay untouched, plus the usage it reports
 * (the final usage chunk, or vLLM's continuous usage on every chunk) and the delivered text.
 */
import { generatedText, type GeneratedFields } from "../chatShape.ts";
import { SseSplitter } from "../sse.ts";
import { chatChunkOf } from "../chunk.ts";
import type { ChatStreamDecoder, StreamFrame, StreamPiece, Usage } from "../types.ts";
import { openAIUsage, openAIUsageToUsage } from "./response.ts";

interface ChunkShape {
  choices?: { delta?: GeneratedFields }[];
  usage?: unknown;
  error?: { message?: unknown } | string;
  /** vLLM before 0.9 sends its error object bare: `{"object":"error","message":…,"code":500}`. */
  object?: unknown;
  message?: unknown;
}

/** Every choice's generated text in the chunk (chatShape.ts `generatedText`: the same fields as a whole reply's). */
function deltaText(chunk: ChunkShape): string {
  let text = "";
  for (const choice of chunk.choices ?? []) if (choice?.delta) text += generatedText(choice.delta);
  return text;
}

export class OpenAIStreamDecoder implements ChatStreamDecoder {
  private readonly sse = new SseSplitter();

  push(text: string): StreamPiece {
    const piece: StreamPiece = { frames: [], done: false };
    for (const event of this.sse.push(text)) this.dispatch(piece, event.data);
    return piece;
  }

  private dispatch(piece: StreamPiece, data: string): void {
    if (data === "[DONE]") {
      piece.done = true;
      return;
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(data);
    } catch {
      piece.error = { code: "upstream_error", message: "The upstream sent a malformed stream chunk." };
      return;
    }
    const chunk = parsed as ChunkShape;
    if (chunk.error || chunk.object === "error") {
      const message = chunk.error
        ? typeof chunk.error === "string"
          ? chunk.error
          : String(chunk.error.message ?? "unknown error")
        : String(chunk.message ?? "unknown error");
      piece.error = { code: "upstream_error", message: `The upstream failed mid-stream: ${message}` };
      return;
    }
    const usage = chunk.usage ? openAIUsage.safeParse(chunk.usage) : null;
    if (usage?.success) piece.usage = openAIUsageToUsage(usage.data);
    const frame: StreamFrame = {
      // Checked in place: the chat wire relays `data` untouched, the other wires read the value.
      chunk: chatChunkOf(parsed),
      json: data,
      usageOnly: Array.isArray(chunk.choices) && chunk.choices.length === 0 && !!usage?.success,
      text: deltaText(chunk),
    };
    if (piece.usage && usage?.success) frame.usage = piece.usage;
    piece.frames.push(frame);
  }
}

export type { Usage };
