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
import {
  ADMIT,
  EXTEND,
  pricedMicro,
  SETTLE,
  type AdmitTicket,
  type PricedUsage,
  type RateInfo,
  type Settlement,
} from "../../actors/protocol.ts";
import type { PoolActor, Region } from "../../actors/pool/pool.ts";
import { partitionOf } from "../../actors/subjects.ts";
import type { CatalogModel } from "../catalog/catalog.ts";
import type { Operation } from "../catalog/seed.ts";
import { describe, fail, type Failure } from "../errors.ts";
import type { EdgeDeps } from "../http/deps.ts";
import type { KeyRecord } from "../keys/store.ts";
import { observeRefused, observeRequest } from "../metrics/observe.ts";

/** What a caller presented, read from HTTP or NATS headers alike. */
export interface Credentials {
  /** The API key (`Authorization: Bearer …` or `x-api-key`), or null. */
  key: string | null;
  /** A browser page's `Origin`, or null for a server. */
  origin: string | null;
  /** `x-darvaze-residency`, or null. */
  residency: string | null;
}

/** The caller, once its key is known: where its request may be served. */
export interface Caller {
  key: KeyRecord;
  /** `in-country` when the request or the key requires it; undefined: anywhere. */
  region: Region | undefined;
}

/** HTTP-style status recorded for a request whose client went away before the end. */
export const STATUS_CLIENT_CLOSED = 499;

/**
 * The key and the residency: one rule for every operation and every transport.
 * @example const caller = await enter(deps, { key: "sk-dvz-…", origin: null, residency: "in-country" });
 */
export async function enter(deps: Pick<EdgeDeps, "env" | "keys">, credentials: Credentials): Promise<Caller | Failure> {
  const refused = originRefusal(credentials.origin, deps.env.ALLOWED_ORIGINS);
  if (refused) return refused;
  const key = await deps.keys.authenticate(credentials.key);
  if ("code" in key) return key;
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

/** The catalog model for an operation, or the 404/400 a client expects. */
export function operationModel(deps: Pick<EdgeDeps, "catalog">, id: string, operation: Operation): CatalogModel | Failure {
  const model = deps.catalog.get(id);
  if (!model) return fail("model_not_found", `The model \`${id}\` does not exist or you do not have access to it.`, { param: "model" });
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
  output?: PricedUnits;
  tokens: number;
  /** The units are exact (characters, images); false for a cheap upper bound. */
  exact: boolean;
  /** A tighter input bound (an exact count), asked only when the cheap reserve does not fit the wallet. */
  exactInputUnits?: () => Promise<number>;
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
  return BigInt(input.units) * inputPrice + (output ? BigInt(output.units) * output.pricePer1m : 0n);
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

/** The units a request used, as the upstream reported them (or as counted when it did not). */
export interface UsedUnits {
  /** All input units: for chat, the whole prompt, cache reads and writes included. */
  input: number;
  output?: number;
  /** Prompt tokens of `input` read from the vendor's prompt cache. */
  cacheRead?: number;
  /** Prompt tokens of `input` written to the vendor's prompt cache. */
  cacheWrite?: number;
}

/**
 * A reply's token usage as the units a chat request settles.
 * @example usedTokens({ inputTokens: 4020, outputTokens: 7, cacheReadTokens: 3000, cacheWriteTokens: 1000 })
 *   // { input: 4020, output: 7, cacheRead: 3000, cacheWrite: 1000 }
 */
export function usedTokens(usage: {
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens?: number;
  cacheWriteTokens?: number;
}): UsedUnits {
  return { input: usage.inputTokens, output: usage.outputTokens, cacheRead: usage.cacheReadTokens, cacheWrite: usage.cacheWriteTokens };
}

/**
 * Used units priced by component: cache reads and writes at the model's cache prices when it
 * has them, else as input; the input component is what remains of the prompt.
 */
export function pricedUsage(
  used: UsedUnits,
  prices: ReadonlyMap<string, bigint>,
  inputPricePer1m: bigint,
  outputPricePer1m: bigint,
): PricedUsage {
  const readPrice = prices.get("cache_read_token");
  const writePrice = prices.get("cache_write_token");
  const read = readPrice === undefined ? 0 : Math.min(used.cacheRead ?? 0, used.input);
  const write = writePrice === undefined ? 0 : Math.min(used.cacheWrite ?? 0, used.input - read);
  const priced: PricedUsage = {
    inputUnits: BigInt(used.input - read - write),
    outputUnits: BigInt(used.output ?? 0),
    inputPricePer1m,
    outputPricePer1m,
  };
  if (read > 0) Object.assign(priced, { cacheReadUnits: BigInt(read), cacheReadPricePer1m: readPrice });
  if (write > 0) Object.assign(priced, { cacheWriteUnits: BigInt(write), cacheWritePricePer1m: writePrice });
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
  /** `x-ratelimit-*` headers for the reply. */
  readonly headers: Record<string, string>;
  private micro: bigint;
  private outputCovered: number;
  private settled: Promise<Settled | null> | null = null;

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

  /** What `used` is worth at this request's prices, by component (micro-toman). */
  usedMicro(used: UsedUnits): bigint {
    return pricedMicro(this.priced(used));
  }

  private priced(used: UsedUnits): PricedUsage {
    return pricedUsage(used, this.model.price.tomanPer1m, this.reserve.input.pricePer1m, this.reserve.output?.pricePer1m ?? 0n);
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
    this.settled ??= this.post(used, backend, status, extra);
    return this.settled;
  }

  private async post(used: UsedUnits, backend: string | null, status: number, extra: SettleExtra): Promise<Settled | null> {
    const settlement: Settlement = {
      keyId: this.key.id,
      requestId: this.requestId,
      holdId: this.holdId,
      reserveMicro: this.micro,
      model: this.model.id,
      operation: this.operation,
      backend,
      priceVersionId: this.model.price.versionId,
      ...this.priced(used),
      status,
      durationMs: Math.round(performance.now() - this.startedMs),
      billedMicroMax: extra.billedMicroMax,
    };
    try {
      const reply = await this.deps.bus.request(SETTLE, this.deps.subjects.keySettle(partitionOf(this.key.id)), settlement);
      if (!reply.ok) {
        this.deps.log("error", "settle_refused", { requestId: this.requestId, code: reply.failure.code });
        return null;
      }
      this.record(settlement, used, reply, extra);
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
      cacheReadTokens: tokens ? Number(s.cacheReadUnits ?? 0n) : 0,
      cacheWriteTokens: tokens ? Number(s.cacheWriteUnits ?? 0n) : 0,
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
