/**
 * `bun run bench:mix [-- --quick | --only <bare|embedded|nats> | --seed N]`: a realistic mixed
 * workload against the bare Bun proxy and Darvaze (embedded; NATS + PostgreSQL, one node, when
 * both answer), all forwarding to the same simulator. Many accounts and keys (created through the
 * admin API before the run; the proxy gets as many stand-in keys), streamed and non-streamed chat
 * with 1–30 KB prompts, a few embeddings, a few clients that leave mid-stream, all drawn from a
 * seed (bench/mix-requests.ts), so every target and every run is sent the same requests in the
 * same order. A fixed number of clients runs for a fixed time after a warm-up (on another seed);
 * the figures, the server's CPU per request and the ratios to the bare proxy are appended to
 * the end of bench/RESULTS.md.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { appendResults } from "./report.ts";
import { interruptedSignal, onInterrupt, PINNING, runBenchmark } from "./procs.ts";
import { startReadings, type Readings } from "./readings.ts";
import { runMixLoad, type MixResult } from "./mix-load.ts";
import { CHAT_MODEL, EMBEDDING_MODEL, OUTPUT_TOKENS_MAX, PROMPT_BYTES_MAX, PROMPT_BYTES_MIN } from "./mix-requests.ts";
import { ROOT, servicesDefaults, servicesUnavailable, startBareProxy, startDarvaze, startSimulator, type Target } from "./targets.ts";

const { values: flags } = parseArgs({
  args: process.argv.slice(2),
  strict: true,
  options: {
    quick: { type: "boolean", default: false },
    /** Targets whose label contains any of these words (bare, embedded, nats). */
    only: { type: "string", multiple: true },
    seed: { type: "string", default: "1" },
  },
});

interface Settings {
  mode: "full" | "quick";
  accounts: number;
  keysPerAccount: number;
  concurrency: number;
  warmupS: number;
  measureS: number;
  /** The watchdog: the whole run, start-ups and key creation included, ends by then. */
  runSMax: number;
}

const settings: Settings = flags.quick
  ? { mode: "quick", accounts: 10, keysPerAccount: 5, concurrency: 16, warmupS: 3, measureS: 5, runSMax: 240 }
  : { mode: "full", accounts: 50, keysPerAccount: 20, concurrency: 64, warmupS: 10, measureS: 20, runSMax: 600 };
const SEED_MAX = 2 ** 31 - 1;
const seed = Math.min(SEED_MAX, Math.max(0, Number.parseInt(flags.seed!, 10) || 0));
/** The warm-up draws its requests from another seed, so the measured requests are the same whatever the warm-up sent. */
const warmupSeed = (seed + 1) % SEED_MAX;
const keyCreationsInFlight = 16;
/** A gateway's start-up on a shared, busy machine (migrations, the embedded database) can take tens of seconds. */
const readyTimeoutMs = 90_000;
const adminTimeoutMs = 10_000;
const BARE = "bare Bun proxy";

const runStarted = performance.now();
function progress(message: string): void {
  const seconds = ((performance.now() - runStarted) / 1000).toFixed(0).padStart(3);
  console.error(`[${seconds}s] ${message}`);
}

/** Requests served: every kind's successes (left streams included). */
const servedOf = (result: MixResult) => Object.entries(result.kinds).reduce((total, [kind, k]) => total + (kind === "all" ? 0 : k.ok), 0);

/** One target's measured run. */
interface Row {
  target: string;
  result: MixResult;
  readings: Readings;
}

async function adminPost(target: Target, path: string, body: unknown): Promise<Record<string, unknown>> {
  const response = await fetch(target.url + path, {
    method: "POST",
    headers: { authorization: `Bearer ${target.adminToken}`, "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(adminTimeoutMs),
  });
  const reply = (await response.json()) as Record<string, unknown>;
  if (!response.ok) throw new Error(`admin ${path} answered ${response.status}: ${JSON.stringify(reply)}`);
  return reply;
}

/** `settings.accounts` funded accounts with `settings.keysPerAccount` keys each, through the admin API; the keys, account by account. */
async function createMixKeys(target: Target): Promise<string[]> {
  const keys: string[] = [];
  const jobs: (() => Promise<void>)[] = [];
  for (let a = 0; a < settings.accounts; a++)
    jobs.push(async () => {
      const account = await adminPost(target, "/admin/accounts", { name: `mix-${a + 1}` });
      const id = String(account.id);
      await adminPost(target, `/admin/accounts/${id}/topups`, { amount_toman: 1e9, reference: `mix-${a + 1}` });
      for (let k = 0; k < settings.keysPerAccount; k++) {
        const created = await adminPost(target, `/admin/accounts/${id}/keys`, { name: `mix-${a + 1}-${k + 1}`, concurrency_max: 64 });
        if (typeof created.key !== "string") throw new Error(`key creation returned no key: ${JSON.stringify(created)}`);
        keys[a * settings.keysPerAccount + k] = created.key;
      }
    });
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) await jobs[next++]!();
  };
  await Promise.all(Array.from({ length: Math.min(keyCreationsInFlight, jobs.length) }, worker));
  return keys;
}

/** Keys for the run: real ones on Darvaze, stand-ins (as many) for the proxy, which passes any on. */
async function keysFor(target: Target): Promise<string[]> {
  const count = settings.accounts * settings.keysPerAccount;
  if (!target.adminToken) return Array.from({ length: count }, (_, i) => `mix-stand-in-${i + 1}`);
  progress(`  creating ${settings.accounts} accounts × ${settings.keysPerAccount} keys …`);
  return createMixKeys(target);
}

async function measure(target: Target, keysFile: string): Promise<Row> {
  writeFileSync(keysFile, JSON.stringify(await keysFor(target)));
  const load = { url: target.url, keysFile, concurrency: settings.concurrency };
  progress(`  warm-up ${settings.warmupS} s …`);
  await runMixLoad({ ...load, seed: warmupSeed, durationMs: settings.warmupS * 1000 });
  progress(`  measuring ${settings.measureS} s …`);
  const readings = await startReadings(target);
  const result = await runMixLoad({ ...load, seed, durationMs: settings.measureS * 1000 });
  return { target: target.name, result, readings: await readings(servedOf(result)) };
}

async function runMix(): Promise<{ rows: Row[]; skipped: string[] }> {
  const sim = await startSimulator({ outputTokens: OUTPUT_TOKENS_MAX });
  const targets: { label: string; start(): Promise<Target | string> }[] = [
    { label: BARE, start: () => startBareProxy(sim.url) },
    { label: "Darvaze embedded", start: () => startDarvaze({ mode: "embedded", upstreamUrl: sim.url, readyTimeoutMs }) },
    {
      label: "Darvaze NATS + PostgreSQL, 1 node",
      // On a fresh database of its own on that server, dropped when it stops.
      start: async () =>
        (await servicesUnavailable(servicesDefaults)) ??
        startDarvaze({ mode: "nats-pg", upstreamUrl: sim.url, services: servicesDefaults, readyTimeoutMs }),
    },
  ];
  const chosen = flags.only?.length
    ? targets.filter((t) => flags.only!.some((word) => t.label.toLowerCase().includes(word.toLowerCase())))
    : targets;
  const folder = mkdtempSync(join(tmpdir(), "darvaze-mix-"));
  const unregister = onInterrupt(() => rmSync(folder, { recursive: true, force: true }));
  const rows: Row[] = [];
  const skipped: string[] = [];
  try {
    for (const { label, start } of chosen) {
      interruptedSignal.throwIfAborted();
      progress(`starting ${label}`);
      const target = await start().catch((error: Error) => `failed to start: ${error.message.split("\n")[0]}`);
      if (typeof target === "string") {
        skipped.push(`${label}: ${target}`);
        progress(`skipped ${label}: ${target}`);
        continue;
      }
      try {
        const row = await measure(target, join(folder, "keys.json"));
        rows.push(row);
        progress(`  ${summary(row)}`);
      } catch (error) {
        interruptedSignal.throwIfAborted();
        skipped.push(`${label}: stopped mid-way: ${(error as Error).message.split("\n")[0]}`);
        progress(`${label} failed: ${(error as Error).message}`);
      } finally {
        await target.stop();
      }
    }
  } finally {
    await sim.stop();
    rmSync(folder, { recursive: true, force: true });
    unregister();
  }
  return { rows, skipped };
}

const rpsOf = (row: Row) => servedOf(row.result) / (row.result.elapsedMs / 1000);
const errorsOf = (row: Row) => Object.values(row.result.errors).reduce((a, b) => a + b, 0);
const cpuMsPerRequest = (row: Row) => (row.readings.cpuMsPer1k === null ? Number.NaN : row.readings.cpuMsPer1k / 1000);

function summary(row: Row): string {
  const all = row.result.kinds.all!;
  return `${Math.round(rpsOf(row))} req/s, p50 ${all.p50Ms.toFixed(1)} ms, p99 ${all.p99Ms.toFixed(1)} ms, errors ${errorsOf(row)}, server CPU ${cpuMsPerRequest(row).toFixed(2)} ms/request`;
}

const ms = (value: number) => (Number.isNaN(value) ? "—" : value < 10 ? value.toFixed(2) : value.toFixed(1));
const count = (value: number) => Math.round(value).toLocaleString("en-US");

function figuresTable(rows: Row[]): string {
  const lines = [
    "| Target | Sent | Served | req/s | all p50 / p99 / max ms | chat p50 / p99 / max ms | stream p50 / p99 / max ms | stream TTFB p50 / p99 / max ms | embeddings p50 / p99 / max ms | left mid-stream (TTFB p50 ms) | Errors | server CPU ms per request | longest stall ms | memory guard's collections (pause ms) | CPU 0 busy | load generator CPU ms per request |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
  ];
  for (const row of rows) {
    const k = row.result.kinds;
    const triple = (f: { p50Ms: number; p99Ms: number; maxMs: number }) => `${ms(f.p50Ms)} / ${ms(f.p99Ms)} / ${ms(f.maxMs)}`;
    lines.push(
      `| ${row.target} | ${count(row.result.sent)} | ${count(servedOf(row.result))} | ${count(rpsOf(row))} | ${triple(k.all!)} | ${triple(k.chat!)} | ${triple(k.stream!)} | ${ms(k.stream!.ttfbP50Ms)} / ${ms(k.stream!.ttfbP99Ms)} / ${ms(k.stream!.ttfbMaxMs)} | ${triple(k.embeddings!)} | ${count(k.leave!.ok)} (${ms(k.leave!.ttfbP50Ms)}) | ${count(errorsOf(row))} | ${ms(cpuMsPerRequest(row))} | ${row.readings.stallMaxMs === null ? "—" : ms(row.readings.stallMaxMs)} | ${row.readings.gcForced === null ? "—" : `${row.readings.gcForced} (${ms(row.readings.gcPauseMs ?? 0)})`} | ${Math.round(row.readings.cpu0Busy * 100)}% | ${ms(row.result.loadCpuMs / Math.max(1, row.result.sent))} |`,
    );
  }
  return lines.join("\n");
}

function ratiosTable(rows: Row[]): string {
  const bare = rows.find((row) => row.target === BARE);
  const others = rows.filter((row) => row !== bare);
  if (!bare || others.length === 0) return "(no ratios: the bare proxy and a gateway were not both measured)";
  const ratio = (a: number, b: number) => (Number.isFinite(a / b) ? (a / b).toFixed(2) : "—");
  const lines = [
    "| Target | req/s ÷ bare | server CPU per request ÷ bare | all p50 ÷ bare | all p99 ÷ bare | stream TTFB p50 − bare ms |",
    "|---|---:|---:|---:|---:|---:|",
  ];
  for (const row of others) {
    const [a, b] = [row.result.kinds, bare.result.kinds];
    lines.push(
      `| ${row.target} | ${ratio(rpsOf(row), rpsOf(bare))} | ${ratio(cpuMsPerRequest(row), cpuMsPerRequest(bare))} | ${ratio(a.all!.p50Ms, b.all!.p50Ms)} | ${ratio(a.all!.p99Ms, b.all!.p99Ms)} | ${ms(a.stream!.ttfbP50Ms - b.stream!.ttfbP50Ms)} |`,
    );
  }
  return lines.join("\n");
}

function errorLines(rows: Row[]): string {
  const lines = rows
    .filter((row) => errorsOf(row) > 0)
    .map((row) => {
      const kinds = Object.entries(row.result.errors)
        .sort(([, a], [, b]) => b - a)
        .map(([kind, n]) => `${kind} ×${n}`)
        .join(", ");
      return `- ${row.target}: ${kinds}; first: ${row.result.firstError ?? "?"}`;
    });
  return lines.length ? `Errors by kind:\n\n${lines.join("\n")}` : "Errors by kind: none.";
}

function revision(): string {
  const head = Bun.spawnSync(["git", "rev-parse", "--short", "HEAD"], { cwd: ROOT, stderr: "ignore" });
  if (head.exitCode !== 0) return "uncommitted";
  const dirty = Bun.spawnSync(["git", "status", "--porcelain"], { cwd: ROOT, stderr: "ignore" }).stdout.toString().trim() !== "";
  return head.stdout.toString().trim() + (dirty ? " + uncommitted changes" : "");
}

const loadAverages = () =>
  loadavg()
    .map((n) => n.toFixed(2))
    .join(" ");

function markdown(startedAt: Date, loadBefore: string, rows: Row[], skipped: string[]): string {
  const flagsUsed = [
    ...(settings.mode === "quick" ? ["--quick"] : []),
    ...(flags.only ?? []).map((word) => `--only ${word}`),
    ...(seed === 1 ? [] : [`--seed ${seed}`]),
  ];
  const command = `bun run bench:mix${flagsUsed.length ? ` -- ${flagsUsed.join(" ")}` : ""}`;
  const keys = settings.accounts * settings.keysPerAccount;
  return [
    `## ${startedAt.toISOString().slice(0, 16).replace("T", " ")} UTC · mixed workload · ${settings.mode} · ${revision()}`,
    "",
    `- Command: \`${command}\` (bench/mix.ts)`,
    `- Mix (seed ${seed}; every target is sent requests 0, 1, 2, … of the same sequence, so the one that serves more has sent a longer prefix of it): ${settings.concurrency} clients for ${settings.measureS} s after a ${settings.warmupS} s warm-up on seed ${warmupSeed}; ${settings.accounts} accounts × ${settings.keysPerAccount} keys (${keys}, each request's key drawn at random; on the proxy, ${keys} stand-in keys); 55% non-streamed \`${CHAT_MODEL}\` chat, 35% streamed, 5% \`${EMBEDDING_MODEL}\` embeddings (1–8 inputs), 5% streams whose client leaves after 1–8 frames; prompts ${PROMPT_BYTES_MIN / 1024}–${PROMPT_BYTES_MAX / 1024} KB (log-normal, median 4 KB, in 1–4 turns after a system message), \`max_tokens\` 16, 64, 128 or 256; the simulator without delays writes up to ${OUTPUT_TOKENS_MAX} tokens`,
    '- Latency: to the last byte (a stream\'s `data: [DONE]`); TTFB for streams; req/s counts served requests (left streams included, failed ones not); "all" is chat, streams and embeddings together',
    `- CPU pinning: ${PINNING}; nats-server and PostgreSQL left unpinned (shared services); server CPU from /proc/<pid>/stat over the measurement, divided by the requests served; the load generator's own CPU (process.cpuUsage) divided by the requests it sent; CPU 0 busy at 100% means the load CPU (load generator, simulator, and other people's work) was saturated`,
    `- Machine: ${cpus().length} CPUs (${cpus()[0]?.model.trim() ?? "?"}), Bun ${Bun.version}; load average 1/5/15 min before ${loadBefore}, at the end ${loadAverages()} (the run itself keeps both CPUs busy, ~2). **The machine was shared with other people's work**: compare targets within a run.`,
    ...(skipped.length ? [`- Skipped: ${skipped.join("; ")}`] : []),
    "",
    figuresTable(rows),
    "",
    ratiosTable(rows),
    "",
    errorLines(rows),
    "",
  ].join("\n");
}

await runBenchmark({ name: "bench:mix", runSMax: settings.runSMax }, async () => {
  const startedAt = new Date();
  const loadBefore = loadAverages();
  progress(`mix ${settings.mode}, seed ${seed}; load average ${loadBefore}`);
  const { rows, skipped } = await runMix();
  interruptedSignal.throwIfAborted();
  const text = markdown(startedAt, loadBefore, rows, skipped);
  console.log(`\n${text}`);
  appendResults(join(ROOT, "bench/RESULTS.md"), text);
  progress("appended to bench/RESULTS.md");
});
