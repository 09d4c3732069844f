/**
 * Streaming load: `concurrency` clients each POST a streaming chat request, read the SSE body to
 * the end and check it ends with `data: [DONE]`, again and again until the time is up. It runs as
 * its own process on the load CPU and prints its figures as one JSON line:
 *
 *   bun run bench/sse-client.ts --url http://127.0.0.1:9100 --key k --concurrency 64 --duration-ms 10000 --warmup-ms 2000
 *
 * `--url` may be repeated (the nodes of a multi-node target: client i talks to url i mod n) and
 * `--header "Name: value"` adds a request header. `runSseClient` spawns it that way and parses the line.
 */
import { parseArgs } from "node:util";
import { z } from "zod";
import { benchChatBody, latencyMsSchema, percentile, type Measurement } from "./measurement.ts";
import { LOAD_CPU, runLoad } from "./procs.ts";

const body = benchChatBody({ stream: true });
const doneMarker = "data: [DONE]";
const streamTimeoutMs = 30_000;
const samplesMax = 2_000_000;
const requestsPerClientMax = 10_000_000;
const concurrencyMax = 10_000;

const latencyMs = latencyMsSchema;
const resultSchema = z.object({
  requests: z.number().int().nonnegative(),
  elapsedMs: z.number().positive(),
  // JSON has no NaN: a run without one complete stream has null percentiles.
  ttfbP50Ms: latencyMs,
  ttfbP99Ms: latencyMs,
  p50Ms: latencyMs,
  p90Ms: latencyMs,
  p99Ms: latencyMs,
  maxMs: latencyMs,
  errors: z.object({ status: z.number(), incomplete: z.number(), failed: z.number() }),
  firstError: z.string().optional(),
});
type SseResult = z.infer<typeof resultSchema>;

interface LoadOptions {
  urls: string[];
  key: string;
  headers: Record<string, string>;
  concurrency: number;
  durationMs: number;
}

class Samples {
  readonly ttfb = new Float64Array(samplesMax);
  readonly total = new Float64Array(samplesMax);
  count = 0;
  add(ttfbMs: number, totalMs: number): void {
    if (this.count >= samplesMax) return;
    this.ttfb[this.count] = ttfbMs;
    this.total[this.count] = totalMs;
    this.count += 1;
  }
}

/** One request: resolves to the time to first byte, or throws a short reason. */
async function oneStream(options: LoadOptions, url: string): Promise<number> {
  const started = performance.now();
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { ...options.headers, "content-type": "application/json", authorization: `Bearer ${options.key}` },
    body,
    signal: AbortSignal.timeout(streamTimeoutMs),
  });
  if (response.status !== 200 || !response.body) {
    const text = await response.text().catch(() => "");
    throw new StreamError("status", `HTTP ${response.status}: ${text.slice(0, 200)}`);
  }
  const decoder = new TextDecoder();
  let ttfbMs = Number.NaN;
  let tail = "";
  for await (const chunk of response.body) {
    if (Number.isNaN(ttfbMs)) ttfbMs = performance.now() - started;
    // Only the end matters for the check; keep a bounded tail.
    tail = (tail + decoder.decode(chunk, { stream: true })).slice(-64);
  }
  if (!tail.trimEnd().endsWith(doneMarker)) throw new StreamError("incomplete", `stream ended without [DONE]: …${JSON.stringify(tail)}`);
  return ttfbMs;
}

class StreamError extends Error {
  constructor(
    readonly kind: "status" | "incomplete",
    message: string,
  ) {
    super(message);
  }
}

/** Runs the load for `durationMs` and returns the figures (in-process; see `runSseClient`). */
export async function streamLoad(options: LoadOptions): Promise<SseResult> {
  const samples = new Samples();
  const errors = { status: 0, incomplete: 0, failed: 0 };
  let firstError: string | undefined;
  const started = performance.now();
  const deadline = started + options.durationMs;
  const client = async (_: unknown, index: number) => {
    const url = options.urls[index % options.urls.length]!;
    for (let i = 0; i < requestsPerClientMax && performance.now() < deadline; i++) {
      const t0 = performance.now();
      try {
        const ttfbMs = await oneStream(options, url);
        samples.add(ttfbMs, performance.now() - t0);
      } catch (error) {
        errors[error instanceof StreamError ? error.kind : "failed"] += 1;
        firstError ??= (error as Error).message;
      }
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, client));
  const elapsedMs = performance.now() - started;
  const ttfb = samples.ttfb.subarray(0, samples.count).sort();
  const total = samples.total.subarray(0, samples.count).sort();
  return {
    requests: samples.count,
    elapsedMs,
    ttfbP50Ms: percentile(ttfb, 0.5),
    ttfbP99Ms: percentile(ttfb, 0.99),
    p50Ms: percentile(total, 0.5),
    p90Ms: percentile(total, 0.9),
    p99Ms: percentile(total, 0.99),
    maxMs: percentile(total, 1),
    errors,
    ...(firstError ? { firstError } : {}),
  };
}

export interface SseClientOptions {
  target: { name: string; url: string; key: string; urls?: string[]; headers?: Record<string, string> };
  workload: string;
  concurrency: number;
  durationMs: number;
  warmupMs: number;
}

/** Spawns this file on the load CPU (warm-up, then measurement) and returns its figures. */
export async function runSseClient(options: SseClientOptions): Promise<Measurement> {
  const cmd = [
    "taskset",
    "-c",
    String(LOAD_CPU),
    "bun",
    "run",
    import.meta.path,
    ...(options.target.urls ?? [options.target.url]).flatMap((url) => ["--url", url]),
    ...Object.entries(options.target.headers ?? {}).flatMap(([name, value]) => ["--header", `${name}: ${value}`]),
    "--key",
    options.target.key,
    "--concurrency",
    String(options.concurrency),
    "--duration-ms",
    String(options.durationMs),
    "--warmup-ms",
    String(options.warmupMs),
  ];
  const stdout = await runLoad("sse-client", cmd, options.warmupMs + options.durationMs + 2 * streamTimeoutMs);
  const line = stdout.split("\n").findLast((l) => l.startsWith("{"));
  if (!line) throw new Error(`sse-client printed no figures:\n${stdout}`);
  const result = resultSchema.parse(JSON.parse(line));
  const e = result.errors;
  const errors = e.status + e.incomplete + e.failed;
  return {
    target: options.target.name,
    workload: options.workload,
    requests: result.requests,
    rps: result.requests / (result.elapsedMs / 1000),
    p50Ms: result.p50Ms,
    p90Ms: result.p90Ms,
    p99Ms: result.p99Ms,
    maxMs: result.maxMs,
    ttfbP50Ms: result.ttfbP50Ms,
    ttfbP99Ms: result.ttfbP99Ms,
    errors,
    ...(errors > 0
      ? { errorDetail: `status ${e.status}, incomplete ${e.incomplete}, failed ${e.failed}; first: ${result.firstError ?? "?"}` }
      : {}),
  };
}

function optionsFromArgs(args: string[]): LoadOptions & { warmupMs: number } {
  const { values } = parseArgs({
    args,
    strict: true,
    options: {
      url: { type: "string", multiple: true },
      header: { type: "string", multiple: true, default: [] },
      key: { type: "string", default: "bench" },
      concurrency: { type: "string", default: "64" },
      "duration-ms": { type: "string", default: "10000" },
      "warmup-ms": { type: "string", default: "0" },
    },
  });
  return z
    .object({
      urls: z.array(z.string().url()).min(1),
      headers: z
        .array(z.string().regex(/^[^:]+:/))
        .transform((lines) =>
          Object.fromEntries(lines.map((line) => [line.slice(0, line.indexOf(":")).trim(), line.slice(line.indexOf(":") + 1).trim()])),
        ),
      key: z.string().min(1),
      concurrency: z.coerce.number().int().min(1).max(concurrencyMax),
      durationMs: z.coerce.number().int().min(100).max(600_000),
      warmupMs: z.coerce.number().int().min(0).max(600_000),
    })
    .parse({
      urls: values.url,
      headers: values.header,
      key: values.key,
      concurrency: values.concurrency,
      durationMs: values["duration-ms"],
      warmupMs: values["warmup-ms"],
    });
}

if (import.meta.main) {
  const options = optionsFromArgs(process.argv.slice(2));
  if (options.warmupMs > 0) await streamLoad({ ...options, durationMs: options.warmupMs });
  console.log(JSON.stringify(await streamLoad(options)));
}
