/**
 * Gemini `streamGenerateContent?alt=sse` → OpenAI `chat.completion.chunk` frames. Every event is
 * a whole GenerateContentResponse: text parts become content (thought parts reasoning_content),
 * each functionCall part one tool call with its arguments whole (Gemini does not split them).
 * `usageMetadata` is a running total: the latest replaces the earlier. The event with a
 * `finishReason` ends the stream (Gemini sends no end marker): finish chunk, usage-only chunk,
 * done. An `{"error":…}` event becomes piece.error.
 */
import { usageChunkToOpenAI } from "../chatShape.ts";
import { JsonEventsDecoder } from "../jsonEvents.ts";
import type { StreamPiece, Usage } from "../types.ts";
import { geminiErrorDetail, geminiStreamErrorToFailure } from "./errors.ts";
import { geminiCallId, geminiFinishToFinishReason, geminiReply, geminiUsageToOpenAI } from "./response.ts";

export class GeminiStreamDecoder extends JsonEventsDecoder {
  private toolCalls = 0;
  private started = false;
  private usage: Usage | null = null;

  protected dispatch(json: unknown, _data: string, piece: StreamPiece): void {
    const error = geminiErrorDetail(json);
    if (error) {
      piece.error = geminiStreamErrorToFailure(error);
      return;
    }
    const parsed = geminiReply.safeParse(json);
    if (!parsed.success) {
      piece.error = { code: "upstream_error", message: "The upstream sent a stream event that is not a Gemini reply." };
      return;
    }
    const reply = parsed.data;
    if (!this.started) {
      this.started = true;
      this.frame(piece, { role: "assistant", content: "" }, "");
    }
    if (reply.usageMetadata) {
      this.usage = geminiUsageToOpenAI(reply.usageMetadata);
      piece.usage = this.usage;
    }
    const candidate = reply.candidates?.[0];
    for (const part of candidate?.content?.parts ?? []) {
      if (part.functionCall) {
        const index = this.toolCalls++;
        const args = JSON.stringify(part.functionCall.args ?? {});
        const id = geminiCallId(this.context, part.functionCall.id, index);
        this.frame(
          piece,
          { tool_calls: [{ index, id, type: "function", function: { name: part.functionCall.name, arguments: args } }] },
          args,
        );
      } else if (typeof part.text === "string" && part.text !== "") {
        this.frame(piece, part.thought ? { reasoning_content: part.text } : { content: part.text }, part.text);
      }
    }
    const blocked = !candidate && reply.promptFeedback?.blockReason;
    const finish = blocked ? "content_filter" : geminiFinishToFinishReason(candidate?.finishReason, this.toolCalls > 0);
    if (!finish) return;
    this.frame(piece, {}, "", finish);
    if (this.usage) piece.frames.push({ chunk: usageChunkToOpenAI(this.context, this.usage), json: null, usageOnly: true, text: "" });
    piece.done = true;
  }
}
