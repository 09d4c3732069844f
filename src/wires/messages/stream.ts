/**
 * The relay's chat frames → Anthropic's Messages stream, every event named (`event: <type>`):
 *
 *   first frame       message_start (empty content; input tokens: the backend's count when it
 *                     told one at its start, as an Anthropic backend does, else the gateway's
 *                     own count, the cost value's input), ping; then the frame's own events
 *   reasoning delta   a thinking block: content_block_start, thinking_delta
 *   content delta     a text block: content_block_start, text_delta
 *   tool call delta   a tool_use block: content_block_start (id, name), input_json_delta
 *                     (a block of another kind, or a new call, stops the open block first)
 *   vendor block      a block of the vendor's web search (`delta.anthropic_block`), whole:
 *                     content_block_start, for a server_tool_use its input as one
 *                     input_json_delta, content_block_stop
 *   usage chunk       kept for the end
 *   [DONE]            content_block_stop, message_delta (stop_reason; usage with input and output
 *                     tokens, which the SDKs copy over message_start's, and the web searches
 *                     billed as `server_tool_use.web_search_requests`), message_stop
 *   error frame       an `error` event (the SDKs raise it)
 *   keep-alive        ping (an SSE comment before message_start)
 */
import { onlyChoice, type ChatChunk, type ChatUsage, type ChunkDelta, type ChatFrame, usageCost, type VendorBlock } from "../chat.ts";
import { failureToAnthropicError } from "./errors.ts";
import type { StreamFacts } from "../through.ts";
import { finishReasonToStopReason, messageId, serverToolUse, usageToAnthropic, type MessagesContext } from "./response.ts";

/** Tool calls per reply the translation tracks; more is an upstream fault, not a reason to grow. */
export const MESSAGES_STREAM_CALLS_MAX = 1_024;

type OpenBlock = { kind: "thinking" | "text" | "vendor" } | { kind: "tool"; callIndex: number };

export class MessagesStream {
  private blockIndex = -1;
  private open: OpenBlock | null = null;
  private readonly calls = new Set<number>();
  private usage: ChatUsage | null = null;
  private finishReason: string | null = null;
  private ended = false;
  private started = false;

  /** `inputTokensCounted`: the gateway's count of the input, for a backend that tells none at its start. */
  constructor(
    private readonly ctx: MessagesContext,
    private readonly inputTokensCounted = 0,
  ) {}

  /** Nothing yet: message_start waits for the first frame, which may carry the input count. */
  start(): string {
    return "";
  }

  private messageStart(inputTokens: number | null | undefined): string {
    this.started = true;
    const message = {
      id: messageId(this.ctx),
      type: "message",
      role: "assistant",
      model: this.ctx.model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { ...usageToAnthropic(null), input_tokens: inputTokens ?? this.inputTokensCounted },
    };
    return event("message_start", { message }) + event("ping", {});
  }

  /** `facts`: what the relay knows beside the frames (the input count told at the start, the searches billed at the end). */
  frame(frame: ChatFrame, facts?: StreamFacts): string {
    if (this.ended) return "";
    // A silence before the first chunk: a comment keeps the connection, message_start still waits.
    if (!this.started && frame.kind === "keepAlive") return ": keep-alive\n\n";
    const opening = this.started ? "" : this.messageStart(facts?.inputTokensAtStart);
    return opening + this.after(frame, facts?.hostedCallsBilled ?? 0);
  }

  private after(frame: ChatFrame, searches: number): string {
    switch (frame.kind) {
      case "keepAlive":
        return event("ping", {});
      case "chunk":
      case "usage":
        return this.chunk(frame.chunk);
      case "done": {
        this.ended = true;
        const delta = { stop_reason: finishReasonToStopReason(this.finishReason), stop_sequence: null };
        const { input_tokens, output_tokens } = usageToAnthropic(this.usage);
        const usage = { input_tokens, output_tokens, ...serverToolUse(searches), ...usageCost(this.usage) };
        return this.stop() + event("message_delta", { delta, usage }) + event("message_stop", {});
      }
      case "error":
        this.ended = true;
        return event("error", failureToAnthropicError(frame.failure).body);
    }
  }

  private chunk(chunk: ChatChunk): string {
    if (chunk.usage) this.usage = chunk.usage;
    const choice = onlyChoice(chunk);
    if (!choice) return "";
    const { delta, text } = choice;
    let out = delta.anthropic_block ? this.vendorBlock(delta.anthropic_block) : "";
    if (delta.reasoning_content) {
      out +=
        this.into({ kind: "thinking" }, { type: "thinking", thinking: "", signature: "" }) +
        this.delta({ type: "thinking_delta", thinking: delta.reasoning_content });
    }
    if (text !== "") out += this.into({ kind: "text" }, { type: "text", text: "" }) + this.delta({ type: "text_delta", text });
    for (const call of delta.tool_calls ?? []) out += this.call(call);
    this.finishReason = choice.finishReason ?? this.finishReason;
    return out;
  }

  /** A tool call's piece: a new call stops the open block and starts a tool_use block. */
  private call(call: NonNullable<ChunkDelta["tool_calls"]>[number]): string {
    let out = "";
    if (!this.calls.has(call.index)) {
      if (this.calls.size >= MESSAGES_STREAM_CALLS_MAX) return "";
      this.calls.add(call.index);
      const block = {
        type: "tool_use",
        id: call.id ?? `toolu_${this.ctx.requestId}_${call.index}`,
        name: call.function?.name ?? "",
        input: {},
      };
      out += this.stop() + this.begin({ kind: "tool", callIndex: call.index }, block);
    } else if (!(this.open?.kind === "tool" && this.open.callIndex === call.index)) return ""; // a call's late piece after another began
    const json = call.function?.arguments ?? "";
    return json === "" ? out : out + this.delta({ type: "input_json_delta", partial_json: json });
  }

  /** A block of the vendor's web search, whole: started, its input streamed (a call's), stopped. */
  private vendorBlock(block: VendorBlock): string {
    const call = block.type === "server_tool_use";
    const out = this.stop() + this.begin({ kind: "vendor" }, call ? { ...block, input: {} } : block);
    const input = call ? this.delta({ type: "input_json_delta", partial_json: JSON.stringify(block.input ?? {}) }) : "";
    return out + input + this.stop();
  }

  /** Makes a block of this kind the open one (text and thinking continue the open block of their kind). */
  private into(kind: { kind: "thinking" | "text" }, block: Record<string, unknown>): string {
    if (this.open?.kind === kind.kind) return "";
    return this.stop() + this.begin(kind, block);
  }

  private begin(open: OpenBlock, block: Record<string, unknown>): string {
    this.open = open;
    this.blockIndex++;
    return event("content_block_start", { index: this.blockIndex, content_block: block });
  }

  private delta(delta: Record<string, unknown>): string {
    return event("content_block_delta", { index: this.blockIndex, delta });
  }

  private stop(): string {
    if (!this.open) return "";
    this.open = null;
    return event("content_block_stop", { index: this.blockIndex });
  }
}

function event(type: string, fields: Record<string, unknown>): string {
  return `event: ${type}\ndata: ${JSON.stringify({ type, ...fields })}\n\n`;
}
