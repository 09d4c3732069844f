/**
 * `bun run bench [-- --quick | --profile [--nats-pg]]`: starts the simulator, then each target in turn (the
 * simulator itself, the bare proxy, the limits of the shape (bench/limit-proxy.ts: a metering
 * proxy in Bun.serve, in Elysia, and with two NATS hops), the peer gateway (Portkey), Darvaze embedded, Darvaze on
 * NATS + PostgreSQL with one node and with two), runs every workload against it after a warm-up
 * (Darvaze embedded and on NATS + PostgreSQL with one node also with 1,000 keys), stops it, and
 * appends the run to bench/RESULTS.md.
 * Every child process dies with the run; a watchdog ends a run that overstays its bound.
 */
import { mkdirSync, readdirSync, readFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import type { Measurement, Workload } from "./measurement.ts";
import { installExitHandlers, interruptedSignal, LOAD_CPU, onInterrupt, pinSelf, PINNING, stopAll } from "./procs.ts";
import { appendResults, BARE, CEILING, MANY_KEYS, runMarkdown } from "./report.ts";
import { startReadings } from "./readings.ts";
import { pinServices, type ServicesPinned } from "./services-cpu.ts";
import { runSseClient } from "./sse-client.ts";
import {
  askedMode,
  DARVAZE_NODE_CPUS,
  ROOT,
  servicesDefaults,
  servicesUnavailable,
  LIMIT_NAMES,
  startBareProxy,
  startDarvaze,
  startLimitProxy,
  startPortkey,
  startSimulator,
  type Target,
} from "./targets.ts";
import { runWrk } from "./wrk.ts";
import { oneClientMarkdown, oneClientPhases, type OneClientRow } from "./one-client.ts";

const { values: flags } = parseArgs({
  args: process.argv.slice(2),
  strict: true,
  options: {
    quick: { type: "boolean", default: false },
    profile: { type: "boolean", default: false },
    /** With --profile: the gateway on NATS + PostgreSQL, one node (default embedded). */
    "nats-pg": { type: "boolean", default: false },
    rounds: { type: "string", default: "3" },
    only: { type: "string", multiple: true },
    /** Only the workloads named exactly (`--rows 'chat c=1'`), the 1,000-keys row included. */
    rows: { type: "string", multiple: true },
    /** Another checkout whose `src/main.ts` the Darvaze targets run (an older release, say); simulator and harness stay this one's. */
    "gateway-root": { type: "string" },
    /** Leave nats-server and PostgreSQL where the scheduler puts them (by default they are pinned to the load CPU). */
    "services-unpinned": { type: "boolean", default: false },
    /**
     * Seconds each workload runs once on a freshly started target before its first measurement
     * (default: the mode's); 0 measures a cold process.
     */
    "start-warmup": { type: "string" },
  },
});

const chat = (concurrency: number): Workload => ({ name: `chat c=${concurrency}`, kind: "chat", concurrency });
const stream = (concurrency: number): Workload => ({ name: `stream c=${concurrency}`, kind: "stream", concurrency });
const manyKeys: Workload = { name: MANY_KEYS, kind: "chat", concurrency: 64, keys: 1000 };

interface Settings {
  mode: "full" | "quick" | "profile";
  measureS: number;
  warmupS: number;
  /**
   * Each workload runs this long once when a target has just started, before any is measured: a
   * fresh Bun process compiles its hot paths for its first ~10 s under load, on the one CPU it
   * serves from (measured with bench/tail.ts: 550 CPU-ms of JIT threads in 8 s after a 2 s
   * warm-up, 39 in 4 s after 30 s), so without it the first rows measure the compiler.
   */
  startWarmupS: number;
  workloads: Workload[];
  /** The watchdog: the whole run, start-ups included, ends by then. */
  runSMax: number;
}

/** Each target is measured this many times, the targets taken in turn each round, so that drift in the machine's load falls on all of them. */
const ROUNDS_MAX = 10;
const rounds = Math.min(ROUNDS_MAX, Math.max(1, Number.parseInt(flags.rounds!, 10) || 1));

const modeSettings: Settings = flags.profile
  ? { mode: "profile", measureS: 10, warmupS: 2, startWarmupS: 0, workloads: [chat(64), stream(64)], runSMax: 240 }
  : flags.quick
    ? {
        mode: "quick",
        measureS: 2,
        warmupS: 1,
        startWarmupS: 3,
        workloads: [chat(1), chat(64), stream(1), stream(64)],
        runSMax: 360 * rounds,
      }
    : {
        mode: "full",
        measureS: 8,
        warmupS: 2,
        startWarmupS: 5,
        workloads: [chat(1), chat(64), chat(256), stream(1), stream(64)],
        runSMax: 900 * rounds,
      };
const START_WARMUP_S_MAX = 60;
const startSettings: Settings =
  flags["start-warmup"] === undefined
    ? modeSettings
    : { ...modeSettings, startWarmupS: Math.min(START_WARMUP_S_MAX, Math.max(0, Number(flags["start-warmup"]) || 0)) };
/** Every workload `--rows` may name, whatever the mode runs by default. */
const namedWorkloads = [chat(1), chat(64), chat(256), stream(1), stream(64), manyKeys];
const unknownRows = (flags.rows ?? []).filter((name) => !namedWorkloads.some((workload) => workload.name === name));
if (unknownRows.length > 0) {
  console.error(`bench: unknown --rows ${unknownRows.join(", ")}; known: ${namedWorkloads.map((w) => `'${w.name}'`).join(", ")}`);
  process.exit(2);
}
/** --rows <names>: those workloads alone (one row run again and again, or profiled), in place of the mode's. */
const chosenRow = (workload: Workload) => flags.rows === undefined || flags.rows.includes(workload.name);
const settings: Settings =
  flags.rows === undefined
    ? startSettings
    : { ...startSettings, workloads: namedWorkloads.filter((workload) => workload !== manyKeys && chosenRow(workload)) };
const gatewayRoot = flags["gateway-root"];
/** Where the Darvaze targets' `src/main.ts` comes from (`--gateway-root`), spread into startDarvaze's options. */
/**
 * How long a Darvaze node may take to answer /health: on a busy machine (another suite on both
 * cores) a fresh embedded node took over 20 s, the default, and was skipped for the whole run.
 */
const DARVAZE_READY_MS_MAX = 90_000;
const gatewayAt = { readyTimeoutMs: DARVAZE_READY_MS_MAX, ...(gatewayRoot === undefined ? {} : { root: gatewayRoot }) };

const basePinning = `${PINNING}; the peer gateway (Node) on CPU ${DARVAZE_NODE_CPUS[0]} too; with two Darvaze nodes, node 1 on CPU ${DARVAZE_NODE_CPUS[0]} and node 2 on CPU ${DARVAZE_NODE_CPUS[1]} (sharing it with the load generator and simulator: there is no third CPU), each node getting half the connections from its own wrk or half the SSE clients`;

const outDir = join(ROOT, "bench/out");
const resultsPath = join(ROOT, "bench/RESULTS.md");
const runStarted = performance.now();

function progress(message: string): void {
  const seconds = ((performance.now() - runStarted) / 1000).toFixed(0).padStart(3);
  console.error(`[${seconds}s] ${message}`);
}

/** Runs `workload` against `target` for `durationS`. */
function load(target: Target, workload: Workload, durationS: number, keys?: string[]): Promise<Measurement> {
  return workload.kind === "chat"
    ? runWrk({ target, workload: workload.name, concurrency: workload.concurrency, ...(keys ? { keys } : {}), durationS })
    : runSseClient({ target, workload: workload.name, concurrency: workload.concurrency, durationMs: durationS * 1000, warmupMs: 0 });
}

/** Warm-up at the same concurrency, then the measurement, the server's readings taken around it alone. */
async function measure(target: Target, workload: Workload): Promise<Measurement> {
  let keys: string[] | undefined;
  if (workload.kind === "chat" && workload.keys !== undefined && workload.keys > 1) {
    if (!target.createKeys) throw new Error(`${target.name} cannot create keys`);
    progress(`  creating ${workload.keys} keys …`);
    keys = [target.key, ...(await target.createKeys(workload.keys - 1))];
  }
  await load(target, workload, settings.warmupS, keys);
  const readings = await startReadings(target);
  const m = await load(target, workload, settings.measureS, keys);
  return { ...m, readings: await readings(m.requests - m.errors) };
}

async function measureAll(target: Target, measurements: Measurement[], extra: Workload[] = []): Promise<void> {
  if (settings.startWarmupS > 0) {
    progress(`${target.name} · start-up warm-up, ${settings.startWarmupS} s per workload …`);
    for (const workload of settings.workloads) await load(target, workload, settings.startWarmupS);
  }
  for (const workload of [...settings.workloads, ...extra]) {
    interruptedSignal.throwIfAborted();
    progress(`${target.name} · ${workload.name} …`);
    const m = await measure(target, workload);
    measurements.push(m);
    const ttfb = m.ttfbP50Ms === undefined ? "" : `, TTFB p50 ${m.ttfbP50Ms.toFixed(2)} ms`;
    progress(`  ${Math.round(m.rps)} req/s, p50 ${m.p50Ms.toFixed(2)} ms, p99 ${m.p99Ms.toFixed(2)} ms${ttfb}, errors ${m.errors}`);
  }
}

function revision(root = ROOT): string {
  const head = Bun.spawnSync(["git", "rev-parse", "--short", "HEAD"], { cwd: root, stderr: "ignore" });
  if (head.exitCode !== 0) return "uncommitted";
  const dirty = Bun.spawnSync(["git", "status", "--porcelain"], { cwd: root, stderr: "ignore" }).stdout.toString().trim() !== "";
  return head.stdout.toString().trim() + (dirty ? " + uncommitted changes" : "");
}

function machine(): string {
  const wrk = Bun.spawnSync(["wrk", "-v"], { stderr: "pipe" });
  const wrkVersion = /wrk (\S+)/.exec(wrk.stdout.toString() + wrk.stderr.toString())?.[1] ?? "?";
  // Other work on the machine skews every figure; the load average at the end of the run shows it.
  const load = loadavg()
    .map((n) => n.toFixed(2))
    .join(" ");
  return `${cpus().length} CPUs (${cpus()[0]?.model.trim() ?? "?"}), Bun ${Bun.version}, wrk ${wrkVersion}; load average 1/5/15 min at the end ${load} (the run itself keeps both CPUs busy, ~2)`;
}

function requireWrk(): void {
  if (Bun.which("wrk") === null) {
    console.error("bench: wrk is not installed (apt-get install -y wrk)");
    process.exit(2);
  }
}

async function runBench(services: ServicesPinned | null): Promise<void> {
  const startedAt = new Date();
  const pinning = `${basePinning}; ${services ? services.description : "nats-server and PostgreSQL left unpinned (--services-unpinned)"}`;
  const measurements: Measurement[] = [];
  const skipped: string[] = [];
  const sim = await startSimulator({ outputTokens: 64 });
  const natsPg = (nodes: 1 | 2) => async () => {
    const reason = await servicesUnavailable(servicesDefaults);
    return reason ?? startDarvaze({ mode: "nats-pg", nodes, upstreamUrl: sim.url, services: servicesDefaults, ...gatewayAt });
  };
  const targets: { label: string; start(): Promise<Target | string>; extra?: Workload[] }[] = [
    { label: CEILING, start: async () => ({ ...sim, stop: async () => {} }) },
    { label: BARE, start: () => startBareProxy(sim.url) },
    { label: LIMIT_NAMES.bun, start: () => startLimitProxy("bun", sim.url, servicesDefaults.natsUrl) },
    { label: LIMIT_NAMES.elysia, start: () => startLimitProxy("elysia", sim.url, servicesDefaults.natsUrl) },
    {
      label: LIMIT_NAMES.nats2,
      start: async () => (await servicesUnavailable(servicesDefaults)) ?? startLimitProxy("nats2", sim.url, servicesDefaults.natsUrl),
    },
    { label: "Portkey gateway (peer)", start: () => startPortkey(sim.url) },
    {
      label: "Darvaze embedded",
      start: () => startDarvaze({ mode: "embedded", upstreamUrl: sim.url, ...gatewayAt }),
      extra: [manyKeys].filter(chosenRow),
    },
    { label: "Darvaze NATS + PostgreSQL, 1 node", start: natsPg(1), extra: [manyKeys].filter(chosenRow) },
    { label: "Darvaze NATS + PostgreSQL, 2 nodes", start: natsPg(2) },
  ];
  // --only <words>: the targets whose label contains any of them (the rest are not started).
  const chosen = flags.only?.length ? targets.filter((t) => flags.only!.some((word) => t.label.includes(word))) : targets;
  const failed = new Set<string>();
  const oneClient: OneClientRow[] = [];
  const oneClientTargets = settings.workloads.some((w) => w.name === "chat c=1")
    ? [BARE, "Darvaze embedded", "Darvaze NATS + PostgreSQL, 1 node"]
    : [];
  for (let round = 1; round <= rounds; round++)
    for (const { label, start, extra } of chosen) {
      if (failed.has(label)) continue;
      interruptedSignal.throwIfAborted();
      progress(`round ${round}/${rounds}: starting ${label}`);
      let target: Target | string;
      try {
        target = await start();
      } catch (error) {
        target = `failed to start: ${(error as Error).message.split("\n").slice(0, 3).join(" ")}`;
      }
      if (typeof target === "string") {
        failed.add(label);
        skipped.push(`${label}: ${target}`);
        progress(`skipped ${label}: ${target}`);
        continue;
      }
      try {
        // One connection from the first seconds after start, after a burst, steady (bench/one-client.ts).
        if (oneClientTargets.includes(label)) oneClient.push(...(await oneClientPhases(target, round, settings.measureS)));
        await measureAll(target, measurements, extra);
      } catch (error) {
        interruptedSignal.throwIfAborted();
        skipped.push(`${label}: round ${round} stopped mid-way: ${(error as Error).message.split("\n")[0]}`);
        progress(`${label} failed: ${(error as Error).message}`);
      } finally {
        await target.stop();
      }
    }
  await sim.stop();

  const flagsUsed = [
    ...(settings.mode === "full" ? [] : [`--${settings.mode}`]),
    ...(rounds === 3 ? [] : [`--rounds ${rounds}`]),
    ...(flags.only ?? []).map((word) => `--only '${word}'`),
    ...(flags.rows ?? []).map((name) => `--rows '${name}'`),
    ...(gatewayRoot === undefined ? [] : [`--gateway-root ${gatewayRoot}`]),
    ...(flags["services-unpinned"] ? ["--services-unpinned"] : []),
    ...(flags["start-warmup"] === undefined ? [] : [`--start-warmup ${settings.startWarmupS}`]),
  ];
  const command = `bun run bench${flagsUsed.length ? ` -- ${flagsUsed.join(" ")}` : ""}`;
  const markdown = runMarkdown(
    {
      startedAt,
      mode: settings.mode,
      command,
      revision: gatewayRoot === undefined ? revision() : `gateway ${revision(gatewayRoot)}, harness and simulator ${revision()}`,
      pinning,
      durations: `${settings.startWarmupS > 0 ? `each target, once started, runs every workload for ${settings.startWarmupS} s before the first measurement; ` : "targets measured cold (no start-up warm-up); "}${settings.measureS} s per measurement after a ${settings.warmupS} s warm-up at the same concurrency; wrk -t1; ${rounds} rounds, the targets in turn each round (each row is the round with the median req/s, ranges are over the rounds)`,
      machine: machine(),
      skipped,
    },
    measurements,
  );
  interruptedSignal.throwIfAborted();
  const oneClientTable = oneClient.length
    ? `\n\nOne connection, from the first seconds after start, after a burst and steady (bench/one-client.ts; each figure against the bare proxy's of the same phase and round):\n\n${oneClientMarkdown(oneClient, BARE)}`
    : "";
  console.log(`\n${markdown}${oneClientTable}`);
  appendResults(resultsPath, markdown + oneClientTable);
  progress(`appended to ${resultsPath}`);
}

/** The rows of a `## <title>` table in bun's profile markdown, header included. */
function profileSection(markdown: string, title: string, rowsMax: number): string {
  const start = markdown.indexOf(`## ${title}`);
  if (start < 0) return "";
  const rest = markdown.slice(start).split("\n").slice(1);
  const table = rest.filter((line, i) => line.startsWith("|") && rest.slice(0, i).every((l) => l.startsWith("|") || l.trim() === ""));
  return [`${title}:`, ...table.slice(0, rowsMax + 2)].join("\n");
}

async function runProfile(): Promise<void> {
  mkdirSync(outDir, { recursive: true });
  const asked = await askedMode(flags["nats-pg"]);
  const name = `darvaze-${asked.mode}-${new Date().toISOString().replaceAll(":", "").slice(0, 15)}`;
  const sim = await startSimulator({ outputTokens: 64 });
  const gateway = await startDarvaze({
    ...asked,
    upstreamUrl: sim.url,
    cpuProfile: { dir: outDir, name },
    ...gatewayAt,
  });
  const measurements: Measurement[] = [];
  try {
    await measureAll(gateway, measurements);
  } finally {
    // The profile is written when the gateway exits, so stop it before reading.
    await gateway.stop();
    await sim.stop();
  }
  const files = readdirSync(outDir).filter((file) => file.startsWith(name));
  progress(`profile written: ${files.map((file) => join("bench/out", file)).join(", ")}`);
  const md = files.find((file) => file.endsWith(".md"));
  if (md) {
    const text = readFileSync(join(outDir, md), "utf8");
    console.log(`\n${profileSection(text, "Hot Functions (Self Time)", 25)}\n\n${profileSection(text, "Files", 15)}`);
  }
  console.log("\n(figures under the profiler are slower than normal and are not appended to RESULTS.md)");
}

async function main(): Promise<void> {
  requireWrk();
  installExitHandlers();
  pinSelf();
  const watchdog = setTimeout(() => {
    console.error(`bench: still running after ${settings.runSMax} s, giving up`);
    // The SIGTERM handler kills the children, drops temp folders and databases, and exits.
    process.kill(process.pid, "SIGTERM");
  }, settings.runSMax * 1000);
  watchdog.unref();
  progress(`mode ${settings.mode}; ${settings.mode === "profile" ? PINNING : basePinning}`);
  const [loadNow = 0] = loadavg();
  if (loadNow > 0.5) progress(`warning: load average ${loadNow.toFixed(2)} before the run; other work will skew the figures`);
  try {
    if (settings.mode === "profile") await runProfile();
    else {
      const services = flags["services-unpinned"] ? null : pinServices(LOAD_CPU);
      const unregister = services ? onInterrupt(() => services.restore()) : () => {};
      try {
        await runBench(services);
      } finally {
        services?.restore();
        unregister();
      }
    }
  } finally {
    await stopAll();
    clearTimeout(watchdog);
  }
}

await main().catch((error: unknown) => {
  // On a signal, procs.ts drops the temp folders and databases, then exits; wait for it.
  if (interruptedSignal.aborted) return new Promise<never>(() => {});
  throw error;
});
