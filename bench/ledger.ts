/**
 * `bun run bench:ledger [-- --nats-pg] [--print-only] [--again bench/out/ledger-….json]`: the
 * cost ledger, the gateway's CPU per request split by stage (parse, count, admit, send, relay,
 * usage, settle, metrics, access log, Elysia and Bun's HTTP, the rest) for three workloads: chat
 * (whole replies, max_tokens 16), stream (64 chunks) and the same chat spread over 1,000 keys of
 * one account, each at 64 connections.
 *
 * The gateway runs under `bun --cpu-prof` (its default access log on, as deployed), pinned to its
 * CPU as in `bun run bench`. Around each measurement the run reads every thread's CPU time from
 * /proc/<pid>/task/<tid>/schedstat: the main thread's is split by the profile's samples taken
 * within the measurement (bench/ledger-stages.ts says which code is which stage); Bun samples
 * its native work too (the HTTP server, a collection), so the samples cover nearly all of it, and
 * a row shows what they miss. The other threads are their own rows: the embedded database, the
 * tokenizer threads, Bun's HTTP client (the upstream's sockets), the collector's and compiler's.
 * A second gateway without the profiler gives the CPU per request the profiler did not slow.
 * The table replaces the cost ledger at the top of bench/RESULTS.md (`--print-only`: printed only).
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { attribute, type CpuProfile, STAGE_NAMES, STAGES, type Stage } from "./ledger-stages.ts";
import type { Measurement, Workload } from "./measurement.ts";
import { installExitHandlers, interruptedSignal, pinSelf, PINNING, stopAll } from "./procs.ts";
import { runSseClient } from "./sse-client.ts";
import { type DarvazeMode, ROOT, servicesDefaults, servicesUnavailable, startDarvaze, startSimulator, type Target } from "./targets.ts";
import { snapshot } from "./threads.ts";
import { runWrk } from "./wrk.ts";

const { values: flags } = parseArgs({
  args: process.argv.slice(2),
  strict: true,
  options: {
    /** Also measure the gateway on NATS + PostgreSQL (a fresh database, dropped after). */
    "nats-pg": { type: "boolean", default: false },
    /** Print the ledger without writing it into bench/RESULTS.md. */
    "print-only": { type: "boolean", default: false },
    "measure-s": { type: "string", default: "10" },
    /** bench/out/ledger-<mode>-<time>.json of an earlier run (repeatable): split its profile anew with today's rules, measuring nothing. */
    again: { type: "string", multiple: true },
  },
});

const MEASURE_S_MAX = 60;
const measureS = Math.min(MEASURE_S_MAX, Math.max(2, Number(flags["measure-s"]) || 10));
/** Seconds of the same workload just before each measurement. */
const warmupS = 2;
/**
 * Seconds each workload runs once on a fresh gateway before any is measured: a fresh Bun process
 * compiles its hot paths for its first ~10 s under load (bench/run.ts), and the 1,000 keys open
 * their leases meanwhile.
 */
const startWarmupS = 6;
/** The whole run ends by then, start-ups included. */
const runSMax = 900;
const keysMany = 1000;

const WORKLOADS: readonly Workload[] = [
  { name: "chat", kind: "chat", concurrency: 64 },
  { name: "stream", kind: "stream", concurrency: 64 },
  { name: "1,000 keys", kind: "chat", concurrency: 64, keys: keysMany },
];

/** Rows of the ledger that are not stages of the main thread's JavaScript. */
const THREAD_ROWS = ["outside", "database", "tokenizer", "httpClient", "collector", "jit", "threads"] as const;
type ThreadRow = (typeof THREAD_ROWS)[number];
const THREAD_ROW_NAMES: Record<ThreadRow, string> = {
  outside: "main thread's CPU the samples do not cover",
  database: "embedded database's thread (PGlite: usage batches, lease holds)",
  tokenizer: "tokenizer threads (exact counts)",
  httpClient: "Bun's HTTP client thread (the upstream's sockets, both ways)",
  collector: "garbage collector's threads",
  jit: "JIT compiler's threads",
  threads: "other threads (allocator, Bun's pool, the profiler's sampler)",
};
/** Where each thread row's CPU belongs among the stages, for the summary by stage. */
const THREAD_ROW_STAGE: Partial<Record<ThreadRow, Stage>> = { tokenizer: "count", httpClient: "send" };

type Row = Stage | ThreadRow;
/** The gateway's threads over one measurement, by row, in CPU milliseconds; `mainMs` the main thread's. */
interface ThreadCpu {
  byRow: Record<ThreadRow, number>;
  mainMs: number;
  totalMs: number;
}

interface Measured {
  workload: Workload;
  measurement: Measurement;
  /** Successful requests. */
  requests: number;
  fromMs: number;
  toMs: number;
  cpu: ThreadCpu;
}

interface LedgerColumn {
  workload: string;
  rps: number;
  rpsUnprofiled: number;
  /** µs per request by row. */
  rows: Record<Row, number>;
  totalUs: number;
  totalUnprofiledUs: number;
  samples: number;
  /** The share of the main thread's CPU the samples account for. */
  coverage: number;
  /** Failed requests in the measurement, and what they were (their CPU is in the figures, they are not in the count). */
  errors: number;
  errorDetail: string;
  hottest: { frame: string; stage: Stage; samples: number }[];
}

const outDir = join(ROOT, "bench/out");
const resultsPath = join(ROOT, "bench/RESULTS.md");
const runStarted = performance.now();

function progress(message: string): void {
  console.error(`[${((performance.now() - runStarted) / 1000).toFixed(0).padStart(3)}s] ${message}`);
}

/** The row of a thread by its name (Linux keeps the last 15 characters of WebKit's names). */
function threadRow(name: string, isMain: boolean, isDatabase: boolean): ThreadRow | "main" {
  if (isMain) return "main";
  if (isDatabase) return "database";
  if (name === "Worker") return "tokenizer";
  if (name === "HTTP Client") return "httpClient";
  if (/Helper Thread|ollector Thread|Heap/.test(name)) return "collector";
  if (/JIT|WarmUp/.test(name)) return "jit";
  return "threads";
}

/**
 * Starts counting the gateway's threads; the returned function gives their CPU since. In the
 * embedded mode the database's worker is the first Worker thread (the database opens before the
 * tokenizer threads start); on PostgreSQL every Worker is a tokenizer thread.
 */
function startThreadCpu(pid: number, mode: DarvazeMode): () => ThreadCpu {
  const before = snapshot(pid);
  return () => {
    const after = snapshot(pid);
    const workers = [...after.entries()].filter(([, t]) => t.name === "Worker").map(([tid]) => Number(tid));
    const databaseTid = mode === "embedded" && workers.length > 0 ? Math.min(...workers) : null;
    const byRow = Object.fromEntries(THREAD_ROWS.map((row) => [row, 0])) as Record<ThreadRow, number>;
    let mainMs = 0;
    for (const [tid, now] of after) {
      const ranMs = now.runMs - (before.get(tid)?.runMs ?? 0);
      const row = threadRow(now.name, Number(tid) === pid, Number(tid) === databaseTid);
      if (row === "main") mainMs += ranMs;
      else byRow[row] += ranMs;
    }
    const totalMs = mainMs + Object.values(byRow).reduce((a, b) => a + b, 0);
    return { byRow, mainMs, totalMs };
  };
}

function load(target: Target, workload: Workload, durationS: number, keys?: string[]): Promise<Measurement> {
  return workload.kind === "chat"
    ? runWrk({ target, workload: workload.name, concurrency: workload.concurrency, ...(keys ? { keys } : {}), durationS })
    : runSseClient({ target, workload: workload.name, concurrency: workload.concurrency, durationMs: durationS * 1000, warmupMs: 0 });
}

/** Every workload on one fresh gateway: a start-up warm-up for each, then each measured in turn. */
async function measureGateway(target: Target, mode: DarvazeMode, label: string): Promise<Measured[]> {
  progress(`${label}: creating ${keysMany - 1} more keys …`);
  const keys = [target.key, ...(await target.createKeys!(keysMany - 1))];
  const keysOf = (w: Workload) => (w.keys === undefined ? undefined : keys.slice(0, w.keys));
  progress(`${label}: start-up warm-up, ${startWarmupS} s per workload …`);
  for (const workload of WORKLOADS) await load(target, workload, startWarmupS, keysOf(workload));
  const measured: Measured[] = [];
  for (const workload of WORKLOADS) {
    interruptedSignal.throwIfAborted();
    await load(target, workload, warmupS, keysOf(workload));
    const fromMs = Date.now();
    const threads = startThreadCpu(target.pid!, mode);
    const measurement = await load(target, workload, measureS, keysOf(workload));
    const cpu = threads();
    const toMs = Date.now();
    const requests = measurement.requests - measurement.errors;
    measured.push({ workload, measurement, requests, fromMs, toMs, cpu });
    const errors = measurement.errors > 0 ? `, ${measurement.errors} errors (${measurement.errorDetail ?? "see the load's output"})` : "";
    progress(
      `${label} · ${workload.name}: ${Math.round(measurement.rps)} req/s, ${((cpu.totalMs * 1000) / requests).toFixed(0)} µs CPU per request${errors}`,
    );
  }
  return measured;
}

function readProfile(name: string): CpuProfile {
  const path = join(outDir, `${name}.cpuprofile`);
  if (!existsSync(path)) throw new Error(`the gateway wrote no profile at ${path}`);
  return JSON.parse(readFileSync(path, "utf8")) as CpuProfile;
}

/** One workload's column: the profiled run split by stage, the unprofiled run's total beside it (when it ran). */
function column(profiled: Measured, unprofiled: Measured | undefined, profile: CpuProfile): LedgerColumn {
  const split = attribute(profile, { root: ROOT, fromUs: profiled.fromMs * 1000, toUs: profiled.toMs * 1000 });
  const perRequest = (ms: number) => (ms * 1000) / Math.max(1, profiled.requests);
  // The samples' time in JavaScript, at most the main thread's CPU (a descheduled thread is sampled late, not more).
  const sampledMs = Math.min(profiled.cpu.mainMs, (split.samples * split.periodUs) / 1000);
  const rows = {} as Record<Row, number>;
  for (const stage of STAGES) rows[stage] = perRequest(split.samples === 0 ? 0 : (sampledMs * split.byStage[stage]) / split.samples);
  for (const row of THREAD_ROWS) rows[row] = perRequest(profiled.cpu.byRow[row]);
  rows.outside = perRequest(profiled.cpu.mainMs - sampledMs);
  return {
    workload: profiled.workload.name,
    rps: profiled.measurement.rps,
    rpsUnprofiled: unprofiled?.measurement.rps ?? Number.NaN,
    rows,
    totalUs: perRequest(profiled.cpu.totalMs),
    totalUnprofiledUs: unprofiled ? (unprofiled.cpu.totalMs * 1000) / Math.max(1, unprofiled.requests) : Number.NaN,
    samples: split.samples,
    coverage: profiled.cpu.mainMs > 0 ? sampledMs / profiled.cpu.mainMs : 0,
    errors: profiled.measurement.errors,
    errorDetail: profiled.measurement.errorDetail ?? "",
    hottest: split.hottest,
  };
}

/** How long a gateway may take to exit on SIGTERM: it closes every key's lease first, and then writes its profile. */
const exitWaitMsMax = 120_000;
/** How long a gateway may take to start on a busy machine. */
const readyTimeoutMs = 90_000;

/** SIGTERM, then waits for the process to exit on its own (procs.ts kills it after 5 s, before a long profile is written). */
async function stopPatiently(target: Target): Promise<void> {
  const pid = target.pid!;
  const started = performance.now();
  process.kill(pid, "SIGTERM");
  const gone = () => {
    try {
      return readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.startsWith("Z") ?? true;
    } catch {
      return true;
    }
  };
  while (!gone() && performance.now() - started < exitWaitMsMax) await Bun.sleep(100);
  progress(`  the gateway exited in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  await target.stop();
}

/** What one gateway's run came to, kept in bench/out/<name>.json so that `--again` can split it anew. */
interface GatewayRun {
  mode: DarvazeMode;
  /** When and at which revision it was measured, and the machine's load average (1/5/15 min) at its end. */
  measuredAt: string;
  revision: string;
  loadAverage: string;
  profileName: string;
  profiled: Measured[];
  unprofiled?: Measured[];
  note?: string;
}

async function runGateways(mode: DarvazeMode, upstreamUrl: string): Promise<GatewayRun> {
  const profileName = `ledger-${mode}-${new Date().toISOString().replaceAll(":", "").slice(0, 15)}`;
  const services = mode === "nats-pg" ? { services: servicesDefaults } : {};
  // LOG_LEVEL as deployed (info): the access line is one of the stages measured.
  const options = { mode, upstreamUrl, ...services, env: { LOG_LEVEL: "info" }, readyTimeoutMs };
  progress(`${mode}: starting the gateway under the profiler`);
  // The profile alone (startDarvaze's `cpuProfile` adds a markdown summary, slow to write for a long run).
  const bunFlags = ["--cpu-prof", `--cpu-prof-dir=${outDir}`, `--cpu-prof-name=${profileName}.cpuprofile`];
  const gateway = await startDarvaze({ ...options, bunFlags });
  let profiled: Measured[];
  try {
    profiled = await measureGateway(gateway, mode, `${mode}, profiled`);
  } finally {
    await stopPatiently(gateway);
  }
  const run: GatewayRun = { mode, measuredAt: new Date().toISOString(), revision: revision(), loadAverage: "", profileName, profiled };
  try {
    progress(`${mode}: starting the gateway without the profiler`);
    const plain = await startDarvaze(options);
    try {
      run.unprofiled = await measureGateway(plain, mode, `${mode}, unprofiled`);
    } finally {
      await stopPatiently(plain);
    }
  } catch (error) {
    interruptedSignal.throwIfAborted();
    run.note = `${mode}: the gateway without the profiler failed (${(error as Error).message.split("\n")[0]}); its column is empty`;
    progress(run.note);
  }
  run.loadAverage = loadAverageNow();
  writeFileSync(join(outDir, `${profileName}.json`), JSON.stringify(run));
  return run;
}

function columnsOf(run: GatewayRun): LedgerColumn[] {
  const profile = readProfile(run.profileName);
  return run.profiled.map((m, i) => column(m, run.unprofiled?.[i], profile));
}

const us = (n: number) => (Number.isNaN(n) ? "—" : n < 0.5 ? "0" : Math.round(n).toLocaleString("en-US"));
const share = (part: number, whole: number) => (whole > 0 ? `${Math.round((part / whole) * 100)}%` : "");

function modeTable(title: string, columns: LedgerColumn[]): string {
  const head = `| ${title}: µs of CPU per request | ${columns.map((c) => `${c.workload} | %`).join(" | ")} |`;
  const rule = `|---|${columns.map(() => "---:|---:").join("|")}|`;
  const rowLine = (row: Row, name: string) =>
    `| ${name} | ${columns.map((c) => `${us(c.rows[row])} | ${share(c.rows[row], c.totalUs)}`).join(" | ")} |`;
  const lines = [
    head,
    rule,
    ...STAGES.map((stage) => rowLine(stage, STAGE_NAMES[stage])),
    ...THREAD_ROWS.map((row) => rowLine(row, THREAD_ROW_NAMES[row])),
    `| **total, profiled** (/proc, every thread) | ${columns.map((c) => `**${us(c.totalUs)}** | 100%`).join(" | ")} |`,
    `| total without the profiler (a second gateway) | ${columns.map((c) => `${us(c.totalUnprofiledUs)} | `).join(" | ")} |`,
    `| req/s, profiled / not (64 connections; the load generator's pace) | ${columns.map((c) => `${Math.round(c.rps)} / ${us(c.rpsUnprofiled)} | `).join(" | ")} |`,
    `| failed requests, profiled (their CPU is above, but they are not counted as requests) | ${columns.map((c) => `${c.errors} | `).join(" | ")} |`,
    `| samples in the measurement; share of the main thread's CPU they cover | ${columns.map((c) => `${c.samples} | ${share(c.coverage, 1)}`).join(" | ")} |`,
  ];
  return lines.join("\n");
}

/** The stages ranked for one workload, thread rows folded into theirs. */
function ranked(c: LedgerColumn): string {
  const byStage = new Map<string, number>();
  for (const stage of STAGES) byStage.set(STAGE_NAMES[stage], c.rows[stage]);
  for (const row of THREAD_ROWS) {
    const stage = THREAD_ROW_STAGE[row];
    const label = stage ? STAGE_NAMES[stage] : THREAD_ROW_NAMES[row];
    byStage.set(label, (byStage.get(label) ?? 0) + c.rows[row]);
  }
  return [...byStage.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 4)
    .map(([label, value]) => `${label.split(" (")[0]!.split(":")[0]} ${us(value)} µs`)
    .join(", ");
}

function hottestLines(columns: LedgerColumn[]): string {
  return columns
    .map((c) => {
      const frames = c.hottest
        .slice(0, 8)
        .map((h) => `${h.frame} ${share(h.samples, c.samples)} → ${h.stage}`)
        .join("; ");
      return `- ${c.workload}: ${frames}`;
    })
    .join("\n");
}

function revision(): string {
  const head = Bun.spawnSync(["git", "rev-parse", "--short", "HEAD"], { cwd: ROOT, stderr: "ignore" });
  if (head.exitCode !== 0) return "uncommitted";
  const dirty = Bun.spawnSync(["git", "status", "--porcelain"], { cwd: ROOT, stderr: "ignore" }).stdout.toString().trim() !== "";
  return head.stdout.toString().trim() + (dirty ? " + uncommitted changes" : "");
}

const LEDGER_START = "<!-- cost ledger: written by bun run bench:ledger -->";
const LEDGER_END = "<!-- end of the cost ledger -->";

const loadAverageNow = () =>
  loadavg()
    .map((n) => n.toFixed(2))
    .join(" ");

function ledgerMarkdown(runs: GatewayRun[], tables: { title: string; columns: LedgerColumn[] }[], notes: string[]): string {
  const first = runs[0]!;
  const natsPg = runs.some((run) => run.mode === "nats-pg");
  const loads = runs.map((run) => `${run.loadAverage} (${run.mode})`).join(", ");
  return [
    LEDGER_START,
    `## Cost ledger: the gateway's CPU per request, by stage`,
    "",
    `- Command: \`bun run bench:ledger${natsPg ? " -- --nats-pg" : ""}\` (bench/ledger.ts; the map from code to stage, each entry commented: bench/ledger-stages.ts).`,
    `- ${first.measuredAt.slice(0, 16).replace("T", " ")} UTC, ${first.revision}; ${cpus().length} CPUs (${cpus()[0]?.model.trim() ?? "?"}), Bun ${Bun.version}; load average 1/5/15 min at the end of each mode ${loads}. The figures move with the machine's load (the run itself keeps both CPUs busy, ~2): compare rows within a column, and re-run before comparing with another day.`,
    `- Workloads at 64 connections, ${measureS} s measured after a ${warmupS} s warm-up (and ${startWarmupS} s of each once the gateway started): chat (\`gpt-4o-mini\`, \`max_tokens: 16\`, whole replies; wrk), stream (64 content chunks; bench/sse-client.ts), 1,000 keys (the chat, keys of one funded account taken round-robin). The upstream is the simulator with no delays. ${PINNING}. Access log on (LOG_LEVEL info, as deployed; lines to a pipe).`,
    "- Method: `bun --cpu-prof` (1 ms sampling) on the gateway; every thread's CPU from /proc/<pid>/task/<tid>/schedstat around each measurement. The main thread's CPU is split by the samples taken in the measurement, each charged to the stage of its innermost frame a rule names (a library or built-in goes to its caller's stage; a sample with no named frame at all is Bun's HTTP server). Bun samples its native work as well, so the samples cover nearly all the main thread's CPU (the row below says what they miss). The other threads are rows of their own, in µs per request as well; the % column is the share of the profiled total.",
    "",
    ...tables.flatMap(({ title, columns }) => [
      modeTable(title, columns),
      "",
      `Costliest (${title}): ${columns.map((c) => `${c.workload}: ${ranked(c)}`).join(" · ")}.`,
      "",
      `Hottest functions (${title}, self samples):`,
      "",
      hottestLines(columns),
      "",
    ]),
    ...tables.flatMap(({ title, columns }) =>
      columns.filter((c) => c.errors > 0).map((c) => `- ${title}, ${c.workload}: ${c.errors} failed (${c.errorDetail.slice(0, 300)}).`),
    ),
    ...notes.map((note) => `- ${note}`),
    LEDGER_END,
  ].join("\n");
}

/** Replaces the ledger at the top of RESULTS.md, or puts it above the first entry of the diary. */
function writeLedger(markdown: string): void {
  const text = readFileSync(resultsPath, "utf8");
  const start = text.indexOf(LEDGER_START);
  const end = text.indexOf(LEDGER_END);
  let next: string;
  if (start >= 0 && end > start) next = text.slice(0, start) + markdown + text.slice(end + LEDGER_END.length);
  else {
    const firstEntry = text.indexOf("\n## ");
    const at = firstEntry < 0 ? text.length : firstEntry + 1;
    next = `${text.slice(0, at)}${markdown}\n\n${text.slice(at)}`;
  }
  writeFileSync(resultsPath, next);
}

/** The gateways measured: embedded, and on NATS + PostgreSQL when asked and reachable. */
async function measureRuns(): Promise<GatewayRun[]> {
  const runs: GatewayRun[] = [];
  const sim = await startSimulator({ outputTokens: 64 });
  try {
    runs.push(await runGateways("embedded", sim.url));
    if (flags["nats-pg"]) {
      const reason = await servicesUnavailable(servicesDefaults);
      if (reason === null) runs.push(await runGateways("nats-pg", sim.url));
      else {
        const skipped = { measuredAt: new Date().toISOString(), revision: revision(), loadAverage: loadAverageNow(), profileName: "" };
        runs.push({ mode: "nats-pg", ...skipped, profiled: [], note: `NATS + PostgreSQL skipped: ${reason}` });
      }
    }
  } finally {
    await sim.stop();
    await stopAll();
  }
  return runs;
}

async function main(): Promise<void> {
  if (Bun.which("wrk") === null) {
    console.error("bench:ledger: wrk is not installed (apt-get install -y wrk)");
    process.exit(2);
  }
  installExitHandlers();
  pinSelf();
  mkdirSync(outDir, { recursive: true });
  const watchdog = setTimeout(() => {
    console.error(`bench:ledger: still running after ${runSMax} s, giving up`);
    process.kill(process.pid, "SIGTERM");
  }, runSMax * 1000);
  watchdog.unref();
  const [loadNow = 0] = loadavg();
  if (loadNow > 0.5) progress(`warning: load average ${loadNow.toFixed(2)} before the run; other work will skew the figures`);
  const runs = flags.again?.length ? flags.again.map((path) => JSON.parse(readFileSync(path, "utf8")) as GatewayRun) : await measureRuns();
  const tables = runs
    .filter((run) => run.profiled.length > 0)
    .map((run) => ({ title: run.mode === "embedded" ? "embedded" : "NATS + PostgreSQL, 1 node", columns: columnsOf(run) }));
  const notes = runs.flatMap((run) => (run.note ? [run.note] : []));
  if (flags.again?.length)
    notes.push(`Split again from ${flags.again.join(", ")} (profiles kept in bench/out/) with the rules of this revision.`);
  const markdown = ledgerMarkdown(runs, tables, notes);
  console.log(`\n${markdown}`);
  if (!flags["print-only"] && existsSync(resultsPath)) {
    writeLedger(markdown);
    progress(`written at the top of ${resultsPath}`);
  }
}

await main().catch((error: unknown) => {
  // On a signal, procs.ts drops the temp folders and databases, then exits; wait for it.
  if (interruptedSignal.aborted) return new Promise<never>(() => {});
  throw error;
});
