/**
 * Backend caps across nodes: each backend's `concurrency_max` is split into per-node quotas,
 * rebalanced by demand, and each node sets its share as the backend's `concurrencyLimit`.
 *
 * In full, with the reasoning: docs/internals.md#backend-quotas-across-nodes.
 */
import type { KV } from "nats";
import { taskFailed } from "../../src/background.ts";
import type { Logger } from "../../src/log.ts";
import type { Backend } from "./pool.ts";
import type { PoolHost } from "./host.ts";

export const QUOTA_INTERVAL_MS = 1_000;
/** A node's wants live this long without a refresh (a dead node's share returns after it). */
export const QUOTA_TTL_MS = 5_000;
/** A node at ≥ this fraction of its quota is saturated and asks for twice its quota. */
export const QUOTA_SATURATED_FRACTION = 0.8;
export const QUOTA_KV_TIMEOUT_MS = 1_000;

export function quotaBucket(prefix: string): string {
  return `${prefix.replace(/[^A-Za-z0-9_-]/g, "_")}_quotas`;
}

/**
 * This node's share of `cap` given every node's want (this node's included).
 *
 * @example splitCap(10, new Map([["a", 6], ["b", 2]]), "a") // 1 + floor(8 × 6/8) = 7
 */
export function splitCap(cap: number, wants: ReadonlyMap<string, number>, node: string): number {
  const nodes = Math.max(1, wants.size);
  if (nodes === 1) return cap;
  const floorEach = cap >= nodes ? 1 : 0;
  if (floorEach === 0) {
    // Fewer slots than nodes: the nodes that want most get one each (ties by name), so Σ ≤ cap.
    const ranked = [...wants].sort((x, y) => y[1] - x[1] || (x[0] < y[0] ? -1 : 1)).slice(0, cap);
    return ranked.some(([n]) => n === node) ? 1 : 0;
  }
  const rest = cap - nodes;
  let total = 0;
  for (const w of wants.values()) total += Math.max(0, w);
  const mine = Math.max(0, wants.get(node) ?? 0);
  const share = total > 0 ? Math.floor((rest * mine) / total) : Math.floor(rest / nodes);
  return floorEach + share;
}

function backendKey(model: string, backend: Backend): string {
  return `${model}/${backend.name}`;
}

export class BackendQuotas {
  private timer: ReturnType<typeof setInterval> | null = null;
  private readonly lastRequests = new Map<string, number>();
  private running: Promise<void> | null = null;

  constructor(
    private readonly kv: KV,
    private readonly node: string,
    private readonly pools: PoolHost,
    private readonly log: Logger,
  ) {}

  /**
   * What this node wants of each of its backends: 0 when unused since the last tick (every node
   * lists every backend, so that all nodes split over the same set and Σ quotas ≤ cap).
   */
  wants(): Record<string, number> {
    const wants: Record<string, number> = {};
    for (const pool of this.pools.all()) {
      for (const b of pool.backends) {
        const key = backendKey(pool.model, b);
        const used = b.requests - (this.lastRequests.get(key) ?? 0);
        this.lastRequests.set(key, b.requests);
        const saturated = b.inFlight > 0 && b.inFlight >= b.concurrencyLimit * QUOTA_SATURATED_FRACTION;
        wants[key] = used === 0 && b.inFlight === 0 ? 0 : saturated ? b.concurrencyLimit * 2 : b.inFlight + 1;
      }
    }
    return wants;
  }

  async tick(): Promise<void> {
    await within(this.kv.put(`n.${this.node}`, JSON.stringify(this.wants())));
    const all = new Map<string, Record<string, number>>();
    for await (const key of await within(this.kv.keys())) {
      const entry = await within(this.kv.get(key));
      if (entry?.operation !== "PUT") continue;
      try {
        all.set(key.slice(2), JSON.parse(entry.string()) as Record<string, number>);
      } catch {}
    }
    for (const pool of this.pools.all()) {
      for (const b of pool.backends) {
        const key = backendKey(pool.model, b);
        const wants = new Map<string, number>();
        for (const [node, w] of all) if (w[key] !== undefined) wants.set(node, w[key]!);
        if (!wants.has(this.node)) continue; // our own entry did not read back: keep the last quota
        b.concurrencyLimit = splitCap(b.config.concurrency_max, wants, this.node);
      }
    }
  }

  start(): void {
    this.timer = setInterval(() => {
      this.running ??= this.tick()
        .catch((error: unknown) => taskFailed("quota_tick", this.log, error))
        .finally(() => (this.running = null));
    }, QUOTA_INTERVAL_MS);
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.running;
    await within(this.kv.delete(`n.${this.node}`)).catch(() => {});
  }
}

function within<T>(promise: Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>(
    (_, reject) => (timer = setTimeout(() => reject(new Error("KV operation timed out")), QUOTA_KV_TIMEOUT_MS)),
  );
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
