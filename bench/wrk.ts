/**
 * Non-streaming load with wrk on the load CPU: `bench/chat.lua` POSTs the chat request and its
 * `done()` hook prints the figures as one JSON line, parsed here.
 */
import { join } from "node:path";
import { z } from "zod";
import type { Measurement } from "./measurement.ts";
import { LOAD_CPU, runLoad } from "./procs.ts";

const wrkSummarySchema = z.object({
  requests: z.number().int().nonnegative(),
  duration_us: z.number().positive(),
  p50_us: z.number().nonnegative(),
  p99_us: z.number().nonnegative(),
  errors: z.object({ connect: z.number(), read: z.number(), write: z.number(), status: z.number(), timeout: z.number() }),
});

const script = join(import.meta.dir, "chat.lua");
/** wrk stops itself after -d; this is only the guard against a hang. */
const killAfterExtraMs = 20_000;
const requestTimeoutS = 10;

export interface WrkOptions {
  target: { name: string; url: string; key: string };
  workload: string;
  concurrency: number;
  durationS: number;
}

/**
 * Runs wrk once and returns its figures.
 * @example await runWrk({ target, workload: "chat c=64", concurrency: 64, durationS: 10 })
 */
export async function runWrk(options: WrkOptions): Promise<Measurement> {
  const cmd = [
    "taskset", "-c", String(LOAD_CPU),
    "wrk", "-t1", `-c${options.concurrency}`, `-d${options.durationS}s`, `--timeout`, `${requestTimeoutS}s`,
    "-s", script, `${options.target.url}/v1/chat/completions`, "--", options.target.key,
  ];
  const stdout = await runLoad("wrk", cmd, options.durationS * 1000 + killAfterExtraMs);
  const line = stdout.split("\n").findLast((l) => l.startsWith("{"));
  if (!line) throw new Error(`wrk printed no figures:\n${stdout}`);
  const summary = wrkSummarySchema.parse(JSON.parse(line));
    const e = summary.errors;
    const errors = e.connect + e.read + e.write + e.status + e.timeout;
    const detail = Object.entries(e).filter(([, n]) => n > 0).map(([kind, n]) => `${kind} ${n}`).join(", ");
  return {
    target: options.target.name,
    workload: options.workload,
    requests: summary.requests,
    // wrk counts non-2xx replies as requests; only successful ones count here.
    rps: (summary.requests - e.status) / (summary.duration_us / 1e6),
    p50Ms: summary.p50_us / 1000,
    p99Ms: summary.p99_us / 1000,
    errors,
    ...(detail ? { errorDetail: detail } : {}),
  };
}
