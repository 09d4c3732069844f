/**
 * The mixed workload's load generator: `concurrency` clients take the next request of the seeded
 * mix (bench/mix-requests.ts) in turn, send it with its key, and read the reply to its end (a
 * leaving client stops after a few frames and closes), until the time is up. It runs as its own
 * process on the load CPU and prints its figures as one JSON line:
 *
 *   bun run bench/mix-load.ts --url http://127.0.0.1:9100 --keys-file keys.json --seed 1 --concurrency 64 --duration-ms 10000
 *
 * `runMixLoad` spawns it that way and parses the line.
 */
import { parseArgs } from "node:util";
import { z } from "zod";
import { latencyMsSchema, percentile } from "./measurement.ts";
import { LOAD_CPU, runLoadFigures } from "./procs.ts";
import { mixBody, mixRequest, type MixKind, type MixRequest } from "./mix-requests.ts";

const requestTimeoutMs = 30_000;
const samplesPerKindMax = 1_000_000;
const concurrencyMax = 4_096;
const keysMax = 100_000;
const errorKindsMax = 50;
const errorKindLengthMax = 120;
const doneMarker = "data: [DONE]";

const latencyMs = latencyMsSchema;
const kindFiguresSchema = z.object({
  ok: z.number().int().nonnegative(),
  p50Ms: latencyMs,
  p90Ms: latencyMs,
  p99Ms: latencyMs,
  maxMs: latencyMs,
  ttfbP50Ms: latencyMs,
  ttfbP99Ms: latencyMs,
  ttfbMaxMs: latencyMs,
});
export type KindFigures = z.infer<typeof kindFiguresSchema>;
export const mixResultSchema = z.object({
  /** Requests sent: indices 0 .. sent-1 of the seed's mix. */
  sent: z.number().int().nonnegative(),
  elapsedMs: z.number().positive(),
  kinds: z.record(z.enum(["chat", "stream", "embeddings", "leave", "all"]), kindFiguresSchema),
  /** Failed requests by kind of failure ("HTTP 429 rate_limit_exceeded", "stream without [DONE]", …). */
  errors: z.record(z.string(), z.number().int().nonnegative()),
  firstError: z.string().optional(),
  /** This load process's own CPU time during the run (user + system, every thread). */
  loadCpuMs: z.number().nonnegative(),
});
export type MixResult = z.infer<typeof mixResultSchema>;

/** What one load process needs: the keys themselves rather than their file. */
type LoadOptions = Omit<MixLoadOptions, "keysFile"> & { keys: string[] };

/** A bounded list of latencies, in milliseconds. */
class Latencies {
  private readonly values = new Float64Array(samplesPerKindMax);
  private length = 0;
  get count(): number {
    return this.length;
  }
  add(ms: number): void {
    if (this.length < samplesPerKindMax) this.values[this.length++] = ms;
  }
  sorted(): Float64Array {
    return this.values.subarray(0, this.length).sort();
  }
}

/** Latencies of one kind of request: time to last byte and (streams) to first byte. */
class Samples {
  readonly total = new Latencies();
  readonly ttfb = new Latencies();
  add(totalMs: number, ttfbMs?: number): void {
    this.total.add(totalMs);
    if (ttfbMs !== undefined) this.ttfb.add(ttfbMs);
  }
  figures(): KindFigures {
    const total = this.total.sorted();
    const ttfb = this.ttfb.sorted();
    return {
      ok: this.total.count,
      p50Ms: percentile(total, 0.5),
      p90Ms: percentile(total, 0.9),
      p99Ms: percentile(total, 0.99),
      maxMs: percentile(total, 1),
      ttfbP50Ms: percentile(ttfb, 0.5),
      ttfbP99Ms: percentile(ttfb, 0.99),
      ttfbMaxMs: percentile(ttfb, 1),
    };
  }
}

/** A failed request, named by what a client would see. */
class Failure extends Error {}

async function httpFailure(response: Response): Promise<Failure> {
  const text = await response.text().catch(() => "");
  let code = "";
  try {
    const error = (JSON.parse(text) as { error?: { code?: unknown; type?: unknown } }).error;
    code = String(error?.code ?? error?.type ?? "");
  } catch {}
  return new Failure(`HTTP ${response.status}${code ? ` ${code}` : ""}`);
}

/**
 * Reads an SSE body; resolves to the time of its first byte. With `leave`, the client goes away
 * after `afterFrames` frames: it aborts the request, which closes the connection mid-stream.
 */
async function readStream(response: Response, started: number, leave?: { afterFrames: number; abort(): void }): Promise<number> {
  const leaveAfterFrames = leave?.afterFrames;
  const decoder = new TextDecoder();
  let ttfbMs = Number.NaN;
  let tail = "";
  let frames = 0;
  for await (const chunk of response.body!) {
    if (Number.isNaN(ttfbMs)) ttfbMs = performance.now() - started;
    const text = decoder.decode(chunk, { stream: true });
    if (leaveAfterFrames !== undefined) {
      frames += text.split("data: ").length - 1;
      if (frames >= leaveAfterFrames) break;
    }
    tail = (tail + text).slice(-256);
  }
  if (leaveAfterFrames !== undefined && frames >= leaveAfterFrames) {
    // Out of the loop the body is cancelled; the abort makes sure the connection goes too.
    leave!.abort();
    return ttfbMs;
  }
  if (tail.includes('data: {"error"')) throw new Failure("stream error frame");
  if (!tail.trimEnd().endsWith(doneMarker))
    throw new Failure(leaveAfterFrames === undefined ? "stream without [DONE]" : "stream ended early");
  return ttfbMs;
}

/** Sends `r` and reads its reply; records its latency, or throws a Failure. */
async function send(options: LoadOptions, r: MixRequest, samples: Record<MixKind, Samples>): Promise<void> {
  const { path, body } = mixBody(options.seed, r);
  const started = performance.now();
  const leaving = new AbortController();
  const response = await fetch(options.url + path, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${options.keys[r.keyIndex]}` },
    body,
    signal: AbortSignal.any([AbortSignal.timeout(requestTimeoutMs), leaving.signal]),
  });
  if (response.status !== 200 || !response.body) throw await httpFailure(response);
  if (r.kind === "chat" || r.kind === "embeddings") {
    const text = await response.text();
    if (!text.includes(r.kind === "chat" ? '"choices"' : '"embedding"')) throw new Failure(`${r.kind} reply without a result`);
    samples[r.kind].add(performance.now() - started);
    return;
  }
  const leave = r.kind === "leave" ? { afterFrames: r.leaveAfterFrames, abort: () => leaving.abort() } : undefined;
  const ttfbMs = await readStream(response, started, leave);
  samples[r.kind].add(performance.now() - started, ttfbMs);
}

function failureKind(error: unknown): string {
  if (error instanceof Failure) return error.message;
  const name = (error as Error)?.name;
  if (name === "TimeoutError") return `timeout (${requestTimeoutMs / 1000} s)`;
  return `network: ${String((error as Error)?.message ?? error).slice(0, errorKindLengthMax)}`;
}

/** Runs the mix for `durationMs` and returns the figures (in-process; see `runMixLoad`). */
export async function mixLoad(options: LoadOptions): Promise<MixResult> {
  const samples: Record<MixKind, Samples> = { chat: new Samples(), stream: new Samples(), embeddings: new Samples(), leave: new Samples() };
  const all = new Samples();
  const errors = new Map<string, number>();
  let firstError: string | undefined;
  let next = 0;
  const cpuBefore = process.cpuUsage();
  const started = performance.now();
  const deadline = started + options.durationMs;
  const client = async () => {
    while (performance.now() < deadline) {
      const r = mixRequest(options.seed, next++, options.keys.length);
      const t0 = performance.now();
      try {
        await send(options, r, samples);
        if (r.kind !== "leave") all.add(performance.now() - t0);
      } catch (error) {
        const kind = failureKind(error);
        if (errors.has(kind) || errors.size < errorKindsMax) errors.set(kind, (errors.get(kind) ?? 0) + 1);
        firstError ??= `request ${r.index} (${r.kind}): ${kind}`;
      }
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, client));
  const cpu = process.cpuUsage(cpuBefore);
  return {
    loadCpuMs: (cpu.user + cpu.system) / 1000,
    sent: next,
    elapsedMs: performance.now() - started,
    kinds: {
      chat: samples.chat.figures(),
      stream: samples.stream.figures(),
      embeddings: samples.embeddings.figures(),
      leave: samples.leave.figures(),
      all: all.figures(),
    },
    errors: Object.fromEntries(errors),
    ...(firstError ? { firstError } : {}),
  };
}

export interface MixLoadOptions {
  url: string;
  keysFile: string;
  seed: number;
  concurrency: number;
  durationMs: number;
}

/** Spawns this file on the load CPU and returns its figures. */
export async function runMixLoad(options: MixLoadOptions): Promise<MixResult> {
  const flags = {
    url: options.url,
    "keys-file": options.keysFile,
    seed: options.seed,
    concurrency: options.concurrency,
    "duration-ms": options.durationMs,
  };
  const args = Object.entries(flags).flatMap(([flag, value]) => [`--${flag}`, String(value)]);
  const cmd = ["taskset", "-c", String(LOAD_CPU), "bun", "run", import.meta.path, ...args];
  return runLoadFigures({ label: "mix-load", cmd, killAfterMs: options.durationMs + 2 * requestTimeoutMs, schema: mixResultSchema });
}

async function optionsFromArgs(args: string[]): Promise<LoadOptions> {
  const { values } = parseArgs({
    args,
    strict: true,
    options: {
      url: { type: "string" },
      "keys-file": { type: "string" },
      seed: { type: "string", default: "1" },
      concurrency: { type: "string", default: "64" },
      "duration-ms": { type: "string", default: "10000" },
    },
  });
  const keys = z
    .array(z.string().min(1))
    .min(1)
    .max(keysMax)
    .parse(await Bun.file(values["keys-file"] ?? "").json());
  return z
    .object({
      url: z.string().url(),
      keys: z.array(z.string()),
      seed: z.coerce.number().int(),
      concurrency: z.coerce.number().int().min(1).max(concurrencyMax),
      durationMs: z.coerce.number().int().min(100).max(600_000),
    })
    .parse({ url: values.url, keys, seed: values.seed, concurrency: values.concurrency, durationMs: values["duration-ms"] });
}

if (import.meta.main) {
  console.log(JSON.stringify(await mixLoad(await optionsFromArgs(process.argv.slice(2)))));
}
