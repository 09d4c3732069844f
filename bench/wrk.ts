/**
 * Non-streaming load with wrk on the load CPU: `bench/chat.lua` POSTs the chat request and its
 * `done()` hook prints the figures as one JSON line, parsed here. A target with several nodes
 * gets one wrk per node, the connections split between them: req/s add up, and p50/p99 are the
 * worse of the nodes' (wrk keeps no histogram to merge, so this errs on the slow side).
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
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
type WrkSummary = z.infer<typeof wrkSummarySchema>;

const script = join(import.meta.dir, "chat.lua");
/** wrk stops itself after -d; this is only the guard against a hang. */
const killAfterExtraMs = 20_000;
const requestTimeoutS = 10;

export interface WrkOptions {
  /** `urls`: every node of a multi-node target (`url` is then the first); `headers`: sent with each request. */
  target: { name: string; url: string; key: string; urls?: string[]; headers?: Record<string, string> };
  workload: string;
  concurrency: number;
  durationS: number;
  /** Keys taken round-robin, one per request, instead of `target.key`. */
  keys?: string[];
}

/** `concurrency` connections split over `parts` as evenly as possible (parts left with none are dropped). */
export function splitConcurrency(concurrency: number, parts: number): number[] {
  return Array.from({ length: parts }, (_, i) => Math.floor(concurrency / parts) + (i < concurrency % parts ? 1 : 0));
}

async function wrkOnce(url: string, concurrency: number, durationS: number, scriptArgs: string[]): Promise<WrkSummary> {
  const cmd = [
    "taskset",
    "-c",
    String(LOAD_CPU),
    "wrk",
    "-t1",
    `-c${concurrency}`,
    `-d${durationS}s`,
    `--timeout`,
    `${requestTimeoutS}s`,
    "-s",
    script,
    `${url}/v1/chat/completions`,
    "--",
    ...scriptArgs,
  ];
  const stdout = await runLoad("wrk", cmd, durationS * 1000 + killAfterExtraMs);
  const line = stdout.split("\n").findLast((l) => l.startsWith("{"));
  if (!line) throw new Error(`wrk printed no figures:\n${stdout}`);
  return wrkSummarySchema.parse(JSON.parse(line));
}

/**
 * Runs wrk once (once per node) and returns its figures.
 * @example await runWrk({ target, workload: "chat c=64", concurrency: 64, durationS: 10 })
 */
export async function runWrk(options: WrkOptions): Promise<Measurement> {
  let keysFolder: string | undefined;
  try {
    let keyArg = options.target.key;
    if (options.keys && options.keys.length > 0) {
      keysFolder = mkdtempSync(join(tmpdir(), "darvaze-bench-keys-"));
      const file = join(keysFolder, "keys.txt");
      writeFileSync(file, `${options.keys.join("\n")}\n`);
      keyArg = `@${file}`;
    }
    const headerArgs = Object.entries(options.target.headers ?? {}).map(([name, value]) => `${name}: ${value}`);
    const urls = options.target.urls ?? [options.target.url];
    const shares = splitConcurrency(options.concurrency, urls.length);
    const runs = urls.flatMap((url, i) => (shares[i]! > 0 ? [wrkOnce(url, shares[i]!, options.durationS, [keyArg, ...headerArgs])] : []));
    const summaries = await Promise.all(runs);
    const sum = (pick: (s: WrkSummary) => number) => summaries.reduce((total, s) => total + pick(s), 0);
    const e = {
      connect: sum((s) => s.errors.connect),
      read: sum((s) => s.errors.read),
      write: sum((s) => s.errors.write),
      status: sum((s) => s.errors.status),
      timeout: sum((s) => s.errors.timeout),
    };
    const errors = e.connect + e.read + e.write + e.status + e.timeout;
    const detail = Object.entries(e)
      .filter(([, n]) => n > 0)
      .map(([kind, n]) => `${kind} ${n}`)
      .join(", ");
    return {
      target: options.target.name,
      workload: options.workload,
      requests: sum((s) => s.requests),
      // wrk counts non-2xx replies as requests; only successful ones count here.
      rps: sum((s) => (s.requests - s.errors.status) / (s.duration_us / 1e6)),
      p50Ms: Math.max(...summaries.map((s) => s.p50_us)) / 1000,
      p99Ms: Math.max(...summaries.map((s) => s.p99_us)) / 1000,
      errors,
      ...(detail ? { errorDetail: detail } : {}),
    };
  } finally {
    if (keysFolder) rmSync(keysFolder, { recursive: true, force: true });
  }
}
