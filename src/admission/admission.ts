/**
 * Admission: the one path every paid request takes, whatever its operation (chat, embeddings,
 * images, speech, transcription) and whatever brought it (HTTP or the internal NATS service). It
 * reads no HTTP `Request`: callers hand it the credentials they received.
 *
 *   enter      browser origin (refused unless allowed) → the key → residency: the request's
 *              `x-darvaze-residency` or the key's own setting, either one keeps the request in the
 *              country
 *   model      in the catalog, of this operation, priced for its units; a pool that has a backend
 *              where the request may go
 *   admit      a small ticket to the key actor over the bus: slot, limits, the reserve held; at the
 *              wallet's edge, once more with the exact reserve when the operation can compute one
 *   Admission  from then on owns the reserve: extensions (a stream metered live) and exactly one
 *              settlement, which records the request (metrics, access line) whatever happened
 *
 * Prices are toman per 1M units, so `units × price` is micro-toman exactly. A chat prompt's
 * tokens read from or written to a vendor's prompt cache are priced at the model's cache-read and
 * cache-write prices; a model without such a price bills them as input. The upstream's use
 * beyond the reserve is charged at settlement from what the wallet has (the key actor extends
 * the hold); only what the wallet cannot cover is written off.
 */
import { ADMIT, EXTEND, SETTLE, type AdmitTicket, type RateInfo, type Settlement } from "../../actors/protocol.ts";
import type { PoolActor, Region } from "../../actors/pool/pool.ts";
import { partitionOf } from "../../actors/subjects.ts";
import type { Catalog, CatalogModel } from "../catalog/catalog.ts";
import type { Operation } from "../catalog/seed.ts";
import { describe, fail, isFailure, type Failure } from "../errors.ts";
import { invariant } from "../invariant.ts";
import type { EdgeDeps } from "./deps.ts";
import type { KeyRecord } from "../keys/store.ts";
import { observeRefused, observeRequest } from "../metrics/observe.ts";
import { addressRefusal, modelRefusal } from "../keys/restrictions.ts";
import { COST_HEADER } from "./costReply.ts";
import { costOf, countsOf, splitParts, UNIT_NAMES, UNITS, type Counts, type Prices, type UnitRow } from "../units.ts";

/** What a caller presented, read from HTTP or NATS headers alike. */
export interface Credentials {
  /** The API key (`Authorization: Bearer …` or `x-api-key`), or null. */
  key: string | null;
  /** A browser page's `Origin`, or null for a server. */
  origin: string | null;
  /** `x-darvaze-residency`, or null. */
  residency: string | null;
  /** The client's address, asked only for a key restricted to addresses; absent: unknown (NATS). */
  address?: () => string | null;
}

/** The caller, once its key is known: where its request may be served. */
export interface Caller {
  key: KeyRecord;
  /** `in-country` when the request or the key requires it; undefined: anywhere. */
  region: Region | undefined;
}

/**
 * Whether a text's o200k count is the vendor's own (OpenAI's models). Elsewhere a text is bounded
 * by its UTF-8 bytes: byte-level BPE never makes more tokens than bytes.
 */
export function countsExactly(model: Pick<CatalogModel, "vendor">): boolean {
  return model.vendor === "openai";
}

/** HTTP-style status recorded for a request whose client went away before the end. */
export const STATUS_CLIENT_CLOSED = 499;

/**
 * The key and the residency: one rule for every operation and every transport.
 * @example const caller = await enter(deps, { key: "sk-dvz-…", origin: null, residency: "in-country" });
 */
const KEYS_UNAVAILABLE = fail("service_unavailable", "The API key cannot be checked right now; try again shortly.", { retryAfterS: 1 });

export async function enter(deps: Pick<EdgeDeps, "env" | "keys">, credentials: Credentials): Promise<Caller | Failure> {
  const refused = originRefusal(credentials.origin, deps.env.ALLOWED_ORIGINS);
  if (refused) return refused;
  // The database being away (a key not yet cached) is a 503 to retry, not an internal error.
  const key = await deps.keys.authenticate(credentials.key).catch(() => KEYS_UNAVAILABLE);
  if ("code" in key) return key;
  // Bun's requestIP builds a fresh address object: asked only when the key names addresses.
  const outside = key.allowedIps === null ? null : addressRefusal(key, credentials.address?.() ?? null);
  if (outside) return outside;
  const region = residencyOf(credentials.residency, key);
  if (region !== undefined && typeof region !== "string") return region;
  return { key, region };
}

/** A browser page carries Origin; keys are for servers unless the operator allows the origin. */
export function originRefusal(origin: string | null, allowed: readonly string[]): Failure | null {
  if (origin === null || allowed.includes(origin)) return null;
  return fail(
    "origin_not_allowed",
    "Darvaze API keys are for servers only: this request came from a browser page (it carries an Origin header). " +
      "Call the API from your backend, or ask the operator to allow this origin.",
  );
}

/** The request's header or the key's setting: either one keeps the request in the country. */
export function residencyOf(header: string | null, key: Pick<KeyRecord, "residency">): Region | undefined | Failure {
  if (header !== null && header !== "in-country") {
    return fail("invalid_request", "x-darvaze-residency must be `in-country` when set.", { param: "x-darvaze-residency" });
  }
  return header === "in-country" || key.residency === "in-country" ? "in-country" : undefined;
}

/**
 * The model a request names (by id or alias), or the refusal: 410 naming the successor of a
 * retired model, 404 naming the closest catalog ids of an unknown one.
 */
export function servedModel(catalog: Catalog, id: string): CatalogModel | Failure {
  const found = catalog.lookup(id);
  switch (found.kind) {
    case "found":
      return found.model;
    case "retired":
      return fail("model_retired", `The model \`${id}\` has been retired; use \`${found.successor}\` instead.`, { param: "model" });
    case "unknown": {
      const closest = found.suggestions.map((s) => `\`${s}\``).join(", ");
      const hint = closest ? ` The closest models are ${closest}.` : "";
      return fail(
        "model_not_found",
        `The model \`${id}\` is not in this gateway's catalog; an operator can add it with \`gw catalog import\` (docs/catalog.md).${hint}`,
        { param: "model" },
      );
    }
  }
}

/**
 * The catalog model for an operation, or the 404/410/400 a client expects, or the 403 of a key
 * whose allowlist does not name it (an alias counts as its catalog id).
 */
export function operationModel(
  deps: Pick<EdgeDeps, "catalog">,
  id: string,
  operation: Operation,
  key: Pick<KeyRecord, "allowedModels">,
): CatalogModel | Failure {
  const model = servedModel(deps.catalog, id);
  if (isFailure(model)) return model;
  const refused = modelRefusal(key, model);
  if (refused) return refused;
  if (model.operation !== operation) {
    return fail("invalid_request", `\`${model.id}\` is a ${model.operation} model, not a ${operation} model.`, { param: "model" });
  }
  return model;
}

/** The unit price of a model, or a 403 naming what is missing. */
export function unitPrice(model: CatalogModel, unit: string, param = "model"): bigint | Failure {
  const price = model.price.tomanPer1m.get(unit);
  if (price === undefined)
    return fail("model_forbidden", `${model.id} has no price for \`${unit}\` and cannot serve this request.`, { param });
  return price;
}

/** The model's pool, when it has a backend where the caller's request may go; else a 503. */
export function servingPool(deps: Pick<EdgeDeps, "pools">, model: CatalogModel, region: Region | undefined): PoolActor | Failure {
  const pool = deps.pools.get(model.id);
  if (!pool) return fail("no_healthy_backend", `No backend is configured for ${model.id}.`, { retryAfterS: 5 });
  if (region && !pool.hasRegion(region)) {
    return fail("no_healthy_backend", `${model.id} has no in-country backend, and this request must stay in the country.`, {
      retryAfterS: 5,
    });
  }
  return pool;
}

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
export function chargedBelowTier(reserve: Pick<Reserve, "promptTier">, used: Pick<UsedUnits, "input">): boolean {
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

export interface AdmitRequest {
  requestId: string;
  caller: Caller;
  model: CatalogModel;
  operation: Operation;
  reserve: Reserve;
  /** Performance-clock arrival, for the duration recorded at settlement. */
  startedMs?: number;
}

/** A refusal, with the rate headers that still apply. */
export interface Refusal {
  failure: Failure;
  headers: Record<string, string>;
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

const BILLING_BEHIND = fail("service_unavailable", "This node is behind on recording usage; try again shortly.", { retryAfterS: 1 });

/**
 * Admits a request: its reserve held by the key's actor, or the refusal (402, 429, 503) before any
 * upstream call. The refusal is recorded here; the caller only answers it.
 */
export async function admit(deps: EdgeDeps, r: AdmitRequest): Promise<Admission | Refusal> {
  const startedMs = r.startedMs ?? performance.now();
  // Backpressure: a node with more usage unwritten than one batch admits nothing new until it
  // catches up (a short wait), so that what a crash can lose stays within one batch.
  const behind = !deps.writer.hasRoom && !(await deps.writer.room());
  const result = behind ? { failure: BILLING_BEHIND, headers: {} } : await askKeyActor(deps, r, startedMs);
  if (result instanceof Admission) return result;
  const { key } = r.caller;
  recordRefusal(deps, { requestId: r.requestId, keyId: key.id, operation: r.operation, model: r.model.id, startedMs }, result.failure);
  return result;
}

/** The key's actor holds the reserve (asked again with an exact count when the cheap one does not fit), or refuses. */
async function askKeyActor(deps: EdgeDeps, r: AdmitRequest, startedMs: number): Promise<Admission | Refusal> {
  const { key } = r.caller;
  const subject = deps.subjects.keyAdmit(partitionOf(key.id));
  let reserve = r.reserve;
  let ticket: AdmitTicket = {
    keyId: key.id,
    requestId: r.requestId,
    model: r.model.id,
    reserveMicro: reserveMicro(reserve),
    reserveTokens: reserve.tokens,
    exact: reserve.exact,
  };
  try {
    let reply = await deps.bus.request(ADMIT, subject, ticket);
    if (!reply.ok && reply.exactNeeded && !reserve.exact && reserve.exactInputUnits) {
      reserve = await exactly(reserve);
      ticket = { ...ticket, reserveMicro: reserveMicro(reserve), reserveTokens: reserve.tokens, exact: true };
      reply = await deps.bus.request(ADMIT, subject, ticket);
    }
    // The wallet cannot cover the output limit: the request is served with the limit it covers.
    const lowered = !reply.ok && reply.availableMicro !== undefined ? loweredReserve(reserve, reply.availableMicro) : null;
    if (lowered) {
      reserve = lowered;
      ticket = { ...ticket, reserveMicro: reserveMicro(reserve), reserveTokens: reserve.tokens };
      reply = await deps.bus.request(ADMIT, subject, ticket);
    }
    const headers = rateHeaders(reply.rate);
    if (reply.ok) return new Admission(deps, { ...r, reserve, startedMs }, reply.holdId, ticket.reserveMicro, headers);
    return { failure: reply.failure, headers };
  } catch (error) {
    deps.log("error", "admit_unreachable", { requestId: r.requestId, error: (error as Error).message });
    return {
      failure: fail("service_unavailable", "Admission is unavailable right now; try again shortly.", { retryAfterS: 1 }),
      headers: {},
    };
  }
}

/** The reserve with its input counted exactly (never above the cheap bound); tokens follow the input. */
async function exactly(reserve: Reserve): Promise<Reserve> {
  const units = Math.min(reserve.input.units, await reserve.exactInputUnits!());
  const tokens = reserve.tokens - (reserve.input.units - units);
  return { ...reserve, input: { ...reserve.input, units }, tokens: Math.max(0, tokens), exact: true };
}

/** Records a request refused before any backend (bad input, key, money, limits). */
export function recordRefusal(
  deps: EdgeDeps,
  r: { requestId: string; keyId: string | null; operation: string; model: string | null; startedMs: number },
  failure: Failure,
): void {
  const status = describe(failure.code).status;
  observeRefused(deps, {
    requestId: r.requestId,
    keyId: r.keyId,
    operation: r.operation,
    model: r.model,
    status,
    code: failure.code,
    durationMs: performance.now() - r.startedMs,
  });
}

/**
 * The units a request used, by unit, as the upstream reported them (or as counted when it did
 * not): `input` is all input units (for chat, the whole prompt, cache reads and writes included),
 * `cache_write_1h` the part of `cache_write` kept for an hour, `hosted_call` the calls of the
 * vendor-run tool the request offered (`Reserve.hostedCalls`).
 */
export type UsedUnits = Counts & { input: number };

/** Usage priced by unit: what a settlement carries. */
export type PricedUsage = Pick<Settlement, "usage" | "prices" | "hostedCallUnit">;

/**
 * Used units priced by unit: each part of the prompt (cache reads, writes) at the model's price
 * for it when it has one (`UNITS[unit].priceKey`), else left in its whole (input, or 5-minute
 * writes for 1-hour ones); input and output at the request's prices, the hosted tool's calls at
 * its per-call price, at most the calls it was allowed.
 */
export function pricedUsage(
  used: UsedUnits,
  prices: ReadonlyMap<string, bigint>,
  inputPricePer1m: bigint,
  outputPricePer1m: bigint,
  hosted?: PricedUnits,
): PricedUsage {
  return pricedAt(used, unitPricesOf(prices, inputPricePer1m, outputPricePer1m, hosted), hosted);
}

/** A request's price by unit: input and output at its prices, each part the model prices apart, the hosted tool's calls. */
function unitPricesOf(
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

/** Used units priced at a request's prices by unit (unitPricesOf): pricedUsage with the prices looked up once. */
function pricedAt(used: UsedUnits, unitPrices: Prices, hosted?: PricedUnits): PricedUsage {
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

/** What the access line and the latency histograms need beyond the units. */
export interface SettleExtra {
  /** Performance-clock time of the first streamed token. */
  firstTokenMs?: number | null;
  /** The prompt and the delivered text; read only when the operator logs message content. */
  content?: () => { prompt: unknown; completion: string };
  /**
   * The most that may be charged: a stream cut where its hold could not be extended bills only
   * what was delivered; the rest of what was metered is written off.
   */
  billedMicroMax?: bigint;
  /**
   * What the gateway proved was used, for a usage the upstream reported: a report below it is
   * raised to it (an upstream anomaly, like a report above the bounds).
   */
  floor?: UsedFloor;
  /**
   * The upstream finished without a usage report (a proxy that drops it, a host that ignores
   * `stream_options`): billed by the gateway's own count, and recorded as an upstream anomaly.
   */
  usageMissing?: boolean;
  /** A request that ended early: who ended it, its output metered and the allowance billed on top (the usage record keeps them). */
  early?: Settlement["early"];
}

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

export interface Settled {
  billedMicro: bigint;
  meteredMicro: bigint;
}

/** Operations whose units are tokens (the access line reports them as tokens). */
const TOKEN_OPERATIONS: ReadonlySet<Operation> = new Set(["chat", "embeddings"]);

/**
 * An admitted request: owns its reserve (the hold taken for it), grows it for a stream metered
 * live, and settles it exactly once.
 */
export class Admission {
  readonly requestId: string;
  readonly key: KeyRecord;
  readonly region: Region | undefined;
  readonly model: CatalogModel;
  readonly operation: Operation;
  readonly reserve: Reserve;
  readonly startedMs: number;
  /** `x-ratelimit-*` headers for the reply, and `x-darvaze-cost` (the billed micro-toman) once settled. */
  readonly headers: Record<string, string>;
  private micro: bigint;
  private outputCovered: number;
  private settled: Promise<Settled | null> | null = null;
  private unreportedInput: Promise<number> | null = null;
  private unitPricesCached: Prices | null = null;
  private belowTierPricesCached: Prices | null = null;
  /** Set by servedAtDefaultTier: the prices this request is charged at instead of those it asked. */
  private servedPrices: ServedTierPrices | null = null;
  /** The parts of the upstream's usage report clamped or raised to their bounds (upstream anomalies). */
  anomalies: readonly UsageAnomaly[] = [];

  constructor(
    private readonly deps: EdgeDeps,
    r: AdmitRequest & { startedMs: number },
    readonly holdId: string,
    reservedMicro: bigint,
    headers: Record<string, string>,
  ) {
    this.requestId = r.requestId;
    this.key = r.caller.key;
    this.region = r.caller.region;
    this.model = r.model;
    this.operation = r.operation;
    this.reserve = r.reserve;
    this.startedMs = r.startedMs;
    this.headers = headers;
    this.micro = reservedMicro;
    this.outputCovered = r.reserve.output?.units ?? 0;
  }

  /** What the hold covers for this request now: the admitted reserve and every extension. */
  get reserveMicro(): bigint {
    return this.micro;
  }

  /** Output units the hold covers (all choices). */
  get coveredOutputUnits(): number {
    return this.outputCovered;
  }

  /** The output limit per choice the hold covers (lowered at the wallet's edge): what the upstream is told. */
  get outputPerChoice(): number | null {
    return this.reserve.outputLowerable?.perChoice ?? null;
  }

  /** The input the hold covers: the prompt's bound and what the hosted calls' results may add. */
  get inputUnitsMax(): number {
    const hosted = this.reserve.hostedCalls;
    return this.reserve.input.units + (hosted ? hosted.units * hosted.inputUnitsPerCall : 0);
  }

  /** The hosted-tool calls the hold covers: the `max_uses` the upstream is told (0: the tool is left out). */
  get hostedCallsAllowed(): number {
    return this.reserve.hostedCalls?.units ?? 0;
  }

  /**
   * The hosted-tool calls to bill when the upstream reported no usage, and the input their results
   * may have added: every call it was allowed when the backend runs the tool (the vendor may have
   * made them all), none when it does not.
   */
  hostedUnreported(backendRunsTool: boolean): { calls: number; inputUnits: number } {
    const hosted = this.reserve.hostedCalls;
    if (!backendRunsTool || !hosted) return { calls: 0, inputUnits: 0 };
    return { calls: hosted.units, inputUnits: hosted.units * hosted.inputUnitsPerCall };
  }

  /**
   * The cost value's input count, for a bill the upstream did not report: the exact count where
   * the vendor's tokenizer is known (the reserve offers one), else the bound valid for every
   * backend. Counted once, however often asked.
   */
  inputUnitsUnreported(): Promise<number> {
    const { input, exact, exactInputUnits } = this.reserve;
    this.unreportedInput ??=
      exact || !exactInputUnits ? Promise.resolve(input.units) : exactInputUnits().then((units) => Math.min(units, input.units));
    return this.unreportedInput;
  }

  /** What `used` is worth at this request's prices, by component (micro-toman). */
  usedMicro(used: UsedUnits): bigint {
    const priced = this.priced(used);
    return costOf(priced.usage, priced.prices);
  }

  /** The hosted-tool calls `used` is billed for: those reported, at most the calls the upstream was allowed. */
  hostedCallsBilled(used: UsedUnits): number {
    if (!this.reserve.hostedCalls) return 0;
    return Number(this.priced(used).usage.hosted_call ?? 0n);
  }

  /**
   * The upstream reports serving the default tier to a request that asked a priced `service_tier`
   * (OpenAI serves `default` when priority capacity is short): it is charged as the vendor bills
   * it, at the default tier's prices, each no higher than those held. Call before settling.
   */
  servedAtDefaultTier(): void {
    const served = this.reserve.atDefaultServiceTier;
    if (!served || this.settled || this.servedPrices !== null) return;
    const held = this.reserve.unitPricesPer1m ?? this.model.price.tomanPer1m;
    for (const [unit, price] of served.unitPricesPer1m) if (price > (held.get(unit) ?? price)) return;
    this.servedPrices = served;
    this.unitPricesCached = null;
    this.belowTierPricesCached = null;
  }

  /**
   * Used units at the request's prices: the tier's for a prompt above the tier's threshold (every
   * token of the request, input and output, as the vendors bill it), else the standard ones.
   */
  private priced(used: UsedUnits): PricedUsage {
    const tier = this.servedPrices ? this.servedPrices.promptTier : this.reserve.promptTier;
    if (tier && chargedBelowTier({ promptTier: tier }, used)) {
      this.belowTierPricesCached ??= unitPricesOf(
        tier.belowPricesPer1m,
        tier.belowPricesPer1m.get("input_token") ?? 0n,
        tier.belowPricesPer1m.get("output_token") ?? 0n,
        this.reserve.hostedCalls,
      );
      return pricedAt(used, this.belowTierPricesCached, this.reserve.hostedCalls);
    }
    return pricedAt(used, this.unitPrices, this.reserve.hostedCalls);
  }

  /** This request's prices by unit, looked up once (a stream prices its usage at every extension). */
  private get unitPrices(): Prices {
    if (this.unitPricesCached === null) {
      const { input, output, hostedCalls } = this.reserve;
      const served = this.servedPrices?.unitPricesPer1m;
      const prices = served ?? this.reserve.unitPricesPer1m ?? this.model.price.tomanPer1m;
      const inputPrice = served ? (served.get("input_token") ?? input.pricePer1m) : input.pricePer1m;
      const outputPrice = served ? (served.get("output_token") ?? 0n) : (output?.pricePer1m ?? 0n);
      this.unitPricesCached = unitPricesOf(prices, inputPrice, outputPrice, hostedCalls);
    }
    return this.unitPricesCached;
  }

  /** Grows the hold by `addUnits` output units; false when the key actor refuses (wallet, cap). */
  async extend(addUnits: number): Promise<boolean> {
    const output = this.reserve.output;
    if (!output || this.settled) return false;
    const ticket = {
      keyId: this.key.id,
      requestId: this.requestId,
      holdId: this.holdId,
      addTokens: addUnits,
      addMicro: BigInt(addUnits) * output.pricePer1m,
    };
    try {
      const reply = await this.deps.bus.request(EXTEND, this.deps.subjects.keyExtend(partitionOf(this.key.id)), ticket);
      if (!reply.ok) return false;
      this.micro = reply.reserveMicro;
      this.outputCovered += addUnits;
      return true;
    } catch (error) {
      this.deps.log("error", "extend_unreachable", { requestId: this.requestId, error: (error as Error).message });
      return false;
    }
  }

  /**
   * Settles the units used (none when the upstream failed) and records the request. Only the
   * first call counts; later calls get its result. Null when the key actor could not be reached
   * or refused (logged: the lease's deadline then returns the hold).
   */
  settle(used: UsedUnits, backend: string | null, status: number, extra: SettleExtra = {}): Promise<Settled | null> {
    if (!this.settled && extra.usageMissing) this.anomalies = [{ part: "usage", kind: "missing" }];
    this.settled ??= this.post(this.bounded(used, backend, extra.floor), backend, status, extra);
    return this.settled;
  }

  /**
   * The units within the request's bounds: input up to the cost value's input bound, output up
   * to what the hold covers (the limit sent), cache writes only when the prompt asked for them
   * (the reserve priced them); and, for a reported usage, at least what the gateway proved was
   * used (`floor`). Whatever a report claims beyond is clamped or raised, logged and counted per
   * backend: an upstream anomaly, charged only within the bounds.
   */
  private bounded(used: UsedUnits, backend: string | null, floor?: UsedFloor): UsedUnits {
    const inputMax = this.inputUnitsMax;
    const outputMax = this.reserve.output ? this.outputCovered : (used.output ?? 0);
    const cacheWriteMax =
      this.reserve.inputPricePer1mMax === undefined && this.model.price.tomanPer1m.has(UNITS.cache_write.priceKey) ? 0 : inputMax;
    const anomalies: UsageAnomaly[] = [];
    const bound = (part: string, value: number | undefined, max: number, min = 0) => {
      if (value === undefined) return value;
      if (value > max) anomalies.push({ part, kind: "over" });
      else if (value < Math.min(min, max)) anomalies.push({ part, kind: "under" });
      return Math.min(max, Math.max(value, min));
    };
    const input = bound("input", used.input, inputMax, floor?.input)!;
    const bounded: UsedUnits = {
      input,
      output: bound("output", used.output, outputMax, floor?.output),
      cache_read: used.cache_read === undefined ? undefined : Math.min(used.cache_read, input),
      cache_write: bound("cache_write", used.cache_write, Math.min(cacheWriteMax, input)),
    };
    if (used.cache_write_1h !== undefined) bounded.cache_write_1h = Math.min(used.cache_write_1h, bounded.cache_write ?? 0);
    if (used.hosted_call !== undefined) bounded.hosted_call = bound("hosted_calls", used.hosted_call, this.hostedCallsAllowed);
    if (anomalies.length === 0) return used;
    const over = anomalies.filter((a) => a.kind === "over").map((a) => a.part);
    const under = anomalies.filter((a) => a.kind === "under").map((a) => a.part);
    this.deps.log("warn", over.length > 0 ? "upstream_usage_clamped" : "upstream_usage_raised", {
      requestId: this.requestId,
      backend,
      over: over.join(","),
      under: under.join(","),
      reported: used,
      bounds: {
        inputMax,
        outputMax,
        hostedCallsMax: this.hostedCallsAllowed,
        ...(floor ? { inputMin: floor.input, outputMin: floor.output } : {}),
      },
    });
    for (const part of over) this.deps.metrics.clamped(this.model.id, backend, part);
    for (const part of under) this.deps.metrics.raised(this.model.id, backend, part);
    this.anomalies = [...this.anomalies, ...anomalies];
    return bounded;
  }

  private async post(used: UsedUnits, backend: string | null, status: number, extra: SettleExtra): Promise<Settled | null> {
    const priced = this.priced(used);
    const metered = costOf(priced.usage, priced.prices);
    // Bounded usage is within the hold by construction: a request past it is charged the hold at most.
    const within = invariant(metered <= this.micro, "held_covers_charged", { requestId: this.requestId, metered, held: this.micro });
    const billedMicroMax = within ? extra.billedMicroMax : this.micro;
    const settlement: Settlement = {
      keyId: this.key.id,
      requestId: this.requestId,
      holdId: this.holdId,
      reserveMicro: this.micro,
      model: this.model.id,
      operation: this.operation,
      backend,
      priceVersionId: this.model.price.versionId,
      ...priced,
      status,
      durationMs: Math.round(performance.now() - this.startedMs),
      billedMicroMax,
      ...(this.anomalies.length > 0 ? { anomalies: this.anomalies.map((a) => `${a.part}_${a.kind}`).join(",") } : {}),
      ...(extra.early ? { early: extra.early } : {}),
    };
    try {
      const reply = await this.deps.bus.request(SETTLE, this.deps.subjects.keySettle(partitionOf(this.key.id)), settlement);
      if (!reply.ok) {
        this.deps.log("error", "settle_refused", { requestId: this.requestId, code: reply.failure.code });
        return null;
      }
      this.record(settlement, used, reply, extra);
      this.headers[COST_HEADER] = String(reply.billedMicro);
      return { billedMicro: reply.billedMicro, meteredMicro: reply.meteredMicro };
    } catch (error) {
      this.deps.log("error", "settle_unreachable", { requestId: this.requestId, error: (error as Error).message });
      return null;
    }
  }

  private record(s: Settlement, used: UsedUnits, reply: Settled, extra: SettleExtra): void {
    const tokens = TOKEN_OPERATIONS.has(this.operation);
    const outputTokens = used.output ?? 0;
    const first = extra.firstTokenMs ?? null;
    const endMs = this.startedMs + s.durationMs;
    observeRequest(this.deps, {
      requestId: this.requestId,
      keyId: this.key.id,
      keyName: this.key.name,
      operation: this.operation,
      model: this.model.id,
      backend: s.backend,
      status: s.status,
      durationMs: s.durationMs,
      ttftMs: first === null ? null : first - this.startedMs,
      tpotMs: first === null || outputTokens < 2 ? null : (endMs - first) / (outputTokens - 1),
      inputTokens: tokens ? used.input : 0,
      outputTokens: tokens ? outputTokens : 0,
      ...(tokens ? { unitTokens: countsOf(s.usage) } : {}),
      billedMicro: reply.billedMicro,
      meteredMicro: reply.meteredMicro,
      content: extra.content,
    });
  }
}

/** `x-ratelimit-*` headers, OpenAI's names, for the limits the key has. */
export function rateHeaders(rate: RateInfo | undefined): Record<string, string> {
  const headers: Record<string, string> = {};
  if (!rate) return headers;
  if (rate.limitRequests !== undefined) {
    headers["x-ratelimit-limit-requests"] = String(rate.limitRequests);
    headers["x-ratelimit-remaining-requests"] = String(rate.remainingRequests ?? 0);
    headers["x-ratelimit-reset-requests"] = `${rate.resetRequestsS ?? 0}s`;
  }
  if (rate.limitTokens !== undefined) {
    headers["x-ratelimit-limit-tokens"] = String(rate.limitTokens);
    headers["x-ratelimit-remaining-tokens"] = String(rate.remainingTokens ?? 0);
    headers["x-ratelimit-reset-tokens"] = `${rate.resetTokensS ?? 0}s`;
  }
  return headers;
}
