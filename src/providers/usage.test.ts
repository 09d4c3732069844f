/**
 * One prompt and one reply as each vendor reports them, where peers have billed wrong: cached
 * tokens counted inside the prompt (OpenAI chat and Responses, Gemini) or beside it (Anthropic),
 * and reasoning counted inside the output (OpenAI) or beside it (Gemini). Every report is the
 * same usage, and the same bill: the cached part at the cache price once, the rest at the input
 * price, the reasoning once.
 */
import { expect, test } from "bun:test";
import { costOf, splitParts, type UnitAmounts as PricedUnits } from "../units.ts";
import { anthropicUsageToUsage } from "./anthropic/response.ts";
import { geminiUsageToOpenAI } from "./gemini/response.ts";
import { openAIUsageToUsage } from "./openai/response.ts";
import { responsesUsageToUsage } from "./openai/responses/response.ts";
import type { Usage } from "./types.ts";

// 2,000 prompt tokens of which 1,536 read from the cache; 500 output tokens of which 300 reasoning.
const REPORTS: [string, Usage][] = [
  [
    "OpenAI chat: cached inside prompt_tokens, reasoning inside completion_tokens",
    openAIUsageToUsage({
      prompt_tokens: 2_000,
      completion_tokens: 500,
      prompt_tokens_details: { cached_tokens: 1_536 },
      completion_tokens_details: { reasoning_tokens: 300 },
    } as Parameters<typeof openAIUsageToUsage>[0]),
  ],
  [
    "OpenAI Responses: cached inside input_tokens, reasoning inside output_tokens",
    responsesUsageToUsage({
      input_tokens: 2_000,
      output_tokens: 500,
      input_tokens_details: { cached_tokens: 1_536 },
      output_tokens_details: { reasoning_tokens: 300 },
    }),
  ],
  [
    "Anthropic: cache reads beside input_tokens",
    anthropicUsageToUsage({ input_tokens: 464, cache_read_input_tokens: 1_536, output_tokens: 500 }),
  ],
  [
    "Gemini: cached inside promptTokenCount, thoughts beside candidatesTokenCount",
    geminiUsageToOpenAI({ promptTokenCount: 2_000, cachedContentTokenCount: 1_536, candidatesTokenCount: 200, thoughtsTokenCount: 300 }),
  ],
];

// Micro-toman per token: input, cache read (a tenth), output.
const PRICES = { input: 100n, cache_read: 10n, output: 400n };

function billOf(usage: Usage): bigint {
  const split = splitParts(usage, (unit) => unit in PRICES);
  const units: PricedUnits = {};
  for (const [unit, count] of Object.entries(split)) units[unit as keyof PricedUnits] = BigInt(count ?? 0);
  return costOf(units, PRICES);
}

test.each(REPORTS)("%s: the same usage", (_, usage) => {
  expect(usage).toEqual({ input: 2_000, output: 500, cache_read: 1_536 });
});

test.each(REPORTS)("%s: the cached part at the cache price once, never at the input price, reasoning once", (_, usage) => {
  // 464 × 100 + 1,536 × 10 + 500 × 400
  expect(billOf(usage)).toBe(46_400n + 15_360n + 200_000n);
});
