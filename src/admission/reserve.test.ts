import { expect, test } from "bun:test";
import { chargedBelowTier, loweredReserve, reserveMicro, type Reserve } from "./reserve.ts";

// 100 prompt tokens at 10 micro-toman, 16,384 output tokens × 2 choices + 50 predicted at 100.
const reserve: Reserve = {
  input: { unit: "input_token", units: 100, pricePer1m: 10n },
  output: { unit: "output_token", units: 16_384 * 2 + 50, pricePer1m: 100n },
  tokens: 100 + 16_384 * 2 + 50,
  exact: false,
  outputLowerable: { perChoice: 16_384, choices: 2, fixedUnits: 50, perChoiceMin: 4_096 },
};

test("a wallet short of the limit gets the largest limit per choice it covers", () => {
  const available = 1_000n + 5_000n * 2n * 100n + 50n * 100n + 99n; // 5,000 per choice, and change
  const lowered = loweredReserve(reserve, available)!;
  expect(lowered.outputLowerable!.perChoice).toBe(5_000);
  expect(lowered.output!.units).toBe(5_000 * 2 + 50);
  expect(lowered.tokens).toBe(100 + 5_000 * 2 + 50);
  expect(reserveMicro(lowered)).toBeLessThanOrEqual(available);
});

test("below the least limit, or with nothing to lower, there is no lowered reserve", () => {
  expect(loweredReserve(reserve, 1_000n + 4_095n * 2n * 100n + 50n * 100n)).toBeNull();
  expect(loweredReserve(reserve, 1_000n + 4_096n * 2n * 100n + 50n * 100n)!.outputLowerable!.perChoice).toBe(4_096);
  expect(loweredReserve(reserve, reserveMicro(reserve))).toBeNull();
  expect(loweredReserve({ ...reserve, outputLowerable: undefined }, 1_000_000n)).toBeNull();
});

// Up to 5 web searches at 900 toman each, each with 1,000 result tokens at the input price.
const withSearch: Reserve = {
  ...reserve,
  hostedCalls: { unit: "web_search_call", units: 5, pricePer1m: 900_000_000n, inputUnitsPerCall: 1_000 },
};
const callMicro = 900_000_000n + 1_000n * 10n;
const leastMicro = 1_000n + 4_096n * 2n * 100n + 50n * 100n;

test("hosted calls are in the hold: each at its price plus its results' input allowance", () => {
  expect(reserveMicro(withSearch)).toBe(reserveMicro(reserve) + 5n * callMicro);
});

test("a wallet short of the calls keeps the least output and the calls that fit beside it; none fit: the tool is left out", () => {
  const two = loweredReserve(withSearch, leastMicro + 2n * callMicro + 7n)!;
  expect(two.hostedCalls!.units).toBe(2);
  expect(two.outputLowerable!.perChoice).toBe(4_096);
  expect(reserveMicro(two)).toBeLessThanOrEqual(leastMicro + 2n * callMicro + 7n);
  const none = loweredReserve(withSearch, leastMicro + callMicro - 1n)!;
  expect(none.hostedCalls!.units).toBe(0);
  expect(loweredReserve(withSearch, leastMicro - 1n)).toBeNull();
  // Every call fits, and the output is lowered with what remains.
  const all = loweredReserve(withSearch, 1_000n + 5n * callMicro + 5_000n * 2n * 100n + 50n * 100n)!;
  expect(all.hostedCalls!.units).toBe(5);
  expect(all.outputLowerable!.perChoice).toBe(5_000);
  expect(loweredReserve(withSearch, reserveMicro(withSearch))).toBeNull();
});

test("usage reserved at a long-context tier is charged the standard prices only when its prompt is not above the threshold", () => {
  const tiered: Reserve = { ...reserve, promptTier: { aboveInputTokens: 200_000, belowPricesPer1m: new Map([["input_token", 5n]]) } };
  expect(chargedBelowTier(tiered, { input: 200_000 })).toBe(true);
  expect(chargedBelowTier(tiered, { input: 200_001 })).toBe(false);
  // Reserved at the standard prices (no tier taken): nothing to lower.
  expect(chargedBelowTier(reserve, { input: 10 })).toBe(false);
});
