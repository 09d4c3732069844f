import { z } from "zod";
import type { Readings } from "./readings.ts";

/** One measured workload against one target, as the report prints it. */
export interface Measurement {
  target: string;
  workload: string;
  requests: number;
  rps: number;
  /** Whole-request latency; for a stream, until `data: [DONE]`. */
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  maxMs: number;
  /** Streams only: time to the first body byte. */
  ttfbP50Ms?: number;
  ttfbP99Ms?: number;
  errors: number;
  /** What the errors were, when there were any. */
  errorDetail?: string;
  /** The server's CPU, stalls and forced collections during the run (readings.ts). */
  readings?: Readings;
  /** Every round of this target and workload, when the report combined several (this is the median's). */
  rounds?: Measurement[];
}

export interface Workload {
  name: string;
  kind: "chat" | "stream";
  concurrency: number;
  /** Chat only: this many keys on one funded account, one per request round-robin (default: one hot key). */
  keys?: number;
}

/** `q` in 0..1 of an ascending-sorted array (nearest rank). */
export function percentile(sorted: ArrayLike<number>, q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank]!;
}

/** A latency in a load generator's JSON line: JSON has no NaN, so a run without a sample prints null. */
export const latencyMsSchema = z
  .number()
  .nullable()
  .transform((value) => value ?? Number.NaN);

/**
 * The benchmarks' chat request: one short message, 16 tokens whole or a stream of 64 content
 * chunks (bench/chat.lua sends the same body from wrk).
 */
export function benchChatBody(options: { stream?: boolean } = {}): string {
  return JSON.stringify({
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: "Say hello in one short sentence." }],
    max_tokens: options.stream ? 64 : 16,
    ...(options.stream ? { stream: true } : {}),
  });
}

/**
 * The longest the event loop waited while `work` ran, in ms: the largest gap between the ticks of
 * a 1 ms timer (work on this thread delays them all; work on another thread should not).
 * @example const stallMs = await loopWaitDuring(() => checkLines(...));
 */
export async function loopWaitDuring(work: () => Promise<unknown>): Promise<number> {
  let last = performance.now();
  let gapMax = 0;
  const ticker = setInterval(() => {
    const now = performance.now();
    gapMax = Math.max(gapMax, now - last);
    last = now;
  }, 1);
  try {
    await work();
  } finally {
    clearInterval(ticker);
  }
  // The last stretch counts too: a stall at the very end of the work delays no tick before it.
  return Math.max(gapMax, performance.now() - last);
}
