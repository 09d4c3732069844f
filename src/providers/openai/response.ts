/** Reads OpenAI-style chat completion replies. */
import { z } from "zod";
import { boundedUsage } from "../chatShape.ts";
import type { ChatReply, Usage, UpstreamFailure } from "../types.ts";
import { parseUpstreamReply } from "../replyJson.ts";

export const openAIUsage = z.object({
  prompt_tokens: z.number().int().nonnegative(),
  completion_tokens: z.number().int().nonnegative(),
  prompt_tokens_details: z.looseObject({ cached_tokens: z.number().int().nonnegative().nullish() }).nullish().catch(null),
});

const chatCompletion = z.object({
  choices: z.array(z.unknown()),
  usage: openAIUsage.nullish(),
});

/**
 * `prompt_tokens` counts the whole prompt, `cached_tokens` the part of it read from OpenAI's cache.
 * @example openAIUsageToUsage({ prompt_tokens: 2000, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 1536 } })
 *   // { inputTokens: 2000, outputTokens: 5, cacheReadTokens: 1536 }
 */
export function openAIUsageToUsage(usage: z.infer<typeof openAIUsage>): Usage {
  return boundedUsage(usage.prompt_tokens, usage.completion_tokens, usage.prompt_tokens_details?.cached_tokens ?? 0, 0);
}

/** The reply is relayed as the upstream wrote it; only its usage is read. */
export function parseOpenAIChatResponse(text: string): ChatReply | UpstreamFailure {
  const parsed = parseUpstreamReply(text, chatCompletion, "a chat completion");
  if ("failure" in parsed) return parsed.failure;
  return { body: text, usage: parsed.reply.usage ? openAIUsageToUsage(parsed.reply.usage) : null };
}
