/**
 * The relay's chat frames → Anthropic's Messages stream, every event named (`event: <type>`):
 *
 *   start             message_start (empty content; input tokens 0 until the usage is known), ping
 *   reasoning delta   a thinking block: content_block_start, thinking_delta
 *   content delta     a text block: content_block_start, text_delta
 *   tool call delta   a tool_use block: content_block_start (id, name), input_json_delta
 *                     (a block of another kind, or a new call, stops the open block first)
 *   usage chunk       kept for the end
 *   [DONE]            content_block_stop, message_delta (stop_reason; usage with input and output
 *                     tokens, which the SDKs copy over message_start's), message_stop
 *   error frame       an `error` event (the SDKs raise it)
 *   keep-alive        ping
 */
import { onlyChoice, type ChatChunk, type ChatUsage, type ChunkDelta, type ChatFrame } from "../chat.ts";
import { failureToAnthropicError } from "./errors.ts";
import { finishReasonToStopReason, messageId, usageToAnthropic, type MessagesContext } from "./response.ts";

/** Tool calls per reply the translation tracks; more is an upstream fault, not a reason to grow. */
export const MESSAGES_STREAM_CALLS_MAX = 1_024;

type OpenBlock = { kind: "thinking" | "text" } | { kind: "tool"; callIndex: number };

export class MessagesStream {
  private blockIndex = -1;
  private open: OpenBlock | null = null;
  private readonly calls = new Set<number>();
  private usage: ChatUsage | null = null;
  private finishReason: string | null = null;
  private ended = false;

  constructor(private readonly ctx: MessagesContext) {}

  start(): string {
    const message = {
      id: messageId(this.ctx),
      type: "message",
      role: "assistant",
      model: this.ctx.model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: usageToAnthropic(null),
    };
    return event("message_start", { message }) + event("ping", {});
  }

  frame(frame: ChatFrame): string {
    if (this.ended) return "";
    switch (frame.kind) {
      case "keepAlive":
        return event("ping", {});
      case "chunk":
        return this.chunk(frame.chunk);
      case "done": {
        this.ended = true;
        const delta = { stop_reason: finishReasonToStopReason(this.finishReason), stop_sequence: null };
        const { input_tokens, output_tokens } = usageToAnthropic(this.usage);
        return this.stop() + event("message_delta", { delta, usage: { input_tokens, output_tokens } }) + event("message_stop", {});
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
    let out = "";
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
