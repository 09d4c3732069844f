import { expect, test } from "bun:test";
import { pricedAt, unitPricesOf } from "./prices.ts";

const prices = new Map([
  ["input_token", 10n],
  ["output_token", 100n],
  ["cache_read_token", 1n],
]);

test("a part of the prompt the model prices apart is taken out of input at its price; one it does not stays in input", () => {
  const priced = pricedAt({ input: 100, output: 5, cache_read: 40, cache_write: 20 }, unitPricesOf(prices, 10n, 100n));
  expect(priced.usage).toMatchObject({ input: 60n, cache_read: 40n, output: 5n });
  expect(priced.prices).toMatchObject({ input: 10n, cache_read: 1n, output: 100n });
  expect(priced.usage.cache_write ?? 0n).toBe(0n);
});

test("hosted calls are priced per call, at most the calls allowed, and name their unit", () => {
  const hosted = { unit: "web_search_call", units: 2, pricePer1m: 900n };
  const priced = pricedAt({ input: 1, output: 0, hosted_call: 5 }, unitPricesOf(prices, 10n, 100n, hosted), hosted);
  expect([priced.usage.hosted_call, priced.prices.hosted_call, priced.hostedCallUnit]).toEqual([2n, 900n, "web_search_call"]);
});
