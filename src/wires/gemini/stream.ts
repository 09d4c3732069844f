/**
 * The relay's chat frames → Gemini's stream of GenerateContentResponse events, as server-sent
 * events (`alt=sse`, what the SDKs ask for) or as one JSON array written piece by piece (without it):
 *
 *   content delta     an event with a text part
 *   reasoning delta   an event with a `thought: true` text part
 *   tool call pieces  kept until the end: Gemini sends each functionCall whole
 *   finish, usage     kept for the end
 *   [DONE]            the last event: the function calls, finishReason and usageMetadata
 *   error frame       an `{"error":{code,message,status}}` event (the SDK raises it)
 *   keep-alive        an SSE comment, or whitespace inside the array
 */
import { onlyChoice, type ChatChunk, type ChatFrame, type ChatUsage } from "../chat.ts";
import { failureToGoogleError } from "./errors.ts";
import { finishReasonToGemini, functionCallPart, geminiResponse, type GeminiContext } from "./response.ts";

/** Tool calls per reply the translation keeps; more is an upstream fault, not a reason to grow. */
export const GEMINI_STREAM_CALLS_MAX = 1_024;

export class GeminiStream {
  private readonly calls = new Map<number, { id: string; name: string; arguments: string }>();
  private usage: ChatUsage | null = null;
  private finishReason: string | null = null;
  private ended = false;
  private events = 0;

  /** `sse`: server-sent events; otherwise a JSON array. */
  constructor(
    private readonly ctx: GeminiContext,
    private readonly sse: boolean,
  ) {}

  start(): string {
    return this.sse ? "" : "[";
  }

  frame(frame: ChatFrame): string {
    if (this.ended) return "";
    switch (frame.kind) {
      case "keepAlive":
        return this.sse ? ": keep-alive\n\n" : "\n";
      case "chunk":
      case "usage":
        return this.chunk(frame.chunk);
      case "done": {
        this.ended = true;
        const parts = [...this.calls.values()].map(functionCallPart);
        const end = { finishReason: finishReasonToGemini(this.finishReason), usage: this.usage };
        return this.event(geminiResponse(this.ctx, parts, end)) + this.close();
      }
      case "error":
        this.ended = true;
        return this.event(failureToGoogleError(frame.failure).body) + this.close();
    }
  }

  private chunk(chunk: ChatChunk): string {
    const choice = onlyChoice(chunk);
    this.usage = chunk.usage ?? this.usage;
    this.finishReason = choice?.finishReason ?? this.finishReason;
    if (!choice) return "";
    const { delta, text } = choice;
    for (const piece of delta.tool_calls ?? []) {
      const call = this.calls.get(piece.index);
      if (call) call.arguments += piece.function?.arguments ?? "";
      else if (this.calls.size < GEMINI_STREAM_CALLS_MAX) {
        this.calls.set(piece.index, {
          id: piece.id ?? `call_${this.ctx.requestId}_${piece.index}`,
          name: piece.function?.name ?? "",
          arguments: piece.function?.arguments ?? "",
        });
      }
    }
    const parts: Record<string, unknown>[] = [];
    if (delta.reasoning_content) parts.push({ text: delta.reasoning_content, thought: true });
    if (text !== "") parts.push({ text });
    return parts.length === 0 ? "" : this.event(geminiResponse(this.ctx, parts, null));
  }

  private event(value: unknown): string {
    const json = JSON.stringify(value);
    if (this.sse) return `data: ${json}\r\n\r\n`;
    return this.events++ === 0 ? json : `,\r\n${json}`;
  }

  private close(): string {
    return this.sse ? "" : "]";
  }
}
