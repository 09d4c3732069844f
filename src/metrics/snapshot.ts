/**
 * This node's live pool snapshot, taken once a second: the state of every backend (read through
 * `backendSnapshot`, the only place that knows the pool actor's fields) and the rates of the
 * last interval, computed from cumulative counters as differences between two samples.
 *
 *   settle → Traffic (cumulative: requests, tokens, spend per model, backend and key)
 *   tick   → Sampler: Δcounters / Δt → PoolSnapshot (actors/protocol.ts) → bus + live view
 *
 * Invariant: everything here is bounded (`TRACKED_KEYS_MAX`, the snapshot's list bounds) and
 * carries no key secret and no message content.
 */
import { hostname } from "node:os";
import { randomBase62 } from "../ids.ts";
import type { PoolHost } from "../../actors/pool/host.ts";
import type { Backend } from "../../actors/pool/pool.ts";
import {
  SNAPSHOT_BACKENDS_MAX,
  SNAPSHOT_MODELS_MAX,
  SNAPSHOT_TOP_KEYS_MAX,
  type BackendSnapshot,
  type BreakerState,
  type KeySpend,
  type ModelSnapshot,
  type PoolSnapshot,
} from "../../actors/protocol.ts";

/** This process's name in the cluster's live view: host, process id and a random suffix. */
export function nodeName(): string {
  return `${hostname()}-${process.pid}-${randomBase62(4)}`;
}

/** Keys whose spend this node remembers for the top-keys list; the smallest are dropped beyond. */
export const TRACKED_KEYS_MAX = 10_000;
/** Models whose traffic this node counts; requests for more are still served, not counted here. */
export const TRACKED_MODELS_MAX = 5_000;

/** A backend's state as the pool actor holds it, with cumulative attempt counts. */
export interface BackendState {
  inFlight: number;
  concurrencyLimit: number;
  ttftEwmaMs: number;
  tpotEwmaMs: number | null;
  breaker: BreakerState;
  quotaShare: number | null;
  attempts: number;
  failures: number;
}

/**
 * The one reader of the pool actor's backend fields: adapt this when the pool changes. The
 * quota share is this node's concurrency limit over the backend's whole cap (1 until the cluster
 * splits the cap between nodes).
 */
export function backendSnapshot(b: Backend, nowMs: number): BackendState {
  const cap = b.config.concurrency_max;
  return {
    inFlight: b.inFlight,
    concurrencyLimit: b.concurrencyLimit,
    ttftEwmaMs: b.ttft.value,
    tpotEwmaMs: b.tpot.value,
    breaker: breakerStateOf(b.breaker.state(nowMs)),
    quotaShare: cap > 0 ? Math.min(1, b.concurrencyLimit / cap) : null,
    attempts: b.requests,
    failures: b.failures,
  };
}

function breakerStateOf(state: "closed" | "open" | "half-open"): BreakerState {
  return state === "half-open" ? "half_open" : state;
}

interface ModelCounts {
  requests: number;
  errors: number;
  outputTokens: number;
  spendMicro: bigint;
  ttftSumMs: number;
  ttftCount: number;
}

export interface TrafficRecord {
  model: string;
  backend: string | null;
  status: number;
  outputTokens: number;
  billedMicro: bigint;
  ttftMs: number | null;
  keyId: string | null;
  keyName: string | null;
}

/** Cumulative counters of settled requests, fed once per request. */
export class Traffic {
  readonly models = new Map<string, ModelCounts>();
  /** Output tokens per `model\u0000backend`. */
  readonly backendTokens = new Map<string, number>();
  readonly keys = new Map<string, { name: string; spentMicro: bigint }>();

  add(r: TrafficRecord): void {
    let m = this.models.get(r.model);
    if (!m) {
      if (this.models.size >= TRACKED_MODELS_MAX) return;
      m = { requests: 0, errors: 0, outputTokens: 0, spendMicro: 0n, ttftSumMs: 0, ttftCount: 0 };
      this.models.set(r.model, m);
    }
    m.requests++;
    if (r.status >= 500) m.errors++;
    m.outputTokens += r.outputTokens;
    m.spendMicro += r.billedMicro;
    if (r.ttftMs !== null) {
      m.ttftSumMs += r.ttftMs;
      m.ttftCount++;
    }
    if (r.backend !== null && r.outputTokens > 0) {
      const id = backendId(r.model, r.backend);
      this.backendTokens.set(id, (this.backendTokens.get(id) ?? 0) + r.outputTokens);
    }
    if (r.keyId !== null && r.billedMicro > 0n) this.addSpend(r.keyId, r.keyName ?? "", r.billedMicro);
  }

  private addSpend(keyId: string, name: string, billed: bigint): void {
    const known = this.keys.get(keyId);
    if (known) {
      known.spentMicro += billed;
      known.name = name;
      return;
    }
    if (this.keys.size >= TRACKED_KEYS_MAX) {
      // Forget the smallest half: a key that spends little is not a top key.
      const sorted = [...this.keys.entries()].sort((a, b) => (a[1].spentMicro < b[1].spentMicro ? -1 : 1));
      for (const [id] of sorted.slice(0, TRACKED_KEYS_MAX / 2)) this.keys.delete(id);
    }
    this.keys.set(keyId, { name, spentMicro: billed });
  }

  topKeys(limit = SNAPSHOT_TOP_KEYS_MAX): KeySpend[] {
    return [...this.keys.entries()]
      .sort((a, b) => (a[1].spentMicro === b[1].spentMicro ? 0 : a[1].spentMicro > b[1].spentMicro ? -1 : 1))
      .slice(0, limit)
      .map(([keyId, k]) => ({ keyId, name: k.name, spentMicro: k.spentMicro }));
  }
}

function backendId(model: string, backend: string): string {
  return `${model}\u0000${backend}`;
}

/** Turns cumulative counters into per-interval rates; one per node. */
export class Sampler {
  private prev = new Map<string, number>();
  private prevSpend = new Map<string, bigint>();
  private prevAtMs: number | null = null;

  constructor(
    private readonly node: string,
    private readonly pools: PoolHost,
    private readonly traffic: Traffic,
  ) {}

  /** `nowMs` is the pool's monotonic clock (breakers), `wallMs` the snapshot's time stamp. */
  sample(nowMs = performance.now(), wallMs = Date.now()): PoolSnapshot {
    const elapsedS = this.prevAtMs === null ? 1 : Math.max(0.001, (nowMs - this.prevAtMs) / 1000);
    this.prevAtMs = nowMs;
    const next = new Map<string, number>();
    const nextSpend = new Map<string, bigint>();
    const rate = (id: string, value: number): number => {
      next.set(id, value);
      return Math.max(0, value - (this.prev.get(id) ?? 0)) / elapsedS;
    };

    const backends: BackendSnapshot[] = [];
    for (const pool of this.pools.all()) {
      if (!pool.backends.some((b) => b.requests > 0 || b.inFlight > 0)) continue;
      for (const b of pool.backends) {
        if (backends.length >= SNAPSHOT_BACKENDS_MAX) break;
        const s = backendSnapshot(b, nowMs);
        const id = backendId(pool.model, b.name);
        const attemptsPerS = rate(`a:${id}`, s.attempts);
        const failuresPerS = rate(`f:${id}`, s.failures);
        backends.push({
          model: pool.model,
          backend: b.name,
          region: b.config.region,
          inFlight: s.inFlight,
          concurrencyLimit: s.concurrencyLimit,
          ttftEwmaMs: round(s.ttftEwmaMs),
          tpotEwmaMs: s.tpotEwmaMs === null ? null : round(s.tpotEwmaMs),
          requestsPerS: round(attemptsPerS),
          tokensPerS: round(rate(`t:${id}`, this.traffic.backendTokens.get(id) ?? 0)),
          errorRate: attemptsPerS > 0 ? Math.min(1, round(failuresPerS / attemptsPerS)) : s.breaker === "closed" ? 0 : 1,
          breaker: s.breaker,
          quotaShare: s.quotaShare,
        });
      }
    }

    const models: ModelSnapshot[] = [];
    for (const [model, m] of this.traffic.models) {
      if (models.length >= SNAPSHOT_MODELS_MAX) break;
      const ttftCount = m.ttftCount - (this.prev.get(`tc:${model}`) ?? 0);
      const ttftSum = m.ttftSumMs - (this.prev.get(`ts:${model}`) ?? 0);
      next.set(`tc:${model}`, m.ttftCount);
      next.set(`ts:${model}`, m.ttftSumMs);
      nextSpend.set(model, m.spendMicro);
      const spent = m.spendMicro - (this.prevSpend.get(model) ?? 0n);
      models.push({
        model,
        requestsPerS: round(rate(`r:${model}`, m.requests)),
        errorsPerS: round(rate(`e:${model}`, m.errors)),
        tokensPerS: round(rate(`o:${model}`, m.outputTokens)),
        spendMicroPerS: round(Number(spent > 0n ? spent : 0n) / elapsedS),
        ttftMs: ttftCount > 0 ? round(ttftSum / ttftCount) : null,
      });
    }
    this.prev = next;
    this.prevSpend = nextSpend;
    return {
      node: this.node,
      atMs: Math.round(wallMs),
      intervalMs: Math.max(1, Math.round(elapsedS * 1000)),
      backends,
      models,
      topKeys: this.traffic.topKeys(),
    };
  }
}

function round(n: number): number {
  return Math.round(n * 1000) / 1000;
}
