/** Anthropic Messages reply → OpenAI `chat.completion`, with its usage. */
import { z } from "zod";
import { boundedParts } from "../../units.ts";
import { completionToOpenAI, type FinishReason, type OpenAIToolCall } from "../chatShape.ts";
import type { ChatReply, ReplyContext, Usage, UpstreamFailure } from "../types.ts";
import { parseUpstreamReply } from "../replyJson.ts";

export const anthropicUsage = z.looseObject({
  input_tokens: z.number().int().nonnegative().nullish(),
  output_tokens: z.number().int().nonnegative().nullish(),
  cache_creation_input_tokens: z.number().int().nonnegative().nullish(),
  cache_read_input_tokens: z.number().int().nonnegative().nullish(),
  /** The writes by lifetime (their sum is `cache_creation_input_tokens`). */
  cache_creation: z
    .looseObject({
      ephemeral_5m_input_tokens: z.number().int().nonnegative().nullish(),
      ephemeral_1h_input_tokens: z.number().int().nonnegative().nullish(),
    })
    .nullish(),
  /** Server tools run for this reply; each web search is billed per call. */
  server_tool_use: z.looseObject({ web_search_requests: z.number().int().nonnegative().nullish() }).nullish(),
});

// Loose: a block's other fields (a text's citations, a thinking's signature) stay for the
// reply kept whole when the vendor ran a search (anthropic_content below).
const contentBlock = z.union([
  z.looseObject({ type: z.literal("text"), text: z.string() }),
  z.looseObject({ type: z.literal("thinking"), thinking: z.string() }),
  z.looseObject({ type: z.literal("tool_use"), id: z.string(), name: z.string(), input: z.unknown() }),
  z.looseObject({ type: z.string() }),
]);

/**
 * The blocks of a tool the vendor ran itself (its web search): the call and its results. The
 * chat shape has no place for them, so they travel beside it as the vendor sent them: the whole
 * reply's content as `message.anthropic_content`, each block of a stream as a chunk's
 * `delta.anthropic_block` (stream.ts); the Messages and Responses wires read them back
 * (src/wires/messages, src/wires/responses). Chat's own wire never offers the tool, so never
 * gets them.
 * @example isServerToolBlock("web_search_tool_result") // true
 */
export function isServerToolBlock(type: string): boolean {
  return type === "server_tool_use" || type === "web_search_tool_result";
}

const anthropicMessage = z.object({
  type: z.literal("message"),
  content: z.array(contentBlock),
  stop_reason: z.string().nullish(),
  /** Anthropic always reports it; a proxy that drops it is billed as an upstream that reported none. */
  usage: anthropicUsage.nullish(),
});

/**
 * Cache writes and reads are prompt tokens Anthropic reports apart from `input_tokens`; the
 * customer's prompt was all of them, and each part is priced as Anthropic prices it: 1-hour
 * writes (`cache_creation.ephemeral_1h_input_tokens`, which Claude Code asks for) apart from
 * 5-minute ones. Web searches (`server_tool_use.web_search_requests`) are billed per call.
 * @example anthropicUsageToUsage({ input_tokens: 20, cache_creation_input_tokens: 1000, cache_read_input_tokens: 3000, output_tokens: 7,
 *   cache_creation: { ephemeral_5m_input_tokens: 400, ephemeral_1h_input_tokens: 600 } })
 *   // { input: 4020, output: 7, cache_read: 3000, cache_write: 1000, cache_write_1h: 600 }
 */
export function anthropicUsageToUsage(usage: z.infer<typeof anthropicUsage>): Usage {
  const read = usage.cache_read_input_tokens ?? 0;
  const write = usage.cache_creation_input_tokens ?? 0;
  const write1h = usage.cache_creation?.ephemeral_1h_input_tokens ?? 0;
  const searches = usage.server_tool_use?.web_search_requests;
  return boundedParts({
    input: (usage.input_tokens ?? 0) + write + read,
    output: usage.output_tokens ?? 0,
    cache_read: read,
    cache_write: write,
    cache_write_1h: write1h,
    ...(searches != null ? { hosted_call: searches } : {}),
  });
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
  const usage = reply.usage ? anthropicUsageToUsage(reply.usage) : null;
  const completion = completionToOpenAI(context, {
    text: content === "" && toolCalls.length > 0 ? null : content,
    reasoning: reasoning || null,
    toolCalls,
    finishReason: anthropicStopToFinishReason(reply.stop_reason),
    usage,
    vendorContent: reply.content.some((block) => isServerToolBlock(block.type)) ? reply.content : undefined,
  });
  return { ...completion, usage };
}
