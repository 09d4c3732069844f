import { describe, expect, test } from "bun:test";
import { SEED_MODELS, SEED_TOMAN_PER_USD } from "./seed.ts";
import {
  microToToman,
  parseUsd,
  priceProblem,
  REQUEST_COUNTED_UNITS_MAX,
  REQUEST_ITEMS_MAX,
  tomanPer1mMax,
  tomanToMicro,
  usdToTomanPer1m,
} from "./prices.ts";
import { costOf, UNIT_NAMES } from "../units.ts";

// The published toman table (input, output per 1M tokens) in listing order, copied by hand.
const PUBLISHED_TOMAN: [number, number][] = [
  [72000, 360000],
  [1350000, 6750000],
  [270000, 1350000],
  [270000, 1350000],
  [27000, 81000],
  [225000, 900000],
  [225000, 900000],
  [49500, 197100],
  [24300, 99000],
  [9000, 36000],
  [27000, 225000],
  [112500, 900000],
  [54000, 198000],
  [180000, 720000],
  [36000, 144000],
  [9000, 36000],
  [225000, 900000],
  [13500, 54000],
  [270000, 1350000],
  [27000, 45000],
  [49500, 198000],
  [10800, 27000],
  [9000, 22500],
  [18000, 76500],
  [7200, 27000],
  [27000, 148500],
  [180000, 540000],
  [9000, 27000],
  [5400, 21600],
  [72000, 288000],
  [180000, 720000],
  [99000, 396000],
  [6300, 12600],
  [31500, 36000],
  [18000, 54000],
  [90000, 90000],
  [270000, 1350000],
];

describe("USD list price × rate", () => {
  test("reproduces every published toman price at 90,000 toman per USD", () => {
    const chat = SEED_MODELS.filter((m) => m.operation === "chat" && m.listing <= PUBLISHED_TOMAN.length);
    expect(chat).toHaveLength(PUBLISHED_TOMAN.length);
    chat.forEach((model, i) => {
      const toman = [
        usdToTomanPer1m(model.usd_per_1m.input_token!, SEED_TOMAN_PER_USD),
        usdToTomanPer1m(model.usd_per_1m.output_token!, SEED_TOMAN_PER_USD),
      ];
      expect(toman.map(Number), model.id).toEqual(PUBLISHED_TOMAN[i]!);
    });
  });

  test("rounds half up, once, at the price version", () => {
    expect(usdToTomanPer1m("0.000001", 500_000n)).toBe(1n); // 0.5 → 1
    expect(usdToTomanPer1m("0.000001", 499_999n)).toBe(0n); // 0.499999 → 0
    expect(usdToTomanPer1m("2.19", 91_234n)).toBe(199_802n); // 199,802.46
  });

  test.each(["-1", "1e3", "0x10", "", "1.", "0.0000000001"])("refuses %p as a USD price", (bad) => {
    expect(() => parseUsd(bad)).toThrow(RangeError);
  });
});

describe("cost in micro-toman", () => {
  test.each([
    // units, toman per 1M, micro-toman (by hand)
    [0n, 13_500n, 0n],
    [1n, 13_500n, 13_500n],
    [1n, 6_750_000n, 6_750_000n], // one claude-opus-4 output token: 6.75 toman
    [10_000_000n, 7_200n, 72_000_000_000n], // a full llama-4-scout context: 72,000 toman
    [1_000_000n, 54_000n, 54_000_000_000n],
  ])("%p units at %p toman/1M = %p micro-toman", (units, price, expected) => {
    expect(costOf({ output: units }, { output: price })).toBe(expected);
  });

  test("toman strings convert both ways exactly", () => {
    expect(tomanToMicro("1500.25")).toBe(1_500_250_000n);
    expect(tomanToMicro(7)).toBe(7_000_000n);
    expect(tomanToMicro("0.000001")).toBe(1n);
    expect(microToToman(1_500_250_000n)).toBe("1500.25");
    expect(microToToman(1n)).toBe("0.000001");
    expect(microToToman(-2_500_000n)).toBe("-2.5");
    expect(() => tomanToMicro("1.0000001")).toThrow(RangeError);
    expect(() => tomanToMicro(1.5)).toThrow(RangeError);
  });
});

describe("the price bound", () => {
  const INT8_MAX = 2n ** 63n - 1n;
  test("the largest request's cost at the bound fits int8, and one unit more of price does not", () => {
    for (const [unit, units] of [
      ["output_token", REQUEST_COUNTED_UNITS_MAX],
      ["image_1024x1024_high", REQUEST_ITEMS_MAX],
      ["web_search_call", REQUEST_ITEMS_MAX],
    ] as const) {
      const max = tomanPer1mMax(unit);
      const kinds = BigInt(UNIT_NAMES.length);
      // The unit priced is the bound's; costOf multiplies any unit's count by its price alike.
      expect(kinds * costOf({ output: units }, { output: max })).toBeLessThanOrEqual(INT8_MAX);
      expect(kinds * costOf({ output: units }, { output: max + 1n })).toBeGreaterThan(INT8_MAX);
    }
  });

  test("every shipped price is within the bound at ten times the shipped rate; a price past it is named", () => {
    for (const model of SEED_MODELS)
      for (const [unit, usd] of Object.entries(model.usd_per_1m)) expect(priceProblem(unit, usd, SEED_TOMAN_PER_USD * 10n)).toBeNull();
    expect(priceProblem("output_token", "99999999999999999999999", 90_000n)).toContain("output_token at USD 99999999999999999999999");
    expect(priceProblem("output_token", "75", 100_000_000n)).toContain("above the bound of 1431655765");
  });
});
