/**
 * What a request may cost at most, and the arithmetic of it: prices are toman per 1M units, so
 * `units × price` is micro-toman exactly. A reserve's output limit (and a hosted tool's calls)
 * may be lowered to what the wallet covers, and its input counted exactly at the wallet's edge.
 */
/** One priced quantity of a reserve: `units` of `unit` at `pricePer1m` toman per 1M. */
export interface PricedUnits {
  unit: string;
  units: number;
  pricePer1m: bigint;
}

/** A hosted tool's calls, each with the input tokens its results may add to the prompt (billed as input). */
export interface HostedCalls extends PricedUnits {
  inputUnitsPerCall: number;
}

/**
 * What a request may cost at most: its input (prompt tokens, images, characters, seconds) and,
 * for chat, its output budget. `tokens` feeds the key's tokens-per-minute window.
 */
export interface Reserve {
  input: PricedUnits;
  /**
   * The highest price an input unit may be charged, when above `input.pricePer1m` (a prompt that
   * asks Anthropic to write its cache, priced above input): the reserve bounds input at it.
   */
  inputPricePer1mMax?: bigint;
  /**
   * The prices of every unit the usage may report (cache reads and writes beside input and
   * output), when the request's are not the model's list prices (a paid field's percent).
   */
  unitPricesPer1m?: ReadonlyMap<string, bigint>;
  /**
   * Reserved at a long-context tier's prices (the prompt's bound is above its threshold): a
   * prompt charged at or below `aboveInputTokens` is priced at `belowPricesPer1m`, as its vendor bills it.
   */
  promptTier?: PromptTier;
  /** The prices of a request that asked a priced `service_tier`, were it served at the default tier. */
  atDefaultServiceTier?: ServedTierPrices;
  output?: PricedUnits;
  /**
   * Calls of a vendor-run tool the request offers (`web_search_call`), at the per-call price: at
   * most the calls the upstream is allowed (`max_uses`), lowered at the wallet's edge before the
   * output limit, down to none (the tool is then left out of the request).
   */
  hostedCalls?: HostedCalls;
  tokens: number;
  /** The units are exact (characters, images); false for a cheap upper bound. */
  exact: boolean;
  /** A tighter input bound (an exact count), asked only when the cheap reserve does not fit the wallet. */
  exactInputUnits?: () => Promise<number>;
  /**
   * The output is `perChoice × choices + fixedUnits` units, and the limit per choice may be
   * lowered (not below `perChoiceMin`) to what the wallet covers instead of refusing: the caller
   * sends the upstream the limit admitted (`Admission.outputPerChoice`).
   */
  outputLowerable?: OutputLimit;
}

/** A request's prices at another service tier than the one it asked (its long-context tier's split kept). */
export interface ServedTierPrices {
  unitPricesPer1m: ReadonlyMap<string, bigint>;
  promptTier?: PromptTier;
}

/** The standard prices of a request reserved at its long-context tier, and the tier's threshold in prompt tokens. */
export interface PromptTier {
  aboveInputTokens: number;
  belowPricesPer1m: ReadonlyMap<string, bigint>;
}

/**
 * Whether usage reserved at a long-context tier is charged the standard prices: its bounded
 * prompt (`input`, the whole prompt, cached tokens included) is not above the tier's threshold.
 * @example chargedBelowTier({ ...reserve, promptTier: { aboveInputTokens: 200_000, belowPricesPer1m } }, { input: 200_000 }) // true
 */
export function chargedBelowTier(reserve: Pick<Reserve, "promptTier">, used: { input: number }): boolean {
  return reserve.promptTier !== undefined && (used.input ?? 0) <= reserve.promptTier.aboveInputTokens;
}

/** How a reserve's output units split into a per-choice limit and a fixed part (chat's prediction). */
export interface OutputLimit {
  perChoice: number;
  choices: number;
  fixedUnits: number;
  perChoiceMin: number;
}

/**
 * The reserve lowered to fit `availableMicro`: first its hosted-tool calls (down to none) to what
 * is left beside the input and the least output, then its output limit per choice (not below
 * `perChoiceMin`). Null when even that does not fit, or nothing would be lowered.
 * @example loweredReserve(reserve, 500_000_000n) // the calls and the per-choice limit 500 toman covers
 */
export function loweredReserve(reserve: Reserve, availableMicro: bigint): Reserve | null {
  const limit = reserve.outputLowerable;
  const output = reserve.output;
  if (!limit || !output || output.pricePer1m <= 0n) return null;
  const inputMicro = BigInt(reserve.input.units) * (reserve.inputPricePer1mMax ?? reserve.input.pricePer1m);
  const fixedMicro = BigInt(limit.fixedUnits) * output.pricePer1m;
  const leastOutputMicro = BigInt(limit.perChoiceMin * limit.choices) * output.pricePer1m;
  const hosted = reserve.hostedCalls;
  const callMicro = hosted ? hostedCallMicro(reserve, hosted) : 0n;
  let calls = hosted?.units ?? 0;
  if (hosted && callMicro > 0n) {
    const forCalls = availableMicro - inputMicro - fixedMicro - leastOutputMicro;
    calls = forCalls <= 0n ? 0 : Math.min(calls, Number(forCalls / callMicro));
  }
  const callsMicro = BigInt(calls) * callMicro;
  const forChoices = availableMicro - inputMicro - fixedMicro - callsMicro;
  if (forChoices <= 0n) return null;
  const perChoice = Math.min(limit.perChoice, Number(forChoices / (output.pricePer1m * BigInt(limit.choices))));
  if (perChoice < limit.perChoiceMin || (perChoice === limit.perChoice && calls === (hosted?.units ?? 0))) return null;
  const units = perChoice * limit.choices + limit.fixedUnits;
  return {
    ...reserve,
    output: { ...output, units },
    ...(hosted ? { hostedCalls: { ...hosted, units: calls } } : {}),
    tokens: reserve.tokens - (output.units - units),
    outputLowerable: { ...limit, perChoice },
  };
}

/** What one hosted call may cost: its price and the input tokens its results may add, at the dearest input price. */
function hostedCallMicro(reserve: Reserve, hosted: HostedCalls): bigint {
  return hosted.pricePer1m + BigInt(hosted.inputUnitsPerCall) * (reserve.inputPricePer1mMax ?? reserve.input.pricePer1m);
}

export function reserveMicro(reserve: Reserve): bigint {
  const { input, output } = reserve;
  const inputPrice = reserve.inputPricePer1mMax ?? input.pricePer1m;
  const hosted = reserve.hostedCalls;
  return (
    BigInt(input.units) * inputPrice +
    (output ? BigInt(output.units) * output.pricePer1m : 0n) +
    (hosted ? BigInt(hosted.units) * hostedCallMicro(reserve, hosted) : 0n)
  );
}

/** The reserve with its input counted exactly (never above the cheap bound); tokens follow the input. */
export async function exactly(reserve: Reserve): Promise<Reserve> {
  const units = Math.min(reserve.input.units, await reserve.exactInputUnits!());
  const tokens = reserve.tokens - (reserve.input.units - units);
  return { ...reserve, input: { ...reserve.input, units }, tokens: Math.max(0, tokens), exact: true };
}
