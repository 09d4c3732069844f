/**
 * Used units priced by unit, as a settlement carries them. A chat prompt's tokens read from or
 * written to a vendor's prompt cache are priced at the model's cache-read and cache-write prices;
 * a model without such a price bills them as input.
 */
import type { Settlement } from "../../actors/protocol.ts";
import type { Usage } from "../providers/types.ts";
import { splitParts, UNIT_NAMES, UNITS, type Prices, type UnitRow } from "../units.ts";
import type { PricedUnits } from "./reserve.ts";

/**
 * The units a request used, by unit, as the upstream reported them (or as counted when it did
 * not): `input` is all input units (for chat, the whole prompt, cache reads and writes included),
 * `cache_write_1h` the part of `cache_write` kept for an hour, `hosted_call` the calls of the
 * vendor-run tool the request offered (`Reserve.hostedCalls`).
 * A request's `Usage` (providers/types.ts) whose output may be absent (an operation without output).
 */
export type UsedUnits = Partial<Usage> & Pick<Usage, "input">;

/** Usage priced by unit: what a settlement carries. */
export type PricedUsage = Pick<Settlement, "usage" | "prices" | "hostedCallUnit">;

/** A request's price by unit: input and output at its prices, each part the model prices apart, the hosted tool's calls. */
export function unitPricesOf(
  prices: ReadonlyMap<string, bigint>,
  inputPricePer1m: bigint,
  outputPricePer1m: bigint,
  hosted?: PricedUnits,
): Prices {
  const unitPrices: Prices = { input: inputPricePer1m, output: outputPricePer1m };
  for (const unit of UNIT_NAMES) {
    const key: string | undefined = (UNITS[unit] as UnitRow).priceKey;
    const price = key === undefined ? undefined : prices.get(key);
    if (price !== undefined) unitPrices[unit] = price;
  }
  if (hosted) unitPrices.hosted_call = hosted.pricePer1m;
  return unitPrices;
}

/**
 * Used units priced by unit: each part of the prompt (cache reads, writes) at the model's price
 * for it when it has one (`UNITS[unit].priceKey`), else left in its whole (input, or 5-minute
 * writes for 1-hour ones); input and output at the request's prices, the hosted tool's calls at
 * its per-call price, at most the calls it was allowed; the prices by unit from unitPricesOf, looked up once per request.
 */
export function pricedAt(used: UsedUnits, unitPrices: Prices, hosted?: PricedUnits): PricedUsage {
  const calls = hosted ? Math.min(used.hosted_call ?? 0, hosted.units) : 0;
  const split = splitParts({ ...used, output: used.output ?? 0, hosted_call: calls }, (unit) => unitPrices[unit] !== undefined);
  const priced: PricedUsage = { usage: {}, prices: {} };
  for (const unit of UNIT_NAMES) {
    const units = split[unit] ?? 0;
    if (units <= 0 && !(UNITS[unit] as UnitRow).recordedUnused) continue;
    priced.usage[unit] = BigInt(units);
    priced.prices[unit] = unitPrices[unit] ?? 0n;
  }
  if (hosted && calls > 0) priced.hostedCallUnit = hosted.unit;
  return priced;
}
