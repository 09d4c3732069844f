/**
 * The reserve and the price of a chat request's prompt-cache parts: a request marked for
 * Anthropic's cache is bounded at the cache-write price; cache reads and writes are priced at the
 * model's cache prices, or as input when it has none.
 */
import { describe, expect, test } from "bun:test";
import { pricedAt, unitPricesOf } from "../../admission/prices.ts";
import { reserveMicro } from "../../admission/reserve.ts";
import type { CatalogModel } from "../../catalog/catalog.ts";
import { costOf } from "../../units.ts";
import { chatBudget } from "./budget.ts";
import { CACHE_MARKS_SCAN_MAX, marksCache } from "./cache.ts";
import { chatReserve } from "./chat.ts";
import { chatRequest } from "./schema.ts";

/** claude-sonnet-4's toman prices at 90,000 toman per USD: $3 input, $15 output, $0.30 read, $3.75 write. */
const SONNET = new Map([
  ["input_token", 270_000n],
  ["output_token", 1_350_000n],
  ["cache_read_token", 27_000n],
  ["cache_write_token", 337_500n],
]);
const model = (prices: Map<string, bigint>) =>
  ({
    id: "claude-sonnet-4",
    operation: "chat",
    contextWindow: 200_000,
    price: { versionId: 1, tomanPerUsd: 90_000n, tomanPer1m: prices },
  }) as unknown as CatalogModel;

const marked = { type: "text", text: "A long document.", cache_control: { type: "ephemeral" } };

async function reserveOf(body: Record<string, unknown>, prices = SONNET) {
  const parsed = chatRequest.parse({ model: "claude-sonnet-4", max_tokens: 10, ...body });
  const budget = await chatBudget(parsed, model(prices), { fairnessKey: "t" });
  if ("code" in budget) throw new Error(budget.message);
  return { reserve: chatReserve(parsed, budget, model(prices), "t"), budget };
}

describe("reserve", () => {
  test("a marked prompt is bounded at the cache-write price, an unmarked one at the input price", async () => {
    const plain = await reserveOf({ messages: [{ role: "user", content: [{ type: "text", text: "A long document." }] }] });
    const cached = await reserveOf({ messages: [{ role: "user", content: [marked] }] });
    const bound = plain.budget.promptTokensBound;
    expect(cached.budget.promptTokensBound).toBe(bound);
    expect(reserveMicro(plain.reserve)).toBe(BigInt(bound) * 270_000n + 10n * 1_350_000n);
    expect(reserveMicro(cached.reserve)).toBe(BigInt(bound) * 337_500n + 10n * 1_350_000n);
    // Settlement still prices input at the input price.
    expect(cached.reserve.input.pricePer1m).toBe(270_000n);
  });

  test("a model without a cache-write price keeps the input price even when marked", async () => {
    const noCache = new Map([...SONNET].filter(([unit]) => !unit.startsWith("cache_")));
    const cached = await reserveOf({ messages: [{ role: "user", content: [marked] }] }, noCache);
    expect(cached.reserve.inputPricePer1mMax).toBeUndefined();
  });

  test("marks are found on parts, messages and tools", () => {
    expect(marksCache({ messages: [{ role: "user", content: "x" }] })).toBe(false);
    expect(marksCache({ messages: [{ role: "user", content: "x" }], cache_control: { type: "ephemeral" } } as never)).toBe(true);
    expect(marksCache({ messages: [{ role: "user", content: [marked] }] })).toBe(true);
    expect(marksCache({ messages: [{ role: "user", content: "x", cache_control: { type: "ephemeral" } }] })).toBe(true);
    expect(
      marksCache({ messages: [{ role: "user", content: "x" }], tools: [{ type: "function", cache_control: { type: "ephemeral" } }] }),
    ).toBe(true);
    expect(marksCache({ messages: [{ role: "user", content: [{ type: "text", text: "x", cache_control: null }] }] })).toBe(false);
    // Past the scan bound the worst price is assumed.
    expect(marksCache({ messages: Array.from({ length: CACHE_MARKS_SCAN_MAX + 1 }, () => ({ role: "user", content: "x" })) })).toBe(true);
  });
});

describe("pricing by component", () => {
  test("reads and writes at their prices; the input component is what remains of the prompt", () => {
    const priced = pricedAt({ input: 4021, output: 7, cache_read: 3000, cache_write: 1000 }, unitPricesOf(SONNET, 270_000n, 1_350_000n));
    expect(priced).toEqual({
      usage: { input: 21n, output: 7n, cache_read: 3000n, cache_write: 1000n },
      prices: { input: 270_000n, output: 1_350_000n, cache_read: 27_000n, cache_write: 337_500n },
    });
    // 21 × 270,000 + 7 × 1,350,000 + 3,000 × 27,000 + 1,000 × 337,500
    expect(costOf(priced.usage, priced.prices)).toBe(5_670_000n + 9_450_000n + 81_000_000n + 337_500_000n);
  });

  test("without cache prices every prompt token is input; parts above the prompt are bounded", () => {
    const input = new Map([["input_token", 24_300n]]);
    expect(pricedAt({ input: 143, output: 8, cache_read: 128 }, unitPricesOf(input, 24_300n, 99_000n))).toEqual({
      usage: { input: 143n, output: 8n },
      prices: { input: 24_300n, output: 99_000n },
    });
    const bounded = pricedAt({ input: 10, output: 0, cache_read: 8, cache_write: 8 }, unitPricesOf(SONNET, 270_000n, 0n));
    expect([bounded.usage.input, bounded.usage.cache_read, bounded.usage.cache_write]).toEqual([0n, 8n, 2n]);
  });
});
