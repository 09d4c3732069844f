/**
 * `bun run bench:workers`: one host's gateway as WORKERS=1 against WORKERS=2 (NATS + PostgreSQL),
 * taken in turn each round: chat at 64 connections, its req/s, p50/p99/max, and the server's CPU
 * per request over every process of the host (the supervisor and its workers, from
 * /proc/<pid>/stat). Every gateway process is pinned to the server CPU (the workers inherit the
 * supervisor's pinning), so the CPU a request costs is compared on the same core; the throughput
 * ratio is reported without a goal (on 2 cores the load generator shares one).
 *
 *   bun run bench:workers [-- --rounds 3 --seconds 6]
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import type { Measurement } from "./measurement.ts";
import { freePort, runBenchmark } from "./procs.ts";
import { startReadings } from "./readings.ts";
import { servicesDefaults, servicesUnavailable, startDarvaze, startSimulator, type Target } from "./targets.ts";
import { runWrk } from "./wrk.ts";

const { values: flags } = parseArgs({
  args: process.argv.slice(2),
  strict: true,
  options: { rounds: { type: "string", default: "3" }, seconds: { type: "string", default: "6" } },
});
const ROUNDS_MAX = 10;
const SECONDS_MAX = 60;
const rounds = Math.min(ROUNDS_MAX, Math.max(1, Number.parseInt(flags.rounds!, 10) || 1));
const seconds = Math.min(SECONDS_MAX, Math.max(1, Number.parseInt(flags.seconds!, 10) || 1));
const WARMUP_S = 3;
const CONCURRENCY = 64;
const READY_MS_MAX = 60_000;
/** CPU per request at two workers within this share of one worker's (DESIGN.md §6). */
const CPU_SHARE_MAX = 1.1;

/** The host's processes: the one started and every child it started (the workers). */
function hostPids(pid: number): number[] {
  const children = readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim();
  return [pid, ...(children ? children.split(" ").map(Number) : [])];
}

/** Until every worker answers on its own port. */
async function workersReady(host: string, portBase: number, workers: number): Promise<void> {
  const deadline = performance.now() + READY_MS_MAX;
  for (let i = 0; i < workers; i++) {
    for (;;) {
      const ok = await fetch(`http://${host}:${portBase + i}/ready`)
        .then((r) => r.ok)
        .catch(() => false);
      if (ok) break;
      if (performance.now() > deadline) throw new Error(`worker ${i} not ready after ${READY_MS_MAX} ms`);
      await Bun.sleep(100);
    }
  }
}

interface Row {
  workers: number;
  m: Measurement;
  cpuMsPer1k: number | null;
}

async function measure(sim: Target, workers: number): Promise<Row> {
  const portBase = freePort();
  const env: Record<string, string> = workers > 1 ? { WORKERS: String(workers), WORKER_PORT_BASE: String(portBase) } : {};
  const target = await startDarvaze({
    mode: "nats-pg",
    upstreamUrl: sim.url,
    services: servicesDefaults,
    env,
    readyTimeoutMs: READY_MS_MAX,
  });
  try {
    if (workers > 1) await workersReady(new URL(target.url).hostname, portBase, workers);
    const host = { ...target, pids: hostPids(target.pid!) };
    const workload = `chat c=${CONCURRENCY}`;
    await runWrk({ target: host, workload, concurrency: CONCURRENCY, durationS: WARMUP_S });
    const readings = await startReadings(host);
    const m = await runWrk({ target: host, workload, concurrency: CONCURRENCY, durationS: seconds });
    return { workers, m, cpuMsPer1k: (await readings(m.requests)).cpuMsPer1k };
  } finally {
    await target.stop();
  }
}

await runBenchmark({ name: "bench:workers", runSMax: 60 + rounds * 2 * (seconds + WARMUP_S + 90) }, async () => {
  const unavailable = await servicesUnavailable(servicesDefaults);
  if (unavailable) throw new Error(`bench:workers needs NATS and PostgreSQL: ${unavailable}`);
  const sim = await startSimulator({ outputTokens: 64 });
  const rows: Row[] = [];
  try {
    for (let round = 1; round <= rounds; round++) {
      for (const workers of [1, 2]) {
        console.error(`round ${round}/${rounds}: WORKERS=${workers} …`);
        rows.push(await measure(sim, workers));
      }
    }
  } finally {
    await sim.stop();
  }
  const us = (row: Row) => (row.cpuMsPer1k === null ? Number.NaN : row.cpuMsPer1k);
  console.log(
    `\n\`bun run bench:workers -- --rounds ${rounds} --seconds ${seconds}\` (chat c=${CONCURRENCY}, every process on the server CPU)\n`,
  );
  console.log("| Round | WORKERS | req/s | p50 ms | p99 ms | max ms | server CPU µs a request | errors |");
  console.log("|---|---|---|---|---|---|---|---|");
  rows.forEach((row, i) => {
    console.log(
      `| ${Math.floor(i / 2) + 1} | ${row.workers} | ${Math.round(row.m.rps)} | ${row.m.p50Ms.toFixed(1)} | ${row.m.p99Ms.toFixed(1)} | ${row.m.maxMs.toFixed(1)} | ${us(row).toFixed(1)} | ${row.m.errors} |`,
    );
  });
  const median = (values: number[]) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
  const cpu = (workers: number) => median(rows.filter((r) => r.workers === workers).map(us));
  const rps = (workers: number) => median(rows.filter((r) => r.workers === workers).map((r) => r.m.rps));
  const share = cpu(2) / cpu(1);
  console.log(
    `\nMedians: CPU a request ${cpu(1).toFixed(1)} µs at 1 worker, ${cpu(2).toFixed(1)} µs at 2 (${(share * 100).toFixed(0)}%, goal ≤ ${Math.round(CPU_SHARE_MAX * 100)}%: ${share <= CPU_SHARE_MAX ? "✓" : "✗"}); req/s ${Math.round(rps(1))} → ${Math.round(rps(2))} (${(rps(2) / rps(1)).toFixed(2)}×, no goal: both workers share the server CPU here)`,
  );
});
