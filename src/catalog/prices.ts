/**
 * Price arithmetic, exact and in integers. A price is toman per 1,000,000 units, so the cost of
 * `units` in micro-toman is `units × price` with no rounding at all; the only rounding in the
 * product is here, once per price version: `round(USD list price × rate)`.
 */
import { UNIT_NAMES } from "../units.ts";

const USD_SCALE_DIGITS = 9;
const USD_SCALE = 10n ** BigInt(USD_SCALE_DIGITS);

/** Parses a non-negative decimal string ("0.55", "15", "1e-1" is refused) into nano-USD. */
export function parseUsd(usd: string): bigint {
  const match = /^(\d+)(?:\.(\d+))?$/.exec(usd);
  if (!match) throw new RangeError(`not a non-negative decimal USD price: ${JSON.stringify(usd)}`);
  const fraction = match[2] ?? "";
  if (fraction.length > USD_SCALE_DIGITS) throw new RangeError(`USD price has more than ${USD_SCALE_DIGITS} decimals: ${usd}`);
  return BigInt(match[1]!) * USD_SCALE + BigInt(fraction.padEnd(USD_SCALE_DIGITS, "0"));
}

/**
 * Toman per 1M units for a USD price per 1M units at a rate, rounded half up.
 * @example usdToTomanPer1m("0.55", 90_000n) === 49_500n
 */
export function usdToTomanPer1m(usdPer1m: string, tomanPerUsd: bigint): bigint {
  if (tomanPerUsd <= 0n) throw new RangeError("the exchange rate must be positive");
  return (parseUsd(usdPer1m) * tomanPerUsd + USD_SCALE / 2n) / USD_SCALE;
}

/**
 * The bound on a price (docs/catalog.md#price-bound): a request's cost Σ units × price must fit the
 * ledger's int8 columns. A request has at most REQUEST_COUNTED_UNITS_MAX of a counted unit (tokens,
 * characters, seconds: its body is at most 256 MiB) and REQUEST_ITEMS_MAX of an item (an image, a
 * hosted call), over at most UNIT_NAMES.length priced kinds, so each price is at most
 * (2^63 − 1) / (kinds × units) toman per 1M.
 */
export const REQUEST_COUNTED_UNITS_MAX = 2n ** 30n;
export const REQUEST_ITEMS_MAX = 2n ** 20n;
const INT8_MAX = 2n ** 63n - 1n;
/** A static ceiling on a USD price per 1M units (USD 10 a unit), for a file read before any rate: its toman price fits int8 at any rate. */
export const USD_PER_1M_MAX = 10_000_000n;

/** An image or a hosted call: counted by the item. */
export function isItemUnit(unit: string): boolean {
  return /^image_\d+x\d+_/.test(unit) || unit.endsWith("_call");
}

export function tomanPer1mMax(unit: string): bigint {
  const units = isItemUnit(unit) ? REQUEST_ITEMS_MAX : REQUEST_COUNTED_UNITS_MAX;
  return INT8_MAX / (BigInt(UNIT_NAMES.length) * units);
}

/** Why `usd` per 1M of `unit` cannot be priced at `tomanPerUsd`, or null when its toman price is within the bound. */
export function priceProblem(unit: string, usd: string, tomanPerUsd: bigint): string | null {
  const toman = usdToTomanPer1m(usd, tomanPerUsd);
  const max = tomanPer1mMax(unit);
  if (toman <= max) return null;
  return `${unit} at USD ${usd} per 1M is ${toman} toman per 1M at ${tomanPerUsd} toman per USD, above the bound of ${max} (docs/catalog.md#price-bound)`;
}

/** Micro-toman as a decimal toman string: 1234567n → "1.234567". */
export function microToToman(micro: bigint): string {
  const negative = micro < 0n;
  const abs = negative ? -micro : micro;
  const whole = abs / 1_000_000n;
  const fraction = (abs % 1_000_000n).toString().padStart(6, "0").replace(/0+$/, "");
  return `${negative ? "-" : ""}${whole}${fraction ? `.${fraction}` : ""}`;
}

/** Toman given as an integer or a decimal string with up to 6 decimals → micro-toman. */
export function tomanToMicro(toman: string | number): bigint {
  const text = typeof toman === "number" ? (Number.isSafeInteger(toman) ? String(toman) : "") : toman.trim();
  const match = /^(\d+)(?:\.(\d{1,6}))?$/.exec(text);
  if (!match) throw new RangeError("an amount in toman must be a whole number or a decimal string with at most 6 decimals");
  return BigInt(match[1]!) * 1_000_000n + BigInt((match[2] ?? "").padEnd(6, "0"));
}

/**
 * A tier's price of `unit` as the prices table names it: the unit and the tier's threshold, so a
 * price version holds the tier's prices beside the standard ones (each version, its own rate).
 * @example tierPriceKey("input_token", 200_000) === "input_token>200000"
 */
export function tierPriceKey(unit: string, aboveInputTokens: number): string {
  return `${unit}>${aboveInputTokens}`;
}

/** The unit and threshold a tier's price key names, or null for a standard price's key. */
export function parseTierPriceKey(key: string): { unit: string; aboveInputTokens: number } | null {
  const match = /^([a-z0-9_]+)>(\d+)$/.exec(key);
  return match ? { unit: match[1]!, aboveInputTokens: Number(match[2]) } : null;
}

/** A batch price's key in the prices table: the unit after `batch:`, beside the standard and the tier's prices. */
export const BATCH_PRICE_PREFIX = "batch:";

/**
 * The batch price of `unit` as the prices table names it (docs/batches.md#money).
 * @example batchPriceKey("input_token") === "batch:input_token"
 */
export function batchPriceKey(unit: string): string {
  return `${BATCH_PRICE_PREFIX}${unit}`;
}

/**
 * Prices by key split into the standard ones, the tier's (by unit, with its threshold) and the
 * batch prices (by unit; null when the model has none).
 * @example splitPriceKeys(new Map([["input_token", 2n], ["input_token>200000", 4n], ["batch:input_token", 1n]]))
 *   // { standard: Map { input_token → 2n }, tier: { aboveInputTokens: 200000, prices: Map { input_token → 4n } }, batch: Map { input_token → 1n } }
 */
export function splitPriceKeys<P>(prices: Iterable<[string, P]>): {
  standard: Map<string, P>;
  tier: { aboveInputTokens: number; prices: Map<string, P> } | null;
  batch: Map<string, P> | null;
} {
  const standard = new Map<string, P>();
  let tier: { aboveInputTokens: number; prices: Map<string, P> } | null = null;
  let batch: Map<string, P> | null = null;
  for (const [key, price] of prices) {
    const tiered = parseTierPriceKey(key);
    if (key.startsWith(BATCH_PRICE_PREFIX)) (batch ??= new Map()).set(key.slice(BATCH_PRICE_PREFIX.length), price);
    else if (!tiered) standard.set(key, price);
    else (tier ??= { aboveInputTokens: tiered.aboveInputTokens, prices: new Map() }).prices.set(tiered.unit, price);
  }
  return { standard, tier, batch };
}
