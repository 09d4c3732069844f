/**
 * Key partition ownership through leases in a JetStream KV bucket (server 2.9: no per-key TTL,
 * so the whole bucket has one, `PARTITION_LEASE_TTL_MS`).
 *
 * Invariant: a node acts as owner of a partition only until `PARTITION_OWNER_MS_MAX` after it
 * *sent* its last successful renewal, which is `PARTITION_SAFETY_MARGIN_MS` before the server
 * can expire the lease; so two nodes never act as owner of one partition at once (one clock:
 * the nodes and the NATS server of a test share a machine; across machines the margin also
 * absorbs clock-rate drift, not offset, since both sides measure durations).
 *
 * In full, with the reasoning: docs/internals.md#key-partitions.
 */
import type { KV } from "nats";
import { runTask } from "../../src/background.ts";
import type { Logger } from "../../src/log.ts";
import { KEY_PARTITIONS } from "../subjects.ts";

export const PARTITION_LEASE_TTL_MS = 5_000;
export const PARTITION_RENEW_MS = 1_000;
/** A node stops acting as owner this long before its lease could expire. */
export const PARTITION_SAFETY_MARGIN_MS = 1_500;
export const PARTITION_OWNER_MS_MAX = PARTITION_LEASE_TTL_MS - PARTITION_SAFETY_MARGIN_MS;
/** Bound on one KV operation; a slower one counts as a failed renewal. */
export const PARTITION_KV_TIMEOUT_MS = 1_000;

export function partitionBucket(prefix: string): string {
  return `${prefix.replace(/[^A-Za-z0-9_-]/g, "_")}_partitions`;
}

export interface PartitionHooks {
  /** The node now owns the partition under this fencing token; false gives it back. */
  acquired(partition: number, fenceToken: bigint): Promise<boolean>;
  /** The node no longer acts as owner (released, refused, or could not renew in time). */
  lost(partition: number, reason: string): void;
}

interface Owned {
  revision: number;
  fenceToken: bigint;
  renewedAtMs: number;
}

export class PartitionLeases {
  private readonly owned = new Map<number, Owned>();
  private timer: ReturnType<typeof setInterval> | null = null;
  private ticking: Promise<void> | null = null;
  private again = false;
  private stopped = false;
  liveNodes = 1;

  constructor(
    private readonly kv: KV,
    readonly node: string,
    private readonly hooks: PartitionHooks,
    private readonly log: Logger,
    private readonly nowMs: () => number = () => performance.now(),
  ) {}

  /** Whether this node may act as owner of the partition right now. */
  owns(partition: number): boolean {
    const o = this.owned.get(partition);
    return o !== undefined && this.nowMs() - o.renewedAtMs < PARTITION_OWNER_MS_MAX;
  }

  fenceOf(partition: number): bigint | null {
    return this.owns(partition) ? this.owned.get(partition)!.fenceToken : null;
  }

  get ownedCount(): number {
    return this.owned.size;
  }

  ownedPartitions(): number[] {
    return [...this.owned.keys()].sort((a, b) => a - b);
  }

  async start(): Promise<void> {
    await this.tick();
    this.timer = setInterval(() => runTask("partition_tick", this.log, () => this.tick()), PARTITION_RENEW_MS);
  }

  /** Runs a step now, or right after the one under way (which may have read the bucket too early). */
  tick(): Promise<void> {
    if (this.ticking) {
      this.again = true;
      return this.ticking;
    }
    this.ticking = (async () => {
      do {
        this.again = false;
        await this.step().catch((error: Error) => this.log("warn", "partition_tick_failed", { error: error.message }));
      } while (this.again && !this.stopped);
    })().finally(() => (this.ticking = null));
    return this.ticking;
  }

  private async step(): Promise<void> {
    if (this.stopped) return;
    // Renewals first, and the late ones dropped even when NATS is unreachable.
    await Promise.all([...this.owned].map(([p, o]) => this.renew(p, o)));
    for (const p of [...this.owned.keys()]) if (!this.owns(p)) this.drop(p, "renewal_late");
    await withTimeout(this.kv.put(`n.${this.node}`, ""));

    const keys = new Set<string>();
    for await (const key of await withTimeout(this.kv.keys())) keys.add(key);
    const nodes = [...keys].filter((k) => k.startsWith("n.")).length;
    this.liveNodes = Math.max(1, nodes);
    const target = Math.ceil(KEY_PARTITIONS / this.liveNodes);
    if (this.owned.size > target) {
      const extra = this.ownedPartitions().sort((a, b) => rank(this.node, a) - rank(this.node, b));
      for (const p of extra.slice(0, this.owned.size - target)) await this.release(p);
      return;
    }
    const free = [...Array(KEY_PARTITIONS).keys()].filter((p) => !keys.has(`p.${p}`) && !this.owned.has(p));
    free.sort((a, b) => rank(this.node, b) - rank(this.node, a));
    // Claims go out together (a start-up takes one round trip, not one per partition); a lost race costs nothing.
    if (!this.stopped) await Promise.all(free.slice(0, Math.max(0, target - this.owned.size)).map((p) => this.claim(p)));
  }

  private async renew(p: number, o: Owned): Promise<void> {
    const sentAtMs = this.nowMs();
    try {
      o.revision = await withTimeout(this.kv.update(`p.${p}`, this.node, o.revision));
      o.renewedAtMs = sentAtMs;
    } catch (error) {
      const code = (error as { api_error?: { err_code?: number } }).api_error?.err_code;
      // Wrong last sequence: someone else holds it now. Anything else (a timeout): try again next tick, if still in time.
      if (code === 10071) this.drop(p, "renewal_refused");
    }
  }

  private async claim(p: number): Promise<void> {
    const sentAtMs = this.nowMs();
    let revision: number;
    try {
      revision = await withTimeout(this.kv.create(`p.${p}`, this.node));
    } catch {
      return; // somebody else was quicker
    }
    const o: Owned = { revision, fenceToken: BigInt(revision), renewedAtMs: sentAtMs };
    this.owned.set(p, o);
    let ok = false;
    try {
      ok = await this.hooks.acquired(p, o.fenceToken);
    } catch (error) {
      this.log("error", "partition_acquire_failed", { partition: p, error: (error as Error).message });
    }
    if (!ok) {
      await this.release(p);
      return;
    }
    this.log("info", "partition_acquired", { partition: p, fenceToken: revision });
  }

  private drop(p: number, reason: string): void {
    if (!this.owned.delete(p)) return;
    this.hooks.lost(p, reason);
    this.log("warn", "partition_lost", { partition: p, reason });
  }

  /** Stops acting as owner first, then deletes the lease so another node can take it at once. */
  private async release(p: number): Promise<void> {
    const o = this.owned.get(p);
    if (!o) return;
    this.owned.delete(p);
    this.hooks.lost(p, "released");
    await withTimeout(this.kv.delete(`p.${p}`, { previousSeq: o.revision })).catch(() => {});
  }

  /**
   * Leaving: the membership entry goes first, so that the others aim at their larger share when
   * they see the partitions freed, then every partition.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.ticking;
    await withTimeout(this.kv.delete(`n.${this.node}`)).catch(() => {});
    await Promise.all(this.ownedPartitions().map((p) => this.release(p)));
  }
}

/** Rendezvous rank of a partition for a node: nodes prefer different partitions, so claims rarely collide. */
function rank(node: string, partition: number): number {
  return Number(BigInt(Bun.hash(`${node}/${partition}`)) % 1_000_000n);
}

function withTimeout<T>(promise: Promise<T>, ms = PARTITION_KV_TIMEOUT_MS): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`KV operation took over ${ms} ms`)), ms)));
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
