/** OpenAI Responses `response` object → OpenAI `chat.completion`, with its usage. */
import { z } from "zod";
import { completionToOpenAI, type FinishReason, type OpenAIToolCall } from "../../chatShape.ts";
import type { ChatReply, ReplyContext, Usage, UpstreamFailure } from "../../types.ts";
import { parseUpstreamReply } from "../../replyJson.ts";
import { boundedParts } from "../../../units.ts";

export const responsesUsage = z.looseObject({
  input_tokens: z.number().int().nonnegative(),
  output_tokens: z.number().int().nonnegative(),
  input_tokens_details: z.looseObject({ cached_tokens: z.number().int().nonnegative().nullish() }).nullish().catch(null),
});

const outputItem = z.union([
  z.looseObject({
    type: z.literal("message"),
    content: z.array(z.looseObject({ type: z.string(), text: z.string().optional(), refusal: z.string().optional() })),
  }),
  z.looseObject({ type: z.literal("function_call"), call_id: z.string(), name: z.string(), arguments: z.string() }),
  z.looseObject({ type: z.literal("reasoning"), content: z.array(z.looseObject({ text: z.string().optional() })).nullish() }),
  z.looseObject({ type: z.string() }),
]);

export const responsesObject = z.looseObject({
  object: z.literal("response").optional(),
  status: z.string().nullish(),
  incomplete_details: z.looseObject({ reason: z.string().nullish() }).nullish(),
  error: z.looseObject({ message: z.string() }).nullish(),
  output: z.array(outputItem),
  usage: responsesUsage.nullish(),
});

/**
 * As on chat, `input_tokens` counts the whole prompt and `input_tokens_details.cached_tokens` the
 * part of it read from the cache; `output_tokens_details.reasoning_tokens` is a part of
 * `output_tokens`, never added to it.
 * @example responsesUsageToUsage({ input_tokens: 2000, output_tokens: 500, input_tokens_details: { cached_tokens: 1536 } })
 *   // { input: 2000, output: 500, cache_read: 1536 }
 */
export function responsesUsageToUsage(usage: z.infer<typeof responsesUsage>): Usage {
  return boundedParts({
    input: usage.input_tokens,
    output: usage.output_tokens,
    cache_read: usage.input_tokens_details?.cached_tokens ?? 0,
  });
}

/** @example responsesStatusToFinishReason("incomplete", "max_output_tokens", false) // "length" */
export function responsesStatusToFinishReason(
  status: string | null | undefined,
  reason: string | null | undefined,
  calls: boolean,
): FinishReason {
  if (status === "incomplete") return reason === "content_filter" ? "content_filter" : "length";
  return calls ? "tool_calls" : "stop";
}

export function responsesToOpenAIResponse(text: string, context: ReplyContext): ChatReply | UpstreamFailure {
  const parsed = parseUpstreamReply(text, responsesObject, "a Responses API response");
  if ("failure" in parsed) return parsed.failure;
  const reply = parsed.reply;
  if (reply.status === "failed")
    return { code: "upstream_error", message: `The upstream failed: ${reply.error?.message ?? "no reason given"}`, retryable: true };
  let content = "";
  let reasoning = "";
  const toolCalls: OpenAIToolCall[] = [];
  for (const item of reply.output) {
    if (item.type === "message" && "content" in item && Array.isArray(item.content)) {
      for (const part of item.content as { type: string; text?: string; refusal?: string }[]) content += part.text ?? part.refusal ?? "";
    } else if (item.type === "function_call" && "call_id" in item) {
      const call = item as { call_id: string; name: string; arguments: string };
      toolCalls.push({ id: call.call_id, type: "function", function: { name: call.name, arguments: call.arguments } });
    } else if (item.type === "reasoning" && "content" in item && Array.isArray(item.content)) {
      for (const part of item.content as { text?: string }[]) reasoning += part.text ?? "";
    }
  }
  const usage = reply.usage ? responsesUsageToUsage(reply.usage) : null;
  const completion = completionToOpenAI(context, {
    text: content === "" && toolCalls.length > 0 ? null : content,
    reasoning: reasoning || null,
    toolCalls,
    finishReason: responsesStatusToFinishReason(reply.status, reply.incomplete_details?.reason, toolCalls.length > 0),
    usage,
  });
  return { ...completion, usage };
}
