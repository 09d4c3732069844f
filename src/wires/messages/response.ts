/**
 * The gateway's chat reply → an Anthropic `message`. The reverse of the Anthropic adapter's
 * reading (src/providers/anthropic/response.ts): reasoning becomes a thinking block, text a text
 * block, each tool call a tool_use block with its arguments as an object.
 */
import { argumentsToObject } from "../../providers/chatShape.ts";
import type { ChatCompletion, ChatUsage } from "../chat.ts";

export interface MessagesContext {
  /** The gateway's request id: `msg_<requestId>` is the message's id. */
  requestId: string;
  /** The model id the client sent (a dated vendor id stays as sent). */
  model: string;
}

export type StopReason = "end_turn" | "max_tokens" | "tool_use" | "refusal";

/** @example finishReasonToStopReason("tool_calls") // "tool_use" */
export function finishReasonToStopReason(finish: string | null | undefined): StopReason {
  switch (finish) {
    case "length":
      return "max_tokens";
    case "tool_calls":
    case "function_call":
      return "tool_use";
    case "content_filter":
      return "refusal";
    default:
      return "end_turn";
  }
}

export const messageId = (ctx: Pick<MessagesContext, "requestId">) => `msg_${ctx.requestId}`;

export function usageToAnthropic(usage: ChatUsage | null) {
  return {
    input_tokens: usage?.prompt_tokens ?? 0,
    output_tokens: usage?.completion_tokens ?? 0,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: usage?.prompt_tokens_details?.cached_tokens ?? 0,
  };
}

/**
 * A whole chat completion as a `message`.
 * @example chatToMessage(parseChatCompletion(body)!, ctx) // { type: "message", content: [{ type: "text", … }], stop_reason: "end_turn", … }
 */
export function chatToMessage(reply: ChatCompletion, ctx: MessagesContext): Record<string, unknown> {
  const choice = reply.choices[0]!;
  const content: Record<string, unknown>[] = [];
  if (choice.message.reasoning_content) content.push({ type: "thinking", thinking: choice.message.reasoning_content, signature: "" });
  const text = choice.message.content ?? choice.message.refusal ?? "";
  if (text !== "") content.push({ type: "text", text });
  for (const call of choice.message.tool_calls ?? []) {
    content.push({ type: "tool_use", id: call.id, name: call.function.name, input: argumentsToObject(call.function.arguments) });
  }
  return {
    id: messageId(ctx),
    type: "message",
    role: "assistant",
    model: ctx.model,
    content,
    stop_reason: finishReasonToStopReason(choice.finish_reason),
    stop_sequence: null,
    usage: usageToAnthropic(reply.usage ?? null),
  };
}
