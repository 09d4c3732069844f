/**
 * The bounds of a usage report: input up to the cost value's input bound, output up to what the
 * hold covers (the limit sent), cache writes only when the prompt asked for them (the reserve
 * priced them), hosted calls up to those the upstream was allowed; and, for a reported usage, at
 * least what the gateway proved was used (`floor`). Whatever a report claims beyond is clamped or
 * raised: an upstream anomaly, charged only within the bounds. Pure: the Admission logs and
 * counts the anomalies (settlement.ts).
 */
import type { UsedUnits } from "./prices.ts";

/** Proven lower bounds of a request's units: the prompt's words, the output relayed (visible and reasoning). */
export interface UsedFloor {
  input: number;
  output: number;
}

/**
 * An upstream anomaly: a part of its usage report outside the request's bounds, clamped (`over`)
 * or raised (`under`); or no report at all from an upstream that finished (`usage_missing`).
 */
export interface UsageAnomaly {
  part: string;
  kind: "over" | "under" | "missing";
}

/** The most each part of a request's usage may be, and, for a reported usage, the least. */
export interface UsageBounds {
  inputMax: number;
  outputMax: number;
  /** Cache writes, at most (0: the prompt did not ask for them); never above the input either. */
  cacheWriteMax: number;
  hostedCallsMax: number;
  floor?: UsedFloor;
}

/**
 * The units within `bounds`, and the parts that were outside them (none: `used` as it was).
 * @example boundedUsage({ input: 10, output: 900 }, { inputMax: 10, outputMax: 100, cacheWriteMax: 0, hostedCallsMax: 0 }).anomalies // [{ part: "output", kind: "over" }]
 */
export function boundedUsage(used: UsedUnits, bounds: UsageBounds): { used: UsedUnits; anomalies: UsageAnomaly[] } {
  const { floor } = bounds;
  const anomalies: UsageAnomaly[] = [];
  const bound = (part: string, value: number | undefined, max: number, min = 0) => {
    if (value === undefined) return value;
    if (value > max) anomalies.push({ part, kind: "over" });
    else if (value < Math.min(min, max)) anomalies.push({ part, kind: "under" });
    return Math.min(max, Math.max(value, min));
  };
  const input = bound("input", used.input, bounds.inputMax, floor?.input)!;
  const bounded: UsedUnits = {
    input,
    output: bound("output", used.output, bounds.outputMax, floor?.output),
    cache_read: used.cache_read === undefined ? undefined : Math.min(used.cache_read, input),
    cache_write: bound("cache_write", used.cache_write, Math.min(bounds.cacheWriteMax, input)),
  };
  if (used.cache_write_1h !== undefined) bounded.cache_write_1h = Math.min(used.cache_write_1h, bounded.cache_write ?? 0);
  if (used.hosted_call !== undefined) bounded.hosted_call = bound("hosted_calls", used.hosted_call, bounds.hostedCallsMax);
  return anomalies.length === 0 ? { used, anomalies } : { used: bounded, anomalies };
}
