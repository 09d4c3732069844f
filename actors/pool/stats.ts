/**
 * Shared statistics: every `POOL_STATS_INTERVAL_MS` each node publishes, per model, the
 * estimates of the backends it observed since its last message; every other node folds them
 * into its own estimates with a bounded share (`PEER_SHARE_MAX`), weighted by how many samples
 * stand behind them against its own. The peak rule is not applied to peers' values: one node's
 * view moves another's only part of the way. With the in-process bus a node hears only itself,
 * which it ignores, so this is a no-op.
 */
import { POOL_STATS_BACKENDS_MAX, type PoolStats } from "../protocol.ts";
import type { PoolActor } from "./pool.ts";

export const POOL_STATS_INTERVAL_MS = 1_000;
/** The most a peer's message moves an estimate. */
export const PEER_SHARE_MAX = 0.5;

/** This node's message for one pool, or null when it observed nothing since the last. */
export function statsOf(node: string, pool: PoolActor): PoolStats | null {
  const backends: PoolStats["backends"] = [];
  for (const b of pool.backends) {
    if (b.samplesUnshared === 0 || backends.length >= POOL_STATS_BACKENDS_MAX) continue;
    backends.push({ name: b.name, ttftMs: b.ttft.value, tpotMs: b.tpot.value, samples: b.samplesUnshared });
    b.samplesSeen = b.samplesUnshared;
    b.samplesUnshared = 0;
  }
  return backends.length > 0 ? { node, model: pool.model, backends } : null;
}

/** Folds a peer's message into this node's estimates. */
export function foldStats(pool: PoolActor, stats: PoolStats): void {
  for (const peer of stats.backends) {
    const b = pool.backends.find((x) => x.name === peer.name);
    if (!b) continue;
    const own = b.samplesUnshared + b.samplesSeen;
    const share = Math.min(PEER_SHARE_MAX, peer.samples / (peer.samples + own + 1));
    b.ttft.blend(peer.ttftMs, share);
    b.tpot.blend(peer.tpotMs, share);
  }
}
