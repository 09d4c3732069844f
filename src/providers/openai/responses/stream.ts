/**
 * OpenAI Responses SSE → OpenAI `chat.completion.chunk` frames.
 *
 *   response.created                        → role chunk
 *   response.output_item.added (call)       → a tool call opens (id, name, empty arguments)
 *   response.output_text.delta              → content
 *   response.refusal.delta                  → refusal
 *   response.reasoning_text.delta,
 *   response.reasoning_summary_text.delta   → reasoning_content
 *   response.function_call_arguments.delta  → the call's streamed arguments
 *   response.completed / .incomplete        → finish_reason chunk, usage-only chunk, done
 *   response.failed, error                  → piece.error;  anything else → nothing
 */
import { z } from "zod";
import { usageChunkToOpenAI } from "../../chatShape.ts";
import { JsonEventsDecoder } from "../../jsonEvents.ts";
import type { StreamPiece } from "../../types.ts";
import { responsesObject, responsesStatusToFinishReason, responsesUsageToUsage } from "./response.ts";

/** Tool calls per reply we track; more is an upstream fault, not a reason to grow a map forever. */
export const responsesToolCallsMax = 1_024;

const streamEvent = z.discriminatedUnion("type", [
  z.looseObject({ type: z.literal("response.created") }),
  z.looseObject({
    type: z.literal("response.output_item.added"),
    item: z.looseObject({ type: z.string(), id: z.string().optional(), call_id: z.string().optional(), name: z.string().optional() }),
  }),
  z.looseObject({ type: z.literal("response.output_text.delta"), delta: z.string() }),
  z.looseObject({ type: z.literal("response.refusal.delta"), delta: z.string() }),
  z.looseObject({ type: z.literal("response.reasoning_text.delta"), delta: z.string() }),
  z.looseObject({ type: z.literal("response.reasoning_summary_text.delta"), delta: z.string() }),
  z.looseObject({ type: z.literal("response.function_call_arguments.delta"), item_id: z.string(), delta: z.string() }),
  z.looseObject({ type: z.literal("response.completed"), response: responsesObject }),
  z.looseObject({ type: z.literal("response.incomplete"), response: responsesObject }),
  z.looseObject({
    type: z.literal("response.failed"),
    response: z.looseObject({ error: z.looseObject({ message: z.string() }).nullish() }),
  }),
  z.looseObject({ type: z.literal("error"), message: z.string().optional() }),
]);

export class ResponsesStreamDecoder extends JsonEventsDecoder {
  /** Output item id → chat tool call index. */
  private readonly toolIndex = new Map<string, number>();

  protected dispatch(json: unknown, _data: string, piece: StreamPiece): void {
    const parsed = streamEvent.safeParse(json);
    // Event types this decoder does not translate (part added/done, item done …) carry nothing new.
    if (!parsed.success) return;
    const event = parsed.data;
    switch (event.type) {
      case "response.created":
        return this.frame(piece, { role: "assistant", content: "" }, "");
      case "response.output_item.added": {
        const item = event.item;
        if (item.type !== "function_call" || this.toolIndex.size >= responsesToolCallsMax) return;
        const index = this.toolIndex.size;
        this.toolIndex.set(item.id ?? item.call_id ?? String(index), index);
        const name = item.name ?? "";
        // The call's name is generated output, counted as a whole reply's is (chatShape.ts generatedText).
        return this.frame(
          piece,
          { tool_calls: [{ index, id: item.call_id ?? `call_${index}`, type: "function", function: { name, arguments: "" } }] },
          name,
        );
      }
      case "response.output_text.delta":
        return this.frame(piece, { content: event.delta }, event.delta);
      case "response.refusal.delta":
        return this.frame(piece, { refusal: event.delta }, event.delta);
      case "response.reasoning_text.delta":
      case "response.reasoning_summary_text.delta":
        return this.frame(piece, { reasoning_content: event.delta }, event.delta);
      case "response.function_call_arguments.delta": {
        const index = this.toolIndex.get(event.item_id);
        if (index !== undefined) this.frame(piece, { tool_calls: [{ index, function: { arguments: event.delta } }] }, event.delta);
        return;
      }
      case "response.completed":
      case "response.incomplete": {
        const response = event.response;
        this.frame(
          piece,
          {},
          "",
          responsesStatusToFinishReason(response.status, response.incomplete_details?.reason, this.toolIndex.size > 0),
        );
        if (response.usage) {
          const usage = responsesUsageToUsage(response.usage);
          piece.usage = usage;
          piece.frames.push({ chunk: usageChunkToOpenAI(this.context, usage), json: null, usageOnly: true, text: "", usage });
        }
        piece.done = true;
        return;
      }
      case "response.failed":
        piece.error = {
          code: "upstream_error",
          message: `The upstream failed mid-stream: ${event.response.error?.message ?? "no reason given"}`,
        };
        return;
      case "error":
        piece.error = { code: "upstream_error", message: `The upstream failed mid-stream: ${event.message ?? "unknown error"}` };
        return;
    }
  }
}
