/**
 * Keeps a node's memory from drifting upward under many long streams. Each relayed chunk leaves
 * a little garbage whose bytes live outside the JavaScript heap (network buffers, encoded
 * strings); the engine's collector does not count them, so it rarely runs a full collection and
 * the process grows by megabytes a second with thousands of slow streams open (measured: 2,000
 * streams at one token a second grew a node by ~5 MiB/s, from 36 KiB per stream to over 200 KiB
 * in a minute; with a full collection each second it stayed at 36 KiB).
 *
 * The guard reads the resident set every GC_CHECK_MS. When it has grown by GC_RSS_GROWTH_MIB since
 * the lowest point, it first asks the engine for a collection that runs alongside the requests
 * (`Bun.gc(false)`: the marking is concurrent, no stop-the-world pause); only when the next check
 * finds that this gave back less than half a step does it run a full, synchronous collection,
 * which pauses the node (a few ms at hundreds of streams, ~150 ms at 8,000: counted in
 * darvaze_gc_forced_total and its pause time). The step is large enough that a node with little
 * traffic never pays either.
 */
import type { Logger } from "./log.ts";

export const GC_CHECK_MS = 1_000;

export interface MemoryGuardStats {
  /** Full, synchronous collections: each one paused the node. */
  collections: number;
  pauseMsTotal: number;
  /** Concurrent collections asked for (no pause). */
  concurrent: number;
}

export interface MemoryGuardOptions {
  /** Resident-set growth that triggers a full collection, in MiB; 0 turns the guard off. */
  growthMib: number;
  log: Logger;
  rssBytes?: () => number;
  /** A full collection that stops the node until it is done. */
  collect?: () => void;
  /** A collection that runs alongside the requests. */
  collectConcurrently?: () => void;
  checkMs?: number;
}

/**
 * Starts the guard; returns its stats and a stop function.
 * @example const guard = startMemoryGuard({ growthMib: 64, log }); … guard.stop();
 */
export function startMemoryGuard(options: MemoryGuardOptions): { stats: MemoryGuardStats; stop: () => void; check: () => void } {
  const stats: MemoryGuardStats = { collections: 0, pauseMsTotal: 0, concurrent: 0 };
  const rss = options.rssBytes ?? (() => process.memoryUsage.rss());
  const collect = options.collect ?? (() => Bun.gc(true));
  const collectConcurrently = options.collectConcurrently ?? (() => Bun.gc(false));
  const growthBytes = options.growthMib * 1024 * 1024;
  let baseline = rss();
  /** The resident set when a concurrent collection was asked for; null when none is awaited. */
  let askedAt: number | null = null;
  const check = () => {
    const now = rss();
    // Memory freed elsewhere lowers the baseline, so growth is measured from the lowest point.
    if (now < baseline) baseline = now;
    if (askedAt !== null && askedAt - now >= growthBytes / 2) {
      // The concurrent collection gave memory back: measure from here.
      baseline = now;
      askedAt = null;
      return;
    }
    if (now - baseline < growthBytes) {
      askedAt = null;
      return;
    }
    if (askedAt === null) {
      askedAt = now;
      stats.concurrent++;
      collectConcurrently();
      return;
    }
    askedAt = null;
    const startedMs = performance.now();
    collect();
    const pauseMs = performance.now() - startedMs;
    stats.collections++;
    stats.pauseMsTotal += pauseMs;
    baseline = rss();
    options.log("debug", "memory_collected", { rss_before_mib: Math.round(now / 2 ** 20), rss_after_mib: Math.round(baseline / 2 ** 20), pause_ms: Math.round(pauseMs) });
  };
  if (growthBytes <= 0) return { stats, stop: () => {}, check: () => {} };
  const timer = setInterval(check, options.checkMs ?? GC_CHECK_MS);
  timer.unref?.();
  return { stats, stop: () => clearInterval(timer), check };
}
