/**
 * Decodes an OpenAI-style SSE stream into frames to relay untouched, plus the usage it reports
 * (the final usage chunk, or vLLM's continuous usage on every chunk) and the delivered text.
 */
import type { ChatStreamDecoder, StreamFrame, StreamPiece, Usage } from "../types.ts";
import { openAIUsage, openAIUsageToUsage } from "./response.ts";

interface ChunkShape {
  choices?: { delta?: { content?: unknown; reasoning_content?: unknown; tool_calls?: { function?: { arguments?: unknown } }[] } }[];
  usage?: unknown;
  error?: { message?: unknown } | string;
  /** vLLM before 0.9 sends its error object bare: `{"object":"error","message":…,"code":500}`. */
  object?: unknown;
  message?: unknown;
}

function deltaText(chunk: ChunkShape): string {
  let text = "";
  for (const choice of chunk.choices ?? []) {
    const delta = choice?.delta;
    if (!delta) continue;
    if (typeof delta.content === "string") text += delta.content;
    if (typeof delta.reasoning_content === "string") text += delta.reasoning_content;
    for (const call of delta.tool_calls ?? []) {
      if (typeof call?.function?.arguments === "string") text += call.function.arguments;
    }
  }
  return text;
}

export class OpenAIStreamDecoder implements ChatStreamDecoder {
  private buffer = "";
  private dataLines: string[] = [];

  push(text: string): StreamPiece {
    const piece: StreamPiece = { frames: [], done: false };
    this.buffer += text;
    let newline: number;
    while ((newline = this.buffer.indexOf("\n")) !== -1) {
      let line = this.buffer.slice(0, newline);
      this.buffer = this.buffer.slice(newline + 1);
      if (line.endsWith("\r")) line = line.slice(0, -1);
      if (line === "") this.dispatch(piece);
      else if (line.startsWith("data:")) this.dataLines.push(line.slice(line.startsWith("data: ") ? 6 : 5));
    }
    return piece;
  }

  private dispatch(piece: StreamPiece): void {
    if (this.dataLines.length === 0) return;
    const data = this.dataLines.join("\n");
    this.dataLines = [];
    if (data === "[DONE]") {
      piece.done = true;
      return;
    }
    let chunk: ChunkShape;
    try {
      chunk = JSON.parse(data) as ChunkShape;
    } catch {
      piece.error = { code: "upstream_error", message: "The upstream sent a malformed stream chunk." };
      return;
    }
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
      data,
      usageOnly: Array.isArray(chunk.choices) && chunk.choices.length === 0 && !!usage?.success,
      text: deltaText(chunk),
    };
    if (piece.usage && usage?.success) frame.usage = piece.usage;
    piece.frames.push(frame);
  }
}

export type { Usage };
