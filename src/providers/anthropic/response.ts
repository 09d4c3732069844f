/** Anthropic Messages reply → OpenAI `chat.completion`, with its usage. */
import { z } from "zod";
import { boundedUsage, completionToOpenAI, type FinishReason, type OpenAIToolCall } from "../chatShape.ts";
import type { ChatReply, ReplyContext, Usage, UpstreamFailure } from "../types.ts";
import { parseUpstreamReply } from "../replyJson.ts";

export const anthropicUsage = z.looseObject({
  input_tokens: z.number().int().nonnegative().nullish(),
  output_tokens: z.number().int().nonnegative().nullish(),
  cache_creation_input_tokens: z.number().int().nonnegative().nullish(),
  cache_read_input_tokens: z.number().int().nonnegative().nullish(),
});

const contentBlock = z.union([
  z.object({ type: z.literal("text"), text: z.string() }),
  z.object({ type: z.literal("thinking"), thinking: z.string() }),
  z.object({ type: z.literal("tool_use"), id: z.string(), name: z.string(), input: z.unknown() }),
  z.looseObject({ type: z.string() }),
]);

const anthropicMessage = z.object({
  type: z.literal("message"),
  content: z.array(contentBlock),
  stop_reason: z.string().nullish(),
  usage: anthropicUsage,
});

/**
 * Cache writes and reads are prompt tokens Anthropic reports apart from `input_tokens`; the
 * customer's prompt was all of them, and each part is priced as Anthropic prices it.
 * @example anthropicUsageToUsage({ input_tokens: 20, cache_creation_input_tokens: 1000, cache_read_input_tokens: 3000, output_tokens: 7 })
 *   // { inputTokens: 4020, outputTokens: 7, cacheReadTokens: 3000, cacheWriteTokens: 1000 }
 */
export function anthropicUsageToUsage(usage: z.infer<typeof anthropicUsage>): Usage {
  const read = usage.cache_read_input_tokens ?? 0;
  const write = usage.cache_creation_input_tokens ?? 0;
  return boundedUsage((usage.input_tokens ?? 0) + write + read, usage.output_tokens ?? 0, read, write);
}

/** @example anthropicStopToFinishReason("tool_use") // "tool_calls" */
export function anthropicStopToFinishReason(stop: string | null | undefined): FinishReason | null {
  switch (stop) {
    case "end_turn":
    case "stop_sequence":
    case "pause_turn":
      return "stop";
    case "max_tokens":
    case "model_context_window_exceeded":
      return "length";
    case "tool_use":
      return "tool_calls";
    case "refusal":
      return "content_filter";
    default:
      return stop ? "stop" : null;
  }
}

export function anthropicToOpenAIResponse(text: string, context: ReplyContext): ChatReply | UpstreamFailure {
  const parsed = parseUpstreamReply(text, anthropicMessage, "an Anthropic message");
  if ("failure" in parsed) return parsed.failure;
  const reply = parsed.reply;
  let content = "";
  let reasoning = "";
  const toolCalls: OpenAIToolCall[] = [];
  for (const block of reply.content) {
    if (block.type === "text" && "text" in block) content += block.text;
    else if (block.type === "thinking" && "thinking" in block) reasoning += block.thinking;
    else if (block.type === "tool_use" && "name" in block && "id" in block) {
      toolCalls.push({
        id: block.id as string,
        type: "function",
        function: { name: block.name as string, arguments: JSON.stringify(block.input ?? {}) },
      });
    }
  }
  const usage = anthropicUsageToUsage(reply.usage);
  const body = completionToOpenAI(context, {
    text: content === "" && toolCalls.length > 0 ? null : content,
    reasoning: reasoning || null,
    toolCalls,
    finishReason: anthropicStopToFinishReason(reply.stop_reason),
    usage,
  });
  return { body, usage };
}
