/**
 * A node's memory under sustained load: chat at `--concurrency` connections (wrk, whole replies;
 * `--stream`: streams of 64 chunks) for `--windows` windows of `--window-seconds`, and after each window the gateway's resident set
 * and its /metrics: the memory guard's collections (light and full) and their pauses, the usage
 * log's lag and the writer's backlog. A node whose memory is flat under steady load ends where it
 * was once warm: the table's last line compares the mean resident set of the last third of the
 * windows with the second third (the first third is the warm-up: the engine's heap and the
 * compiler's code growing to their working size). Memory that keeps growing there is kept by
 * something (a wait left registered on a long-lived promise held every usage message a node
 * sent until NATS next disconnected: found this way, bench/RESULTS.md).
 *
 * After the last window the load stops and the bench waits (at most CATCH_UP_S_MAX) until the usage
 * log and the writer hold nothing unposted, reading the gateway's CPU (every thread) meanwhile: the
 * work the load left behind. A node whose ledger falls behind serves more requests a second than it
 * can keep up with; its cost a request is the CPU of the windows and of the catch-up together.
 *
 *   bun run bench:soak [-- --nats-pg] [--windows 9] [--window-seconds 10] [--concurrency 64] [--stream] [--gateway-root <checkout>]
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { runBenchmark } from "./procs.ts";
import { startThreadTimes } from "./threads.ts";
import { askedMode, startDarvaze, startSimulator, type Target } from "./targets.ts";
import { runSseClient } from "./sse-client.ts";
import { runWrk } from "./wrk.ts";

const { values: flags } = parseArgs({
  args: process.argv.slice(2),
  strict: true,
  options: {
    "nats-pg": { type: "boolean", default: false },
    windows: { type: "string", default: "9" },
    "window-seconds": { type: "string", default: "10" },
    concurrency: { type: "string", default: "64" },
    /** Streams of 64 chunks (bench/sse-client.ts) instead of whole replies. */
    stream: { type: "boolean", default: false },
    "gateway-root": { type: "string" },
  },
});

const WINDOWS_MAX = 360;
const WINDOW_S_MAX = 600;
const CONCURRENCY_MAX = 1_024;
const bounded = (text: string | undefined, max: number) => Math.min(max, Math.max(1, Number.parseInt(text ?? "", 10) || 1));
const windows = Math.max(3, bounded(flags.windows, WINDOWS_MAX));
const windowS = bounded(flags["window-seconds"], WINDOW_S_MAX);
const concurrency = bounded(flags.concurrency, CONCURRENCY_MAX);

/** The gateway's metrics this bench reads after each window (absent ones read as 0). */
const METRICS = [
  "darvaze_gc_forced_total",
  "darvaze_gc_forced_pause_seconds_total",
  "darvaze_gc_forced_full_total",
  "darvaze_gc_forced_full_pause_seconds_total",
  "darvaze_usage_log_lag_messages",
  "darvaze_usage_backlog_records",
] as const;
type MetricName = (typeof METRICS)[number];

function rssMib(pid: number): number {
  const kb = Number(/VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? Number.NaN);
  return kb / 1024;
}

async function metrics(target: Target): Promise<Record<MetricName, number>> {
  const response = await fetch(`${target.url}/metrics`, { headers: { authorization: `Bearer ${target.adminToken}` } });
  const text = await response.text();
  const read = {} as Record<MetricName, number>;
  for (const name of METRICS) read[name] = Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, "m").exec(text)?.[1] ?? 0);
  return read;
}

interface Window {
  seconds: number;
  rps: number;
  p99Ms: number;
  maxMs: number;
  errors: number;
  rssMib: number;
  read: Record<MetricName, number>;
}

/** The longest wait after the load for the ledger to have everything, and how often it is read meanwhile. */
const CATCH_UP_S_MAX = 120;
const CATCH_UP_POLL_MS = 250;

const cpuMsOf = (read: () => { runMs: number }[]) => read().reduce((sum, t) => sum + t.runMs, 0);

/** Seconds until the usage log's lag and the writer's backlog are both 0 (null: not within CATCH_UP_S_MAX). */
async function caughtUp(target: Target): Promise<number | null> {
  const startedMs = performance.now();
  while (performance.now() - startedMs < CATCH_UP_S_MAX * 1000) {
    const read = await metrics(target);
    if (read.darvaze_usage_log_lag_messages === 0 && read.darvaze_usage_backlog_records === 0)
      return (performance.now() - startedMs) / 1000;
    await Bun.sleep(CATCH_UP_POLL_MS);
  }
  return null;
}

const mean = (values: number[]) => values.reduce((sum, v) => sum + v, 0) / values.length;

await runBenchmark({ name: "bench:soak", runSMax: windows * (windowS + 15) + 120 + CATCH_UP_S_MAX }, async () => {
  const asked = await askedMode(flags["nats-pg"]);
  const mode = asked.mode;
  // `max_tokens` cuts replies shorter (16 for whole replies, 64 for streams).
  const sim = await startSimulator({ outputTokens: 64 });
  const gateway = await startDarvaze({
    ...asked,
    upstreamUrl: sim.url,
    ...(flags["gateway-root"] ? { root: flags["gateway-root"] } : {}),
  });
  try {
    const rows: Window[] = [];
    const loadCpu = startThreadTimes(gateway.pid!);
    let requests = 0;
    for (let i = 0; i < windows; i++) {
      const m = flags.stream
        ? await runSseClient({ target: gateway, workload: "stream", concurrency, durationMs: windowS * 1000, warmupMs: 0 })
        : await runWrk({ target: gateway, workload: "chat", concurrency, durationS: windowS });
      const row: Window = {
        seconds: (i + 1) * windowS,
        rps: m.rps,
        p99Ms: m.p99Ms,
        maxMs: m.maxMs,
        errors: m.errors,
        rssMib: rssMib(gateway.pid!),
        read: await metrics(gateway),
      };
      rows.push(row);
      requests += m.requests;
      console.error(`window ${i + 1}/${windows}: ${Math.round(row.rps)} req/s, RSS ${row.rssMib.toFixed(0)} MiB`);
    }
    const windowsCpuMs = cpuMsOf(loadCpu);
    const afterCpu = startThreadTimes(gateway.pid!);
    const catchUpS = await caughtUp(gateway);
    const catchUpCpuMs = cpuMsOf(afterCpu);
    const perRequestUs = (cpuMs: number) => ((cpuMs * 1000) / requests).toFixed(0);
    const third = Math.floor(rows.length / 3);
    const middle = mean(rows.slice(third, 2 * third).map((r) => r.rssMib));
    const last = mean(rows.slice(rows.length - third).map((r) => r.rssMib));
    const lines = [
      `\n### Soak: ${mode}, ${flags.stream ? "stream" : "chat"} c=${concurrency}, ${windows} × ${windowS} s${flags["gateway-root"] ? `, gateway from ${flags["gateway-root"]}` : ""} (${new Date().toISOString().slice(0, 16)} UTC)\n`,
      `Command: \`bun run bench:soak -- ${mode === "nats-pg" ? "--nats-pg " : ""}${flags.stream ? "--stream " : ""}--windows ${windows} --window-seconds ${windowS} --concurrency ${concurrency}\`\n`,
      "| after s | req/s | p99 ms | max ms | errors | RSS MiB | guard's collections (full) | their pauses s (full) | usage log lag | writer's backlog |",
      "|---:|---:|---:|---:|---:|---:|---|---|---:|---:|",
      ...rows.map(
        (r) =>
          `| ${r.seconds} | ${Math.round(r.rps).toLocaleString("en-US")} | ${r.p99Ms.toFixed(1)} | ${r.maxMs.toFixed(1)} | ${r.errors} | ${r.rssMib.toFixed(0)} | ${r.read.darvaze_gc_forced_total} (${r.read.darvaze_gc_forced_full_total}) | ${r.read.darvaze_gc_forced_pause_seconds_total.toFixed(3)} (${r.read.darvaze_gc_forced_full_pause_seconds_total.toFixed(3)}) | ${r.read.darvaze_usage_log_lag_messages} | ${r.read.darvaze_usage_backlog_records} |`,
      ),
      "",
      `Resident set, mean of the last ${third} windows against the ${third} before them: ${middle.toFixed(0)} → ${last.toFixed(0)} MiB (${last >= middle ? "+" : ""}${(((last - middle) / middle) * 100).toFixed(0)}%).`,
      catchUpS === null
        ? `After the load the ledger had not caught up within ${CATCH_UP_S_MAX} s (CPU meanwhile ${catchUpCpuMs.toFixed(0)} ms).`
        : `After the load the ledger caught up in ${catchUpS.toFixed(1)} s. The gateway's CPU a request (every thread): ${perRequestUs(windowsCpuMs)} µs in the windows, ${perRequestUs(windowsCpuMs + catchUpCpuMs)} µs with the catch-up (${catchUpCpuMs.toFixed(0)} ms, the idle node's own timers included).`,
    ];
    console.log(lines.join("\n"));
  } finally {
    await gateway.stop();
    await sim.stop();
  }
});
