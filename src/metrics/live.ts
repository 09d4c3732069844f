/**
 * The cluster's live view. Every node samples its pools once a second and publishes the
 * snapshot on `metricsPools`; every node keeps the latest snapshot of each node it hears (its
 * own included) and merges them into one view, which `/admin/pools/live` streams as SSE.
 *
 *   tick (SNAPSHOT_INTERVAL_MS) → Sampler → bus.publish → every node: latest[node] = snapshot
 *   tick → merge(latest, dropping nodes silent for SNAPSHOT_STALE_MS) → SSE listeners
 *
 * Invariant: a node that stopped publishing leaves the view within SNAPSHOT_STALE_MS; the
 * number of nodes and listeners is bounded.
 */
import { z } from "zod";
import {
  backendSnapshotSchema,
  keySpendSchema,
  modelSnapshotSchema,
  POOL_SNAPSHOTS,
  type BreakerState,
  type KeySpend,
  type ModelSnapshot,
  type PoolSnapshot,
} from "../../actors/protocol.ts";
import type { Bus, Unsubscribe } from "../bus/bus.ts";
import { every } from "../background.ts";
import type { Logger } from "../log.ts";
import type { Sampler } from "./snapshot.ts";

export const SNAPSHOT_INTERVAL_MS = 1_000;
/** A node whose last snapshot is older than this is dropped from the view. */
export const SNAPSHOT_STALE_MS = 3_500;
export const LIVE_NODES_MAX = 256;
export const LIVE_LISTENERS_MAX = 64;
export const LIVE_TOP_KEYS_MAX = 10;

/** A backend across the cluster: sums of in-flight and rates, the worst breaker of any node. */
export const liveBackendSchema = backendSnapshotSchema.extend({ nodes: z.number().int().positive() });
export type LiveBackend = z.infer<typeof liveBackendSchema>;

/** What `/admin/pools/live` sends each second (as JSON, bigints as strings). */
export const liveViewSchema = z.object({
  atMs: z.number(),
  nodes: z.array(z.object({ node: z.string(), atMs: z.number() })),
  backends: z.array(liveBackendSchema),
  models: z.array(modelSnapshotSchema),
  topKeys: z.array(keySpendSchema),
});
export type LiveView = z.infer<typeof liveViewSchema>;

const BREAKER_RANK: Record<BreakerState, number> = { closed: 0, half_open: 1, open: 2 };

/**
 * Merges the nodes' latest snapshots: rates and in-flight add up; EWMAs are averaged weighted by
 * requests (plainly when idle); a backend's breaker is the worst any node sees.
 */
export function mergeSnapshots(snapshots: readonly PoolSnapshot[], atMs: number): LiveView {
  const backends = new Map<string, LiveBackend & { weight: number }>();
  for (const s of snapshots) {
    for (const b of s.backends) {
      const id = `${b.model}\u0000${b.backend}`;
      const w = b.requestsPerS + 1e-9;
      const m = backends.get(id);
      if (!m) {
        backends.set(id, { ...b, nodes: 1, weight: w });
        continue;
      }
      const total = m.weight + w;
      m.ttftEwmaMs = (m.ttftEwmaMs * m.weight + b.ttftEwmaMs * w) / total;
      m.tpotEwmaMs =
        m.tpotEwmaMs === null || b.tpotEwmaMs === null
          ? (m.tpotEwmaMs ?? b.tpotEwmaMs)
          : (m.tpotEwmaMs * m.weight + b.tpotEwmaMs * w) / total;
      m.errorRate = (m.errorRate * m.weight + b.errorRate * w) / total;
      m.weight = total;
      m.inFlight += b.inFlight;
      m.concurrencyLimit += b.concurrencyLimit;
      m.requestsPerS += b.requestsPerS;
      m.tokensPerS += b.tokensPerS;
      if (BREAKER_RANK[b.breaker] > BREAKER_RANK[m.breaker]) m.breaker = b.breaker;
      m.quotaShare = m.quotaShare === null || b.quotaShare === null ? null : Math.min(1, m.quotaShare + b.quotaShare);
      m.nodes++;
    }
  }
  const models = new Map<string, ModelSnapshot & { ttftWeight: number }>();
  for (const s of snapshots) {
    for (const x of s.models) {
      const m = models.get(x.model);
      if (!m) {
        models.set(x.model, { ...x, ttftWeight: x.ttftMs === null ? 0 : x.requestsPerS + 1e-9 });
        continue;
      }
      if (x.ttftMs !== null) {
        const w = x.requestsPerS + 1e-9;
        m.ttftMs = ((m.ttftMs ?? 0) * m.ttftWeight + x.ttftMs * w) / (m.ttftWeight + w);
        m.ttftWeight += w;
      }
      m.requestsPerS += x.requestsPerS;
      m.errorsPerS += x.errorsPerS;
      m.tokensPerS += x.tokensPerS;
      m.spendMicroPerS += x.spendMicroPerS;
    }
  }
  const keys = new Map<string, KeySpend>();
  for (const s of snapshots) {
    for (const k of s.topKeys) {
      const known = keys.get(k.keyId);
      if (known) known.spentMicro += k.spentMicro;
      else keys.set(k.keyId, { ...k });
    }
  }
  return {
    atMs,
    nodes: snapshots.map((s) => ({ node: s.node, atMs: s.atMs })).sort((a, b) => a.node.localeCompare(b.node)),
    backends: [...backends.values()]
      .map(({ weight: _, ...b }) => b)
      .sort((a, b) => a.model.localeCompare(b.model) || a.backend.localeCompare(b.backend)),
    models: [...models.values()].map(({ ttftWeight: _, ...m }) => m).sort((a, b) => a.model.localeCompare(b.model)),
    topKeys: [...keys.values()]
      .sort((a, b) => (a.spentMicro === b.spentMicro ? 0 : a.spentMicro > b.spentMicro ? -1 : 1))
      .slice(0, LIVE_TOP_KEYS_MAX),
  };
}

export interface LiveOptions {
  bus: Bus;
  subject: string;
  sampler: Sampler;
  log: Logger;
  intervalMs?: number;
  staleMs?: number;
}

/** Publishes this node's snapshots and keeps the merged view for SSE listeners. */
export class LiveHub {
  private readonly latest = new Map<string, { snapshot: PoolSnapshot; receivedMs: number }>();
  private readonly listeners = new Set<(view: LiveView) => void>();
  private stopTicking: (() => void) | null = null;
  private unsubscribe: Unsubscribe | null = null;
  private view: LiveView = { atMs: Date.now(), nodes: [], backends: [], models: [], topKeys: [] };

  constructor(private readonly options: LiveOptions) {}

  start(): void {
    const { bus, subject } = this.options;
    this.unsubscribe = bus.subscribe(POOL_SNAPSHOTS, subject, (snapshot) => this.receive(snapshot));
    this.stopTicking = every("pool_snapshot", this.options.intervalMs ?? SNAPSHOT_INTERVAL_MS, this.options.log, () => this.tick());
  }

  stop(): void {
    this.stopTicking?.();
    this.unsubscribe?.();
    this.listeners.clear();
  }

  private receive(snapshot: PoolSnapshot): void {
    if (!this.latest.has(snapshot.node) && this.latest.size >= LIVE_NODES_MAX) return;
    this.latest.set(snapshot.node, { snapshot, receivedMs: performance.now() });
  }

  private tick(): void {
    const snapshot = this.options.sampler.sample();
    // Our own snapshot counts at once; the bus may echo it back, which replaces it.
    this.receive(snapshot);
    this.options.bus.publish(POOL_SNAPSHOTS, this.options.subject, snapshot);
    const now = performance.now();
    const staleMs = this.options.staleMs ?? SNAPSHOT_STALE_MS;
    for (const [node, entry] of this.latest) if (now - entry.receivedMs > staleMs) this.latest.delete(node);
    this.view = mergeSnapshots(
      [...this.latest.values()].map((e) => e.snapshot),
      Date.now(),
    );
    for (const listener of this.listeners) listener(this.view);
  }

  current(): LiveView {
    return this.view;
  }

  get listenerCount(): number {
    return this.listeners.size;
  }

  /** Calls `listener` with each new view; null when LIVE_LISTENERS_MAX are listening already. */
  listen(listener: (view: LiveView) => void): Unsubscribe | null {
    if (this.listeners.size >= LIVE_LISTENERS_MAX) return null;
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}
