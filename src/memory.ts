/**
 * Keeps a node's memory from drifting upward under many long streams. What a slow stream keeps
 * while it waits for its next token (pending reads and promises, Bun's and Elysia's) outlives the
 * engine's young-generation collections, so it is promoted, and once the token arrives it is
 * garbage that only a full collection frees; the engine runs those rarely (2,000 streams at one
 * token a second grew a node from 293 to 808 MiB in two minutes without one: bench/RESULTS.md,
 * "Memory of a waiting stream").
 *
 * In full, with the reasoning: docs/internals.md#the-memory-guard.
 */
import { every } from "./background.ts";
import type { Logger } from "./log.ts";

export const GC_CHECK_MS = 1_000;
/** Growth since the last full collection, in guard steps, past which a full collection runs. */
export const GC_FULL_AFTER_STEPS = 4;

export interface MemoryGuardStats {
  /** Every collection the guard ran, light and full, and their pauses. */
  collections: number;
  pauseMsTotal: number;
  /** The full ones among them. */
  fullCollections: number;
  fullPauseMsTotal: number;
}

export interface MemoryGuardOptions {
  /** Resident-set growth that triggers a collection, in MiB; 0 turns the guard off. */
  growthMib: number;
  log: Logger;
  rssBytes?: () => number;
  /** The heaps of other threads, which collect themselves (the embedded database's worker): their growth is not this thread's. */
  otherHeapsBytes?: () => number;
  /** A light collection (default `Bun.gc(false)`) and a full one (default `Bun.gc(true)`). */
  collectLight?: () => void;
  collectFull?: () => void;
  checkMs?: number;
}

/**
 * The resident set less the other threads' heaps' growth, as a running figure: each reading adds
 * the resident set's change less what the other heaps grew by since the last; a fall of theirs
 * adds nothing (their reserved memory given back is not this thread's growth).
 */
export function ownMemory(rssBytes: () => number, otherHeapsBytes?: () => number): () => number {
  if (!otherHeapsBytes) return rssBytes;
  let lastRss = rssBytes();
  let lastOther = otherHeapsBytes();
  let own = lastRss;
  return () => {
    const rssNow = rssBytes();
    const otherNow = otherHeapsBytes();
    own += rssNow - lastRss - Math.max(0, otherNow - lastOther);
    lastRss = rssNow;
    lastOther = otherNow;
    return own;
  };
}

/**
 * Starts the guard; returns its stats and a stop function.
 * @example const guard = startMemoryGuard({ growthMib: 32, log }); … guard.stop();
 */
export function startMemoryGuard(options: MemoryGuardOptions): { stats: MemoryGuardStats; stop: () => void; check: () => void } {
  const stats: MemoryGuardStats = { collections: 0, pauseMsTotal: 0, fullCollections: 0, fullPauseMsTotal: 0 };
  const rss = ownMemory(options.rssBytes ?? (() => process.memoryUsage.rss()), options.otherHeapsBytes);
  const collectLight = options.collectLight ?? (() => Bun.gc(false));
  const collectFull = options.collectFull ?? (() => Bun.gc(true));
  const growthBytes = options.growthMib * 1024 * 1024;
  // Growth is measured from the lowest point since the last collection (memory freed elsewhere
  // lowers it), and for full collections from the lowest point since the last full one.
  let baseline = rss();
  let fullBaseline = baseline;
  const check = () => {
    const now = rss();
    if (now < baseline) baseline = now;
    if (now < fullBaseline) fullBaseline = now;
    if (now - baseline < growthBytes) return;
    const full = now - fullBaseline >= growthBytes * GC_FULL_AFTER_STEPS;
    const startedMs = performance.now();
    (full ? collectFull : collectLight)();
    const pauseMs = performance.now() - startedMs;
    stats.collections++;
    stats.pauseMsTotal += pauseMs;
    if (full) {
      stats.fullCollections++;
      stats.fullPauseMsTotal += pauseMs;
    }
    baseline = rss();
    if (full) fullBaseline = baseline;
    options.log("debug", "memory_collected", {
      full,
      rss_before_mib: Math.round(now / 2 ** 20),
      rss_after_mib: Math.round(baseline / 2 ** 20),
      pause_ms: Math.round(pauseMs),
    });
  };
  if (growthBytes <= 0) return { stats, stop: () => {}, check: () => {} };
  const stop = every("memory_guard", options.checkMs ?? GC_CHECK_MS, options.log, check);
  return { stats, stop, check };
}
