import { describe, expect, test } from "bun:test";
import { pricedAt, unitPricesOf } from "./admission/prices.ts";
import {
  boundedParts,
  costOf,
  splitParts,
  tokensOf,
  UNIT_NAMES,
  UNITS,
  withParts,
  withFlatFields,
  withUnitMaps,
  type Counts,
} from "./units.ts";
import { encodeJson } from "./json.ts";

/** The pricing the units replace, written out component by component: the reference the loop must match exactly. */
function pricedByHand(
  used: { input: number; output?: number; cacheRead?: number; cacheWrite?: number; cacheWrite1h?: number; hostedCalls?: number },
  prices: ReadonlyMap<string, bigint>,
  inputPrice: bigint,
  outputPrice: bigint,
  hosted?: { units: number; pricePer1m: bigint },
): bigint {
  const readPrice = prices.get("cache_read_token");
  const writePrice = prices.get("cache_write_token");
  const write1hPrice = prices.get("cache_write_1h_token");
  const read = readPrice === undefined ? 0 : Math.min(used.cacheRead ?? 0, used.input);
  const write = writePrice === undefined ? 0 : Math.min(used.cacheWrite ?? 0, used.input - read);
  const write1h = write1hPrice === undefined ? 0 : Math.min(used.cacheWrite1h ?? 0, write);
  const calls = hosted ? Math.min(used.hostedCalls ?? 0, hosted.units) : 0;
  return (
    BigInt(used.input - read - write) * inputPrice +
    BigInt(used.output ?? 0) * outputPrice +
    BigInt(read) * (readPrice ?? 0n) +
    BigInt(write - write1h) * (writePrice ?? 0n) +
    BigInt(write1h) * (write1hPrice ?? 0n) +
    BigInt(calls) * (hosted?.pricePer1m ?? 0n)
  );
}

/** A deterministic generator (xorshift), so a failure is reproducible from its seed. */
function random(seed: number): (max: number) => number {
  let x = seed;
  return (max) => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) % (max + 1);
  };
}

describe("units", () => {
  test("the loop prices exactly as the components written out did, on 20,000 random usages and price lists", () => {
    const next = random(0x5eed);
    for (let i = 0; i < 20_000; i++) {
      const prices = new Map<string, bigint>();
      if (next(1)) prices.set("cache_read_token", BigInt(next(1_000_000)));
      if (next(1)) prices.set("cache_write_token", BigInt(next(2_000_000)));
      if (next(1)) prices.set("cache_write_1h_token", BigInt(next(3_000_000)));
      const input = next(2_000_000);
      const used = {
        input,
        output: next(100_000),
        ...(next(1) ? { cacheRead: next(input * 2) } : {}),
        ...(next(1) ? { cacheWrite: next(input * 2) } : {}),
        ...(next(1) ? { cacheWrite1h: next(input * 2) } : {}),
        ...(next(1) ? { hostedCalls: next(20) } : {}),
      };
      const hosted = next(1) ? { unit: "web_search_call", units: next(10), pricePer1m: 900_000_000n } : undefined;
      const inputPrice = BigInt(next(10_000_000));
      const outputPrice = BigInt(next(10_000_000));
      const counts: Counts = {
        input: used.input,
        output: used.output,
        cache_read: used.cacheRead,
        cache_write: used.cacheWrite,
        cache_write_1h: used.cacheWrite1h,
        hosted_call: used.hostedCalls,
      };
      const priced = pricedAt({ ...counts, input }, unitPricesOf(prices, inputPrice, outputPrice, hosted), hosted);
      expect(costOf(priced.usage, priced.prices)).toBe(pricedByHand(used, prices, inputPrice, outputPrice, hosted));
    }
  });

  test("parts are carved from their whole in order, never past what it leaves; an unpriced part stays in its whole", () => {
    expect(splitParts({ input: 4020, output: 7, cache_read: 3000, cache_write: 1000, cache_write_1h: 600 }, () => true)).toEqual({
      input: 20,
      output: 7,
      cache_read: 3000,
      cache_write: 400,
      cache_write_1h: 600,
    });
    expect(splitParts({ input: 10, cache_read: 8, cache_write: 8 }, (unit) => unit !== "cache_read")).toEqual({
      input: 2,
      cache_read: 0,
      cache_write: 8,
      cache_write_1h: 0,
    });
    expect(boundedParts({ input: 10, output: 1, cache_read: 8, cache_write: 8, cache_write_1h: 9 })).toEqual({
      input: 10,
      output: 1,
      cache_read: 8,
      cache_write: 2,
      cache_write_1h: 2,
    });
    expect(withParts({ input: 20, cache_read: 3000, cache_write: 400, cache_write_1h: 600 }, "input")).toBe(4020);
    expect(tokensOf({ input: 1n, output: 2n, cache_read: 3n, hosted_call: 100n })).toBe(6n);
  });

  test("a message of the old shape is read as the maps; one of the new shape is left as it is", () => {
    const flat = { requestId: "r", hostedCallUnit: "web_search_call" } as Record<string, unknown>;
    for (const unit of UNIT_NAMES) {
      flat[`${UNITS[unit].field}Units`] = "1";
      flat[`${UNITS[unit].field}PricePer1m`] = "2";
    }
    const read = withUnitMaps(flat) as Record<string, Record<string, string>>;
    expect(Object.keys(read).sort()).toEqual(["hostedCallUnit", "prices", "requestId", "usage"]);
    expect(Object.keys(read.usage!)).toEqual([...UNIT_NAMES]);
    const maps = { requestId: "r", usage: { input: "1" }, prices: { input: "2" } };
    expect(withUnitMaps(maps)).toBe(maps);
  });

  test("a message written for both releases: this one reads its maps, the previous one its flat fields", () => {
    const sent = JSON.parse(
      encodeJson(withFlatFields({ requestId: "r", usage: { input: 4020n, cache_read: 3000n }, prices: { input: 5n, cache_read: 1n } })),
    ) as Record<string, unknown>;
    // This release: the maps, as sent.
    expect(withUnitMaps(sent)).toMatchObject({ usage: { input: "4020", cache_read: "3000" }, prices: { input: "5", cache_read: "1" } });
    // The previous release read the flat fields (required: input and output), every unit's pair.
    for (const unit of UNIT_NAMES) {
      expect(sent[`${UNITS[unit].field}Units`]).toBe({ input: "4020", cache_read: "3000" }[unit as string] ?? "0");
      expect(sent[`${UNITS[unit].field}PricePer1m`]).toBe({ input: "5", cache_read: "1" }[unit as string] ?? "0");
    }
  });
});
