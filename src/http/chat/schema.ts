/**
 * The chat completion request as the gateway checks it. Only what the gateway itself relies on
 * is checked strictly; every other standard or vendor field passes through to the upstream.
 */
import { z } from "zod";

/** Choices per request: the output budget, and so the reserve, is multiplied by n. */
export const CHOICES_MAX = 8;
export const MESSAGES_MAX = 100_000;

const tokens = z.number().int().min(1).max(100_000_000);

export const chatMessage = z.looseObject({
  role: z.enum(["system", "developer", "user", "assistant", "tool", "function"]),
  content: z.union([z.string(), z.array(z.unknown()), z.null()]).optional(),
  name: z.string().optional(),
});

export const chatRequest = z.looseObject({
  model: z.string().min(1).max(256),
  messages: z.array(chatMessage).min(1).max(MESSAGES_MAX),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullish(),
  max_tokens: tokens.nullish(),
  max_completion_tokens: tokens.nullish(),
  n: z.number().int().min(1).max(CHOICES_MAX).nullish(),
  tools: z.array(z.unknown()).max(1_000).nullish(),
});

export type ChatRequest = z.infer<typeof chatRequest>;
