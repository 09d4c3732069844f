/**
 * What a catalog change does to today's prices: each priced key (standard units and the tier's)
 * of the entry before and after, in USD per 1M and in toman per 1M at the rate in effect, as the
 * new price version would publish them (usdToTomanPer1m, the one conversion).
 */
import { entryPrices, type ModelEntry } from "./file.ts";
import { usdToTomanPer1m } from "./prices.ts";

export interface PricePreviewRow {
  key: string;
  usdBefore: string | null;
  usdAfter: string | null;
  tomanBefore: bigint | null;
  tomanAfter: bigint | null;
}

/**
 * @example pricePreview(undefined, entry, 90_000n) // [{ key: "input_token", usdBefore: null, usdAfter: "0.15", tomanAfter: 13500n, … }]
 */
export function pricePreview(before: ModelEntry | undefined, after: ModelEntry | null, tomanPerUsd: bigint): PricePreviewRow[] {
  const was = new Map(before ? entryPrices(before) : []);
  const will = new Map(after ? entryPrices(after) : []);
  const keys = [...new Set([...was.keys(), ...will.keys()])];
  const toman = (usd: string | undefined) => (usd === undefined ? null : usdToTomanPer1m(usd, tomanPerUsd));
  return keys.map((key) => ({
    key,
    usdBefore: was.get(key) ?? null,
    usdAfter: will.get(key) ?? null,
    tomanBefore: toman(was.get(key)),
    tomanAfter: toman(will.get(key)),
  }));
}
