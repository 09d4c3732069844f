/**
 * `bun run bench:batch-live`: whether batch lines yield to live traffic (docs/batches.md,
 * "Lines yield to live traffic"). One live client sends chat requests one after another (no
 * coordinated-omission correction, as bench/tail.ts) while, alternately:
 *
 * - *A, no batch*: nothing else runs;
 * - *B, batch*: a batch of `--lines` (1,000) chat lines runs; the window starts once it is
 *   `in_progress`, and the batch is read again at its end: still `in_progress` (so it ran
 *   throughout the window) and how many lines finished in it (lines/s, so that yielding is not
 *   "never run batches"). It is cancelled afterwards, and the next phase starts once it is.
 *
 * A and B alternate `--rounds` times on one gateway, so both are compared within one run on the
 * shared machine. Each phase has p50, p99 and max; the verdict is the difference of the medians of
 * p99 (B − A) against BATCH_LIVE_P99_ADDED_MS (issue #47: within 2 ms). Last, a batch alone for
 * `--seconds`: its lines/s with no live client.
 *
 *   bun run bench:batch-live                                 # embedded and NATS + PostgreSQL (one node), 3 rounds of 5 s
 *   bun run bench:batch-live -- --mode embedded --rounds 4 --seconds 8
 *   bun run bench:batch-live -- --batch-account other        # the batch a second account's (default: the live client's key's)
 *   bun run bench:batch-live -- --env NAME=value             # the gateway's environment (repeatable)
 *   bun run bench:batch-live -- --gateway-root ../old         # another checkout's gateway (before a change), this harness
 *
 * Pinning as `bun run bench`: the gateway on CPU 1; this runner (the live client), the simulator
 * and, with NATS, nats-server and PostgreSQL on CPU 0.
 */
import { loadavg } from "node:os";
import { parseArgs } from "node:util";
import { countFlag, envFlags } from "./flags.ts";
import { benchChatBody, percentile } from "./measurement.ts";
import { LOAD_CPU, runBenchmark } from "./procs.ts";
import { type Readings, startReadings } from "./readings.ts";
import { pinServices } from "./services-cpu.ts";
import { type DarvazeMode, servicesDefaults, servicesUnavailable, startDarvaze, startSimulator, type Target } from "./targets.ts";

/** What a batch may add to the live client's p99 (issue #47 item 3). */
export const BATCH_LIVE_P99_ADDED_MS = 2;
/** Seconds of live requests before the first phase (the JIT compiles the hot path meanwhile). */
const WARMUP_S = 3;
/** How often a batch is read while the bench waits for it to move. */
const POLL_MS = 100;
/** Longest wait for a batch to start running or to end after its cancel. */
const BATCH_MOVE_MS_MAX = 120_000;
/** Each phase's polls and uploads, far above what a phase makes (the default FREE_RPM is 120 a minute). */
const BENCH_FREE_RPM = "100000";

interface Phase {
  round: number;
  phase: "A, no batch" | "B, batch" | "batch alone";
  requests: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** B and alone: lines finished in the window, and whether the batch was in_progress at its end. */
  lines?: number;
  seconds: number;
  throughout?: boolean;
  /** The gateway's longest event-loop stall and CPU 0's share busy (the client, simulator and services) in the window. */
  readings?: Readings;
}

interface BatchView {
  status: string;
  request_counts: { total: number; completed: number; failed: number };
}

function client(target: Target, key = target.key) {
  const headers = { authorization: `Bearer ${key}` };
  const call = async (path: string, init: RequestInit = {}): Promise<Record<string, unknown>> => {
    const response = await fetch(target.url + path, { ...init, headers: { ...headers, ...init.headers } });
    const reply = (await response.json()) as Record<string, unknown>;
    if (!response.ok) throw new Error(`${path} answered ${response.status}: ${JSON.stringify(reply).slice(0, 300)}`);
    return reply;
  };
  const json = { "content-type": "application/json" };
  const body = benchChatBody();
  return {
    /** One live request; its latency in ms. */
    async live(): Promise<number> {
      const t0 = performance.now();
      const response = await fetch(`${target.url}/v1/chat/completions`, { method: "POST", headers: { ...headers, ...json }, body });
      await response.arrayBuffer();
      if (!response.ok) throw new Error(`live request answered ${response.status}`);
      return performance.now() - t0;
    },
    async createBatch(lines: number): Promise<string> {
      const text = Array.from({ length: lines }, (_, i) =>
        JSON.stringify({
          custom_id: `line-${i}`,
          method: "POST",
          url: "/v1/chat/completions",
          body: { model: "gpt-4o-mini", max_tokens: 16, messages: [{ role: "user", content: `Say hello to number ${i}.` }] },
        }),
      ).join("\n");
      const form = new FormData();
      form.set("purpose", "batch");
      form.set("file", new Blob([text], { type: "application/jsonl" }), "lines.jsonl");
      const file = await call("/v1/files", { method: "POST", body: form });
      const body = JSON.stringify({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
      const batch = await call("/v1/batches", { method: "POST", headers: json, body });
      return String(batch.id);
    },
    batch: (id: string) => call(`/v1/batches/${id}`) as unknown as Promise<BatchView>,
    cancel: (id: string) => call(`/v1/batches/${id}/cancel`, { method: "POST" }),
  };
}

type Client = ReturnType<typeof client>;

/** A funded key of a second account (`--batch-account other`): the batch another customer's. */
async function otherAccountKey(target: Target): Promise<string> {
  const admin = async (path: string, body: unknown) => {
    const headers = { authorization: `Bearer ${target.adminToken}`, "content-type": "application/json" };
    const response = await fetch(target.url + path, { method: "POST", headers, body: JSON.stringify(body) });
    if (!response.ok) throw new Error(`admin ${path} answered ${response.status}`);
    return (await response.json()) as Record<string, unknown>;
  };
  const account = await admin("/admin/accounts", { name: "batch-live other" });
  await admin(`/admin/accounts/${account.id}/topups`, { amount_toman: 1e9, reference: `batch-live-${Date.now()}` });
  return String((await admin(`/admin/accounts/${account.id}/keys`, { name: "batches" })).key);
}

/** Reads the batch until `done` says so. */
async function until(c: Client, id: string, done: (b: BatchView) => boolean): Promise<BatchView> {
  const deadline = performance.now() + BATCH_MOVE_MS_MAX;
  for (;;) {
    const b = await c.batch(id);
    if (done(b)) return b;
    if (performance.now() > deadline) throw new Error(`batch ${id} still ${b.status} after ${BATCH_MOVE_MS_MAX} ms`);
    await Bun.sleep(POLL_MS);
  }
}

/** The live client for `seconds`: its latencies, sorted. */
async function liveFor(c: Client, seconds: number): Promise<number[]> {
  const latencies: number[] = [];
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) latencies.push(await c.live());
  return latencies.sort((a, b) => a - b);
}

/** The live client for `seconds` with the gateway's readings around it. */
async function liveWindow(target: Target, c: Client, seconds: number) {
  const done = await startReadings(target);
  const latencies = await liveFor(c, seconds);
  return { latencies, readings: await done(latencies.length) };
}

const figures = (latencies: number[]) => ({
  requests: latencies.length,
  p50Ms: percentile(latencies, 0.5),
  p99Ms: percentile(latencies, 0.99),
  maxMs: latencies.at(-1) ?? Number.NaN,
});

/** A batch started and, once in_progress, `during` run; its lines finished meanwhile; cancelled and ended after. */
async function withBatch<T>(c: Client, lines: number, during: () => Promise<T>) {
  const id = await c.createBatch(lines);
  const start = await until(c, id, (b) => b.status !== "validating");
  const t0 = performance.now();
  const got = await during();
  const elapsedS = (performance.now() - t0) / 1000;
  const end = await c.batch(id);
  const done = (b: BatchView) => b.request_counts.completed + b.request_counts.failed;
  if (end.status === "in_progress") await c.cancel(id);
  await until(c, id, (b) => !["in_progress", "cancelling", "finalizing"].includes(b.status));
  return {
    got,
    lines: done(end) - done(start),
    seconds: elapsedS,
    throughout: start.status === "in_progress" && end.status === "in_progress",
  };
}

async function measure(target: Target, o: { rounds: number; seconds: number; lines: number; other: boolean }): Promise<Phase[]> {
  const { rounds, seconds, lines } = o;
  const c = client(target);
  const batcher = o.other ? client(target, await otherAccountKey(target)) : c;
  await liveFor(c, WARMUP_S);
  const phases: Phase[] = [];
  for (let round = 1; round <= rounds; round++) {
    const a = await liveWindow(target, c, seconds);
    phases.push({ round, phase: "A, no batch", seconds, ...figures(a.latencies), readings: a.readings });
    const b = await withBatch(batcher, lines, () => liveWindow(target, c, seconds));
    const { latencies, readings } = b.got;
    phases.push({
      round,
      phase: "B, batch",
      ...figures(latencies),
      lines: b.lines,
      seconds: b.seconds,
      throughout: b.throughout,
      readings,
    });
    console.error(`${target.name} round ${round}: ${phases.slice(-2).map(line).join(" · ")}`);
  }
  const alone = await withBatch(batcher, lines, () => Bun.sleep(seconds * 1000));
  const { lines: done, seconds: elapsed, throughout } = alone;
  phases.push({
    round: 0,
    phase: "batch alone",
    requests: 0,
    p50Ms: Number.NaN,
    p99Ms: Number.NaN,
    maxMs: Number.NaN,
    lines: done,
    seconds: elapsed,
    throughout,
  });
  return phases;
}

const ms = (value: number) => (Number.isNaN(value) ? "—" : value.toFixed(2));
const line = (p: Phase) =>
  `${p.phase}: p50 ${ms(p.p50Ms)} p99 ${ms(p.p99Ms)} max ${ms(p.maxMs)} stall ${ms(p.readings?.stallMaxMs ?? Number.NaN)}${p.lines === undefined ? "" : `, ${p.lines} lines`}`;
const median = (values: number[]) =>
  percentile(
    [...values].sort((a, b) => a - b),
    0.5,
  );

/** The phases as a markdown table, with the medians of p99, their difference and the verdict. */
export function batchLiveMarkdown(target: string, phases: Phase[]): string {
  const rows = [
    `**${target}**\n`,
    "| Round | Phase | live requests | p50 ms | p99 ms | max ms | longest stall ms | CPU 0 busy | lines finished | lines/s | in_progress throughout |",
    "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ...phases.map(
      (p) =>
        `| ${p.round || "—"} | ${p.phase} | ${p.requests || "—"} | ${ms(p.p50Ms)} | ${ms(p.p99Ms)} | ${ms(p.maxMs)} | ${ms(p.readings?.stallMaxMs ?? Number.NaN)} | ${p.readings ? `${(p.readings.cpu0Busy * 100).toFixed(0)}%` : "—"} | ${p.lines ?? "—"} | ${p.lines === undefined ? "—" : (p.lines / p.seconds).toFixed(0)} | ${p.throughout === undefined ? "—" : p.throughout ? "yes" : "no"} |`,
    ),
  ];
  const a = median(phases.filter((p) => p.phase === "A, no batch").map((p) => p.p99Ms));
  const b = median(phases.filter((p) => p.phase === "B, batch").map((p) => p.p99Ms));
  const verdict = b - a <= BATCH_LIVE_P99_ADDED_MS ? "✓" : "✗";
  rows.push(
    "",
    `Median p99: A ${ms(a)} ms, B ${ms(b)} ms; B − A ${b >= a ? "+" : "−"}${ms(Math.abs(b - a))} ms (goal ≤ +${BATCH_LIVE_P99_ADDED_MS}) ${verdict}`,
  );
  return rows.join("\n");
}

async function main(): Promise<void> {
  const { values: flags } = parseArgs({
    args: process.argv.slice(2),
    strict: true,
    options: {
      /** embedded, nats-pg, or both (default). */
      mode: { type: "string", default: "both" },
      rounds: { type: "string", default: "3" },
      seconds: { type: "string", default: "5" },
      lines: { type: "string", default: "1000" },
      /** `NAME=value` for the gateway's environment (repeatable). */
      env: { type: "string", multiple: true, default: [] },
      /** Another checkout whose `src/main.ts` is measured (an older release: the figures before a change). */
      "gateway-root": { type: "string" },
      /** `same` (default): the batch is the live client's key's; `other`: a second account's. */
      "batch-account": { type: "string", default: "same" },
    },
  });
  const rounds = countFlag(flags.rounds, { fallback: 3, max: 10 });
  const seconds = countFlag(flags.seconds, { fallback: 5, max: 60 });
  const lines = countFlag(flags.lines, { fallback: 1000, max: 50_000 });
  const env = envFlags(flags.env, "bench:batch-live");
  const modes: DarvazeMode[] = flags.mode === "both" ? ["embedded", "nats-pg"] : [flags.mode === "nats-pg" ? "nats-pg" : "embedded"];
  const sim = await startSimulator({ outputTokens: 64 });
  const services = pinServices(LOAD_CPU);
  const tables: string[] = [];
  try {
    for (const mode of modes) {
      const unavailable = mode === "nats-pg" ? await servicesUnavailable(servicesDefaults) : null;
      if (unavailable) {
        console.error(`skipped nats-pg: ${unavailable}`);
        continue;
      }
      const target = await startDarvaze({
        mode,
        upstreamUrl: sim.url,
        services: servicesDefaults,
        env: { FREE_RPM: BENCH_FREE_RPM, ...env },
        readyTimeoutMs: 90_000,
        ...(flags["gateway-root"] ? { root: flags["gateway-root"] } : {}),
      });
      try {
        tables.push(
          batchLiveMarkdown(target.name, await measure(target, { rounds, seconds, lines, other: flags["batch-account"] === "other" })),
        );
      } finally {
        await target.stop();
      }
    }
  } finally {
    services.restore();
    await sim.stop();
  }
  const load = loadavg()
    .map((n) => n.toFixed(2))
    .join(" ");
  const root = flags["gateway-root"] ? `, the gateway of ${flags["gateway-root"]}` : "";
  console.log(
    `\nOne live client (sequential) against a ${lines}-line chat batch, ${seconds} s a phase, ${rounds} round(s) A/B alternately${root}, the batch ${flags["batch-account"] === "other" ? "another account's" : "the live key's"}; load average at the end ${load}\n`,
  );
  console.log(tables.join("\n\n"));
}

if (import.meta.main) await runBenchmark({ name: "bench:batch-live", runSMax: 1_200 }, main);
