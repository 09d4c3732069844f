/** Reads OpenAI-style chat completion replies. */
import { z } from "zod";
import { boundedParts } from "../../units.ts";
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
 *   // { input: 2000, output: 5, cache_read: 1536 }
 */
export function openAIUsageToUsage(usage: z.infer<typeof openAIUsage>): Usage {
  return boundedParts({
    input: usage.prompt_tokens,
    output: usage.completion_tokens,
    cache_read: usage.prompt_tokens_details?.cached_tokens ?? 0,
  });
}

/** The reply is relayed as the upstream wrote it; only its usage is read. */
export function parseOpenAIChatResponse(text: string): ChatReply | UpstreamFailure {
  const parsed = parseUpstreamReply(text, chatCompletion, "a chat completion");
  if ("failure" in parsed) return parsed.failure;
  return { body: text, json: parsed.json, usage: parsed.reply.usage ? openAIUsageToUsage(parsed.reply.usage) : null };
}
