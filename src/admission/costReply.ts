/**
 * A request's cost as its reply carries it: the micro-toman its settlement billed, never a second
 * count. `x-darvaze-cost` is that integer; a wire's `usage.cost` is the same amount in toman, a
 * JSON number with the micro precision (972000 micro-toman → 0.972).
 */

/** The reply header of the billed micro-toman (a whole reply; a stream's headers go before its bill). */
export const COST_HEADER = "x-darvaze-cost";

/**
 * Micro-toman as a toman JSON number. Exact for every amount below 2^53 micro-toman (9 billion
 * toman): the quotient is the double nearest the decimal, which JSON writes as that decimal.
 * @example costToman(972_000n) // 0.972
 */
export function costToman(micro: bigint): number {
  return Number(micro) / 1_000_000;
}

/**
 * A chat completion's or chunk's JSON with `usage.cost` set to the billed amount; the text as it
 * was when it has no usage object or is not JSON.
 * @example withUsageCost('{"usage":{"prompt_tokens":3}}', 972_000n) // '{"usage":{"prompt_tokens":3,"cost":0.972}}'
 */
export function withUsageCost(json: string, billedMicro: bigint): string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(json);
  } catch {
    return json;
  }
  return valueWithUsageCost(parsed, json, billedMicro);
}

/**
 * withUsageCost for a reply already parsed: `value` is `json` as a value (a pool's ChatReply), so
 * the text is not parsed again; `json` as given (null: none written yet) when `value` has no usage
 * object. `value` is left as it was.
 * @example valueWithUsageCost({ usage: { prompt_tokens: 3 } }, '{"usage":{"prompt_tokens":3}}', 972_000n) // '{"usage":{"prompt_tokens":3,"cost":0.972}}'
 */
export function valueWithUsageCost<J extends string | null>(value: unknown, json: J, billedMicro: bigint): string | J {
  if (typeof value !== "object" || value === null) return json;
  const usage = (value as { usage?: unknown }).usage;
  if (typeof usage !== "object" || usage === null) return json;
  // An array takes no named field: written as it was parsed.
  if (Array.isArray(usage)) return JSON.stringify(value);
  return JSON.stringify({ ...value, usage: { ...usage, cost: costToman(billedMicro) } });
}

/**
 * A reply value presented before its settlement, as JSON with `usage.cost` set once settled: every
 * wire whose reply has a top-level `usage` object tells the cost there; one without (Gemini's
 * `usageMetadata`, a dall-e image list) keeps its shape, and the header tells it.
 * @example presentedJson({ usage: { input_tokens: 3 } }, { billedMicro: 972_000n }) // '{"usage":{"input_tokens":3,"cost":0.972}}'
 */
export function presentedJson(value: unknown, settled: { billedMicro: bigint } | null): string {
  if (!settled) return JSON.stringify(value);
  return valueWithUsageCost(value, null, settled.billedMicro) ?? JSON.stringify(value);
}
