/**
 * Anthropic Messages SSE → OpenAI `chat.completion.chunk` frames.
 *
 *   message_start        → role chunk; input usage read (and told as the input at the start)
 *   content_block_start  → a tool_use block opens a tool call (id, name, empty arguments); a
 *                          web_search_tool_result block → one chunk with `delta.anthropic_block`
 *                          (the block as sent); a server_tool_use block is kept until its stop
 *   content_block_delta  → text_delta → content; thinking_delta → reasoning_content;
 *                          input_json_delta → the tool call's streamed arguments (a
 *                          server_tool_use's: its input, kept)
 *   content_block_stop   → a server_tool_use block, its input whole, as `delta.anthropic_block`
 *   message_delta        → finish_reason chunk; output usage read (cumulative: replaced, not added)
 *   message_stop         → usage-only chunk (empty choices), then done
 *   error                → piece.error;  ping → nothing
 */
import { z } from "zod";
import { argumentsToObject, usageChunkToOpenAI } from "../chatShape.ts";
import type { VendorBlock } from "../chunk.ts";
import { JsonEventsDecoder } from "../jsonEvents.ts";
import type { StreamPiece, Usage } from "../types.ts";
import { anthropicStreamErrorToFailure } from "./errors.ts";
import { anthropicStopToFinishReason, anthropicUsage, anthropicUsageToUsage, isServerToolBlock } from "./response.ts";

const streamEvent = z.discriminatedUnion("type", [
  z.object({ type: z.literal("message_start"), message: z.looseObject({ usage: anthropicUsage.nullish() }) }),
  z.object({
    type: z.literal("content_block_start"),
    index: z.number().int(),
    content_block: z.looseObject({ type: z.string(), id: z.string().optional(), name: z.string().optional() }),
  }),
  z.object({
    type: z.literal("content_block_delta"),
    index: z.number().int(),
    delta: z.looseObject({
      type: z.string(),
      text: z.string().optional(),
      thinking: z.string().optional(),
      partial_json: z.string().optional(),
    }),
  }),
  z.object({ type: z.literal("content_block_stop"), index: z.number().int() }),
  z.object({
    type: z.literal("message_delta"),
    delta: z.looseObject({ stop_reason: z.string().nullish() }),
    usage: anthropicUsage.nullish(),
  }),
  z.object({ type: z.literal("message_stop") }),
  z.object({ type: z.literal("ping") }),
  z.object({ type: z.literal("error"), error: z.unknown() }),
]);

/** Tool calls per reply we track; more is an upstream fault, not a reason to grow a map forever. */
export const anthropicToolCallsMax = 1_024;
/**
 * Characters of a vendor-run tool call's input kept (a search's query is a line); past it the
 * input is relayed as the block started, without its streamed pieces.
 */
export const SERVER_TOOL_INPUT_CHARS_MAX = 65_536;

export class AnthropicStreamDecoder extends JsonEventsDecoder {
  /** Content block index → OpenAI tool call index. */
  private readonly toolIndex = new Map<number, number>();
  private readonly usage: { input: z.infer<typeof anthropicUsage>; output: number } = { input: {}, output: 0 };
  private usageSeen = false;
  /** The vendor-run tool call being streamed (one at a time: blocks do not interleave). */
  private serverCall: { index: number; block: VendorBlock; json: string } | null = null;

  private current(): Usage {
    return anthropicUsageToUsage({ ...this.usage.input, output_tokens: this.usage.output });
  }

  protected dispatch(json: unknown, data: string, piece: StreamPiece): void {
    const parsed = streamEvent.safeParse(json);
    // Event types added after this adapter was written are skipped, as Anthropic asks clients to.
    if (!parsed.success) {
      if ((json as { type?: unknown })?.type === "error") piece.error = anthropicStreamErrorToFailure(data);
      return;
    }
    const event = parsed.data;
    switch (event.type) {
      case "message_start":
        if (event.message.usage) {
          this.usage.input = event.message.usage;
          this.usage.output = event.message.usage.output_tokens ?? 0;
          this.usageSeen = true;
          piece.inputTokensAtStart = this.current().input;
        }
        this.frame(piece, { role: "assistant", content: "" }, "");
        return;
      case "content_block_start":
        return this.blockStart(event, piece);
      case "content_block_delta":
        return this.blockDelta(event, piece);
      case "message_delta":
        if (event.usage) {
          // Cumulative: the latest counts replace the earlier ones.
          if (event.usage.output_tokens != null) this.usage.output = event.usage.output_tokens;
          if (event.usage.input_tokens != null) this.usage.input = { ...this.usage.input, ...stripNulls(event.usage) };
          else if (event.usage.server_tool_use != null)
            this.usage.input = { ...this.usage.input, server_tool_use: event.usage.server_tool_use };
          this.usageSeen = true;
        }
        if (event.delta.stop_reason) this.frame(piece, {}, "", anthropicStopToFinishReason(event.delta.stop_reason));
        if (this.usageSeen) piece.usage = this.current();
        return;
      case "message_stop":
        if (this.usageSeen) {
          const usage = this.current();
          piece.usage = usage;
          piece.frames.push({ chunk: usageChunkToOpenAI(this.context, usage), json: null, usageOnly: true, text: "" });
        }
        piece.done = true;
        return;
      case "error":
        piece.error = anthropicStreamErrorToFailure(data);
        return;
      case "content_block_stop": {
        const server = this.serverCall;
        if (server?.index !== event.index) return;
        this.serverCall = null;
        this.frame(
          piece,
          { anthropic_block: { ...server.block, input: server.json === "" ? (server.block.input ?? {}) : argumentsToObject(server.json) } },
          "",
        );
        return;
      }
      case "ping":
        return;
    }
  }

  /** A content block opens: a tool call (given its OpenAI index, within anthropicToolCallsMax), or a vendor-run tool's block. */
  private blockStart(event: StreamEventOf<"content_block_start">, piece: StreamPiece): void {
    const block = event.content_block;
    if (block.type === "server_tool_use") this.serverCall = { index: event.index, block, json: "" };
    else if (isServerToolBlock(block.type)) this.frame(piece, { anthropic_block: block }, "");
    if (block.type !== "tool_use" || this.toolIndex.size >= anthropicToolCallsMax) return;
    const index = this.toolIndex.size;
    this.toolIndex.set(event.index, index);
    this.frame(
      piece,
      {
        tool_calls: [{ index, id: block.id ?? `call_${index}`, type: "function", function: { name: block.name ?? "", arguments: "" } }],
      },
      "",
    );
  }

  /** A content block grows: text, thinking, or a tool call's arguments (a vendor-run call's kept, bounded). */
  private blockDelta(event: StreamEventOf<"content_block_delta">, piece: StreamPiece): void {
    const delta = event.delta;
    if (delta.type === "text_delta" && delta.text !== undefined) this.frame(piece, { content: delta.text }, delta.text);
    else if (delta.type === "thinking_delta" && delta.thinking !== undefined)
      this.frame(piece, { reasoning_content: delta.thinking }, delta.thinking);
    else if (delta.type === "input_json_delta" && delta.partial_json !== undefined) {
      const server = this.serverCall;
      if (server?.index === event.index && server.json.length + delta.partial_json.length <= SERVER_TOOL_INPUT_CHARS_MAX)
        server.json += delta.partial_json;
      const index = this.toolIndex.get(event.index);
      if (index !== undefined)
        this.frame(piece, { tool_calls: [{ index, function: { arguments: delta.partial_json } }] }, delta.partial_json);
    }
  }
}

type StreamEventOf<T extends z.infer<typeof streamEvent>["type"]> = Extract<z.infer<typeof streamEvent>, { type: T }>;

function stripNulls(usage: z.infer<typeof anthropicUsage>): z.infer<typeof anthropicUsage> {
  return Object.fromEntries(Object.entries(usage).filter(([, v]) => v != null));
}
