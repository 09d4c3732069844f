/**
 * The Admission handle: from admission on it owns the reserve (the hold): extensions (a stream
 * metered live) and exactly one settlement, which records the request (metrics, access line)
 * whatever happened. The upstream's use beyond the reserve is charged at settlement from what
 * the wallet has (the key actor extends the hold); only what the wallet cannot cover is written off.
 */
import { EXTEND, SETTLE, type Settlement } from "../../actors/protocol.ts";
import type { Region } from "../../actors/pool/pool.ts";
import { partitionOf } from "../../actors/subjects.ts";
import type { CatalogModel } from "../catalog/catalog.ts";
import type { Operation } from "../catalog/seed.ts";
import { invariant } from "../invariant.ts";
import type { KeyRecord } from "../keys/store.ts";
import { observeRequest } from "../metrics/observe.ts";
import { costOf, countsOf, UNITS, type Prices } from "../units.ts";
import type { Caller } from "./caller.ts";
import { COST_HEADER } from "./costReply.ts";
import type { GatewayDeps } from "./deps.ts";
import { pricedAt, type PricedUsage, unitPricesOf, type UsedUnits } from "./prices.ts";
import { boundedUsage, type UsageAnomaly, type UsageBounds, type UsedFloor } from "./bounds.ts";
import { chargedBelowTier, type Reserve, type ServedTierPrices } from "./reserve.ts";

/** HTTP-style status recorded for a request whose client went away before the end. */
export const STATUS_CLIENT_CLOSED = 499;

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

export interface Settled {
  billedMicro: bigint;
  meteredMicro: bigint;
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

/** What an Admission uses: the key actor over the bus, and where it records the request. */
export type SettlementDeps = Pick<GatewayDeps, "env" | "bus" | "subjects" | "metrics" | "log">;

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
    private readonly deps: SettlementDeps,
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
   * The units within the request's bounds (bounds.ts): input up to the cost value's input bound,
   * output up to what the hold covers, cache writes only when the prompt asked for them. A report
   * outside them is an upstream anomaly: logged, counted per backend, charged within the bounds.
   */
  private bounded(used: UsedUnits, backend: string | null, floor?: UsedFloor): UsedUnits {
    const inputMax = this.inputUnitsMax;
    const bounds: UsageBounds = {
      inputMax,
      outputMax: this.reserve.output ? this.outputCovered : (used.output ?? 0),
      cacheWriteMax:
        this.reserve.inputPricePer1mMax === undefined && this.model.price.tomanPer1m.has(UNITS.cache_write.priceKey) ? 0 : inputMax,
      hostedCallsMax: this.hostedCallsAllowed,
      ...(floor ? { floor } : {}),
    };
    const { used: bounded, anomalies } = boundedUsage(used, bounds);
    if (anomalies.length === 0) return bounded;
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
        outputMax: bounds.outputMax,
        hostedCallsMax: bounds.hostedCallsMax,
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
