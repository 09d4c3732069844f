/**
 * The priced units of a request, each listed once: usage, prices, cost, the settlement and the
 * usage record, the metrics and the replies that show usage iterate over `UNITS`. A new price
 * component is one row here (with its two usage_records columns and their migration), its price
 * key in the catalog, and its count in the vendor's adapter.
 *
 * A unit that is a part of another (`partOf`: cache reads are prompt tokens) is reported inside
 * its whole and priced apart only when the model prices it; an unpriced part stays in its whole,
 * at the whole's price. Parts are carved from their whole in the order listed here.
 */
import { z } from "zod";

export const UNIT_NAMES = ["input", "output", "cache_read", "cache_write", "cache_write_1h", "hosted_call"] as const;
/** A priced unit's name: its key in usage and price maps, its metrics label, its name in replies. */
export type Unit = (typeof UNIT_NAMES)[number];

export interface UnitRow {
  /**
   * The stem of its usage_records fields: `<field>Units`, `<field>PricePer1m` (columns
   * `<field>_units`, `<field>_price_per_1m`), and of its access-line field `<field>Tokens`.
   */
  field: string;
  /**
   * The catalog's price key that prices it whatever the operation; absent when the request names
   * it (input and output: tokens, characters, images, seconds; a hosted tool's `<tool>_call`).
   */
  priceKey?: string;
  /** The unit whose reported count includes this one. */
  partOf?: Unit;
  /** Counted as tokens: in tokens-per-minute windows and the tokens metric. */
  tokens: boolean;
  /** Recorded with its price even when none was used (the request's own units); other units only when used. */
  recordedUnused?: boolean;
  /** The usage record's field that names the unit (a tool's `web_search_call`): replies show it under that name, when named. */
  nameField?: "hostedCallUnit";
  /** Its field in a key's usage (`/v1/key`), counting its parts too (`input_tokens`: the whole prompts); absent: not shown. */
  keyUsageField?: string;
}

export const UNITS = {
  input: { field: "input", tokens: true, recordedUnused: true, keyUsageField: "input_tokens" },
  output: { field: "output", tokens: true, recordedUnused: true, keyUsageField: "output_tokens" },
  cache_read: { field: "cacheRead", priceKey: "cache_read_token", partOf: "input", tokens: true, keyUsageField: "cached_tokens" },
  cache_write: { field: "cacheWrite", priceKey: "cache_write_token", partOf: "input", tokens: true, keyUsageField: "cache_write_tokens" },
  /** Anthropic's 1-hour writes: reported inside the cache writes, priced above the 5-minute ones. */
  cache_write_1h: {
    field: "cacheWrite1h",
    priceKey: "cache_write_1h_token",
    partOf: "cache_write",
    tokens: true,
    keyUsageField: "cache_write_1h_tokens",
  },
  /** Calls of a vendor-run tool (`web_search_call`); the usage record names the tool's unit. */
  hosted_call: { field: "hostedCall", tokens: false, nameField: "hostedCallUnit" },
} as const satisfies Record<Unit, UnitRow>;

/** The catalog's price keys that price a unit whatever the operation, and the unit each prices. */
export const UNIT_PRICE_KEYS: ReadonlyMap<string, Unit> = new Map(
  UNIT_NAMES.flatMap((unit) => {
    const key = (UNITS[unit] as UnitRow).priceKey;
    return key === undefined ? [] : [[key, unit] as const];
  }),
);

/** The units counted as tokens (`tokens`): tokens-per-minute windows and the tokens metric's `direction`. */
export const TOKEN_UNITS: readonly Unit[] = UNIT_NAMES.filter((unit) => UNITS[unit].tokens);

/** Units used by unit, as a settlement records them (absent: none); a request's usage as counted is providers/types.ts `Usage`. */
export type UnitAmounts = Partial<Record<Unit, bigint>>;
/** Toman per 1M units by unit (absent: not priced apart). */
export type Prices = Partial<Record<Unit, bigint>>;
/** Counts as the upstream reports them: a part (`partOf`) is included in its whole. */
export type Counts = Partial<Record<Unit, number>>;

/** A usage_records field of a unit: `inputUnits`, `cacheReadPricePer1m`. */
export type UnitsField<U extends Unit = Unit> = `${(typeof UNITS)[U]["field"]}Units`;
export type PriceField<U extends Unit = Unit> = `${(typeof UNITS)[U]["field"]}PricePer1m`;

// Spelled once per unit: records are read and written field by field on every request.
const UNITS_FIELDS = Object.fromEntries(UNIT_NAMES.map((unit) => [unit, `${UNITS[unit].field}Units`])) as { [U in Unit]: UnitsField<U> };
const PRICE_FIELDS = Object.fromEntries(UNIT_NAMES.map((unit) => [unit, `${UNITS[unit].field}PricePer1m`])) as {
  [U in Unit]: PriceField<U>;
};

export function unitsField<U extends Unit>(unit: U): UnitsField<U> {
  return UNITS_FIELDS[unit];
}

export function priceField<U extends Unit>(unit: U): PriceField<U> {
  return PRICE_FIELDS[unit];
}

/**
 * What usage is worth: Σ units × price, micro-toman, exact (a price is toman per 1M units).
 * @example costOf({ input: 15n, output: 8n }, { input: 270_000n, output: 1_350_000n }) // 14_850_000n
 */
export function costOf(usage: UnitAmounts, prices: Prices): bigint {
  // Units without usage or price are skipped, not multiplied as 0n: each bigint operation allocates.
  let micro = 0n;
  for (const unit of UNIT_NAMES) {
    const units = usage[unit];
    if (!units) continue;
    const price = prices[unit];
    if (price) micro += units * price;
  }
  return micro;
}

/** The token units of `usage` summed (what a tokens-per-minute window counts). */
export function tokensOf(usage: UnitAmounts): bigint {
  let tokens = 0n;
  for (const unit of TOKEN_UNITS) {
    const units = usage[unit];
    if (units) tokens += units;
  }
  return tokens;
}

/**
 * A unit's count with its parts' (disjoint counts summed back into their whole).
 * @example withParts({ input: 20, cache_read: 3000, cache_write: 1000, cache_write_1h: 600 }, "input") // 4620
 */
export function withParts(counts: Counts, unit: Unit): number {
  let total = counts[unit] ?? 0;
  for (const part of UNIT_NAMES) if ((UNITS[part] as UnitRow).partOf === unit) total += withParts(counts, part);
  return total;
}

/** Usage as plain counts (for metrics and logs). */
export function countsOf(usage: UnitAmounts): Counts {
  const counts: Counts = {};
  for (const unit of UNIT_NAMES) if (usage[unit] !== undefined) counts[unit] = Number(usage[unit]);
  return counts;
}

/**
 * Reported counts split into disjoint priced units: each part priced apart (`priced(part)`)
 * is carved from what is left of its whole, at most that; the whole keeps the rest.
 * @example splitParts({ input: 4020, cache_read: 3000, cache_write: 1000 }, () => true)
 *   // { input: 20, cache_read: 3000, cache_write: 1000 }
 */
export function splitParts(counts: Counts, priced: (unit: Unit) => boolean): Counts {
  const left: Counts = {};
  const split: Counts = {};
  for (const unit of UNIT_NAMES) {
    const whole: Unit | undefined = (UNITS[unit] as UnitRow).partOf;
    let units = counts[unit] ?? 0;
    if (whole !== undefined) {
      units = priced(unit) && split[whole] !== undefined ? Math.min(units, left[whole] ?? 0) : 0;
      left[whole] = (left[whole] ?? 0) - units;
      split[whole] = (split[whole] ?? 0) - units;
    }
    if (counts[unit] === undefined && whole === undefined) continue;
    left[unit] = units;
    split[unit] = units;
  }
  return split;
}

/**
 * Reported counts with each part bounded by what remains of its whole (a vendor's figure is never
 * trusted to exceed it): parts in the order listed, zero parts left out; wholes as reported.
 * @example boundedParts({ input: 10, output: 2, cache_read: 8, cache_write: 8 }) // { input: 10, output: 2, cache_read: 8, cache_write: 2 }
 */
export function boundedParts<C extends Counts>(counts: C): C {
  const left: Counts = {};
  const bounded: Counts = {};
  for (const unit of UNIT_NAMES) {
    const whole: Unit | undefined = (UNITS[unit] as UnitRow).partOf;
    let units = counts[unit];
    if (units === undefined) continue;
    if (whole !== undefined) {
      units = Math.min(units, left[whole] ?? 0);
      if (units <= 0) continue;
      left[whole] = (left[whole] ?? 0) - units;
    }
    left[unit] = units;
    bounded[unit] = units;
  }
  return bounded as C;
}

/** A map over the units on a wire, each optional: `unitMap(z.bigint())`. */
export function unitMap<T extends z.ZodType>(value: T) {
  const shape = Object.fromEntries(UNIT_NAMES.map((unit) => [unit, value.optional()]));
  return z.object(shape as { [U in Unit]: z.ZodOptional<T> });
}

/**
 * A message whose units and prices are flat fields (`inputUnits`, `cacheReadPricePer1m` …, as
 * usage_records spells them: the usage log's records, and settlements of the previous release)
 * with them as the `usage` and `prices` maps; a message that has the maps is left as it is.
 * @example withUnitMaps({ requestId: "r", inputUnits: "3", inputPricePer1m: "2" })
 *   // { requestId: "r", usage: { input: "3" }, prices: { input: "2" } }
 */
export function withUnitMaps(value: unknown): unknown {
  if (typeof value !== "object" || value === null || "usage" in value || !("inputUnits" in value)) return value;
  const flat = value as Record<string, unknown>;
  const usage: Record<string, unknown> = {};
  const prices: Record<string, unknown> = {};
  for (const unit of UNIT_NAMES) {
    if (flat[unitsField(unit)] != null) usage[unit] = flat[unitsField(unit)];
    if (flat[priceField(unit)] != null) prices[unit] = flat[priceField(unit)];
  }
  const rest: Record<string, unknown> = { usage, prices };
  for (const field in flat) if (!UNIT_FIELDS.has(field)) rest[field] = flat[field];
  return rest;
}

const UNIT_FIELDS: ReadonlySet<string> = new Set(UNIT_NAMES.flatMap((unit) => [unitsField(unit), priceField(unit)]));

/** The usage and price maps as flat fields, each unit's pair present (0 when absent). */
export function toFields(usage: UnitAmounts, prices: Prices): Record<UnitsField | PriceField, bigint> {
  const flat = {} as Record<UnitsField | PriceField, bigint>;
  for (const unit of UNIT_NAMES) {
    flat[unitsField(unit)] = usage[unit] ?? 0n;
    flat[priceField(unit)] = prices[unit] ?? 0n;
  }
  return flat;
}

/**
 * A message with its maps also written as the old flat fields (strings), so that a node of the
 * previous release, which reads only those, still posts and settles it during a rolling upgrade;
 * this release reads the maps (withUnitMaps leaves a message with `usage` as it is). To be dropped
 * in the release after this one.
 * @example withFlatFields({ requestId: "r", usage: { input: 3n }, prices: { input: 2n } })
 *   // { requestId: "r", usage: { input: 3n }, prices: { input: 2n }, inputUnits: 3n, inputPricePer1m: 2n, outputUnits: 0n, … }
 */
export function withFlatFields<T extends { usage: UnitAmounts; prices: Prices }>(message: T): T {
  return { ...message, ...toFields(message.usage, message.prices) };
}
