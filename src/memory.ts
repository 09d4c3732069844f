/**
 * Keeps a node's memory from drifting upward under many long streams. Each relayed chunk leaves
 * a little garbage whose bytes live outside the JavaScript heap (network buffers, encoded
 * strings); the engine's collector does not count them, so it rarely runs a full collection and
 * the process grows by megabytes a second with thousands of slow streams open (measured: 2,000
 * streams at one token a second grew a node by ~5 MiB/s, from 36 KiB per stream to over 200 KiB
 * in a minute; with a full collection each second it stayed at 36 KiB).
 *
 * The guard reads the resident set every GC_CHECK_MS and runs a full collection when it has grown
 * by GC_RSS_GROWTH_MIB since the last one, at most once per GC_CHECK_MS. A collection pauses the
 * node for a few milliseconds (counted in darvaze_gc_forced_total and its pause time), so the
 * step is large enough that a node with little traffic never pays it.
 */
import type { Logger } from "./log.ts";

export const GC_CHECK_MS = 1_000;

export interface MemoryGuardStats {
  collections: number;
  pauseMsTotal: number;
}

export interface MemoryGuardOptions {
  /** Resident-set growth that triggers a full collection, in MiB; 0 turns the guard off. */
  growthMib: number;
  log: Logger;
  rssBytes?: () => number;
  collect?: () => void;
  checkMs?: number;
}

/**
 * Starts the guard; returns its stats and a stop function.
 * @example const guard = startMemoryGuard({ growthMib: 64, log }); … guard.stop();
 */
export function startMemoryGuard(options: MemoryGuardOptions): { stats: MemoryGuardStats; stop: () => void; check: () => void } {
  const stats: MemoryGuardStats = { collections: 0, pauseMsTotal: 0 };
  const rss = options.rssBytes ?? (() => process.memoryUsage.rss());
  const collect = options.collect ?? (() => Bun.gc(true));
  const growthBytes = options.growthMib * 1024 * 1024;
  let baseline = rss();
  const check = () => {
    const now = rss();
    // Memory freed elsewhere lowers the baseline, so growth is measured from the lowest point.
    if (now < baseline) baseline = now;
    if (now - baseline < growthBytes) return;
    const startedMs = performance.now();
    collect();
    const pauseMs = performance.now() - startedMs;
    stats.collections++;
    stats.pauseMsTotal += pauseMs;
    baseline = rss();
    options.log("debug", "memory_collected", {
      rss_before_mib: Math.round(now / 2 ** 20),
      rss_after_mib: Math.round(baseline / 2 ** 20),
      pause_ms: Math.round(pauseMs),
    });
  };
  if (growthBytes <= 0) return { stats, stop: () => {}, check: () => {} };
  const timer = setInterval(check, options.checkMs ?? GC_CHECK_MS);
  timer.unref?.();
  return { stats, stop: () => clearInterval(timer), check };
}
