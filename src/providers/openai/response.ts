/** Reads OpenAI-style chat completion replies. */
import { z } from "zod";
import type { ChatReply, Usage, UpstreamFailure } from "../types.ts";

export const openAIUsage = z.object({
  prompt_tokens: z.number().int().nonnegative(),
  completion_tokens: z.number().int().nonnegative(),
});

const chatCompletion = z.object({
  choices: z.array(z.unknown()),
  usage: openAIUsage.nullish(),
});

export function openAIUsageToUsage(usage: z.infer<typeof openAIUsage>): Usage {
  return { inputTokens: usage.prompt_tokens, outputTokens: usage.completion_tokens };
}

/** The reply is relayed as the upstream wrote it; only its usage is read. */
export function parseOpenAIChatResponse(text: string): ChatReply | UpstreamFailure {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { code: "upstream_error", message: "The upstream replied with malformed JSON.", retryable: true };
  }
  const parsed = chatCompletion.safeParse(json);
  if (!parsed.success) return { code: "upstream_error", message: "The upstream reply is not a chat completion.", retryable: true };
  return { body: text, usage: parsed.data.usage ? openAIUsageToUsage(parsed.data.usage) : null };
}
