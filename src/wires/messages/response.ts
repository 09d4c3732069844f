/**
 * The gateway's chat reply → an Anthropic `message`. The reverse of the Anthropic adapter's
 * reading (src/providers/anthropic/response.ts): reasoning becomes a thinking block, text a text
 * block, each tool call a tool_use block with its arguments as an object. A reply in which an
 * Anthropic backend ran its web search keeps the vendor's content as sent (`anthropic_content`:
 * its server_tool_use and web_search_tool_result blocks where they were, the text's citations),
 * and its usage tells the searches billed (`server_tool_use.web_search_requests`).
 */
import { argumentsToObject } from "../../providers/chatShape.ts";
import { type ChatCompletion, type ChatUsage, usageCost } from "../chat.ts";

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

/** `searches`: the web searches billed, told as Anthropic does (`server_tool_use`) when there were any. */
export function usageToAnthropic(usage: ChatUsage | null, searches = 0) {
  return {
    input_tokens: usage?.prompt_tokens ?? 0,
    output_tokens: usage?.completion_tokens ?? 0,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: usage?.prompt_tokens_details?.cached_tokens ?? 0,
    ...serverToolUse(searches),
    ...usageCost(usage),
  };
}

/** @example serverToolUse(2) // { server_tool_use: { web_search_requests: 2 } } */
export function serverToolUse(searches: number): { server_tool_use?: { web_search_requests: number } } {
  return searches > 0 ? { server_tool_use: { web_search_requests: searches } } : {};
}

/**
 * A whole chat completion as a `message`; `searches`: the web searches billed.
 * @example chatToMessage(chatCompletionOf(json)!, ctx) // { type: "message", content: [{ type: "text", … }], stop_reason: "end_turn", … }
 */
export function chatToMessage(reply: ChatCompletion, ctx: MessagesContext, searches = 0): Record<string, unknown> {
  const choice = reply.choices[0]!;
  return {
    id: messageId(ctx),
    type: "message",
    role: "assistant",
    model: ctx.model,
    content: choice.message.anthropic_content ?? messageContent(choice.message),
    stop_reason: finishReasonToStopReason(choice.finish_reason),
    stop_sequence: null,
    usage: usageToAnthropic(reply.usage ?? null, searches),
  };
}

function messageContent(message: ChatCompletion["choices"][number]["message"]): Record<string, unknown>[] {
  const content: Record<string, unknown>[] = [];
  if (message.reasoning_content) content.push({ type: "thinking", thinking: message.reasoning_content, signature: "" });
  const text = message.content ?? message.refusal ?? "";
  if (text !== "") content.push({ type: "text", text });
  for (const call of message.tool_calls ?? []) {
    content.push({ type: "tool_use", id: call.id, name: call.function.name, input: argumentsToObject(call.function.arguments) });
  }
  return content;
}
