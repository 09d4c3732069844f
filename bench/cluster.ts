/**
 * `bun run bench:cluster [-- --duration-s 10 --concurrency 64 --keys 100]`: throughput of one,
 * two and three Darvaze nodes (NATS + PostgreSQL) against the same simulator, under a random
 * spread: every request goes to a node picked at random, with a key picked at random among
 * `--keys` keys of one funded account (so keys hash into partitions owned by every node).
 * For each run it reads `darvaze_key_admissions{path}` from every node's /metrics before and
 * after the measurement, and reports the share of admissions made locally from the node's own
 * slot share, without a broker hop.
 *
 * It also reads the gateway processes' CPU time over the measurement: on a machine with fewer cores
 * than nodes + load generator + simulator, req/s cannot grow with nodes, but CPU per request shows
 * what a node added to the cluster costs (the same µs per request means throughput that scales
 * with cores).
 *
 * `--rate-per-node R` paces the load instead (open loop: R × nodes requests a second in all, sent
 * on a schedule by the same loops), so every node works at the same rate whatever the node count:
 * a node that is not saturated batches less (fewer requests per wake-up, per write, per flush), and
 * comparing CPU per request at equal load per node separates that from what the cluster adds.
 *
 * The load generator is a Bun fetch loop in this process (pinned to the load CPU with the
 * simulator), the same for every node count, so the ratios compare like with like; the figures
 * are printed, not appended to RESULTS.md.
 */
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { parseArgs } from "node:util";
import { installExitHandlers, interruptedSignal, pinSelf, stopAll } from "./procs.ts";
import { servicesDefaults, servicesUnavailable, startDarvaze, startSimulator, type Target } from "./targets.ts";
import { benchChatBody } from "./measurement.ts";

const { values: flags } = parseArgs({
  args: process.argv.slice(2),
  strict: true,
  options: {
    "duration-s": { type: "string", default: "10" },
    "warmup-s": { type: "string", default: "2" },
    concurrency: { type: "string", default: "64" },
    keys: { type: "string", default: "100" },
    nodes: { type: "string", default: "1,2,3" },
    "rate-per-node": { type: "string" },
  },
});
const durationS = Number(flags["duration-s"]);
const warmupS = Number(flags["warmup-s"]);
const concurrency = Number(flags.concurrency);
const keysCount = Math.max(1, Number(flags.keys));
const nodeCounts = flags.nodes.split(",").map(Number) as (1 | 2 | 3)[];
/** Requests a second each node gets, when the load is paced; unset: as fast as the loops go. */
const ratePerNode = flags["rate-per-node"] === undefined ? null : Number(flags["rate-per-node"]);
if (ratePerNode !== null && !(ratePerNode > 0)) throw new Error("--rate-per-node must be a positive number");
/** Bound on one request: a slower one counts as an error. */
const REQUEST_TIMEOUT_MS = 10_000;
const body = benchChatBody();

interface Row {
  nodes: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
  localShare: number | null;
  admissions: Record<string, number>;
  /** Gateway CPU time (all nodes, user + system) per successful request. */
  cpuUsPerRequest: number;
}

/** User + system CPU seconds a process has used so far (/proc/<pid>/stat, clock ticks of 1/100 s). */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

async function admissions(urls: string[], adminToken: string | undefined): Promise<Record<string, number>> {
  const sum: Record<string, number> = {};
  for (const url of urls) {
    const response = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${adminToken}` } });
    if (!response.ok) throw new Error(`/metrics answered ${response.status}`);
    const text = await response.text();
    for (const match of text.matchAll(/^darvaze_key_admissions\{path="([a-z_]+)"\} (\d+)/gm)) {
      sum[match[1]!] = (sum[match[1]!] ?? 0) + Number(match[2]);
    }
  }
  return sum;
}

/** `concurrency` loops, each sending one request at a time to a random node with a random key. */
async function load(urls: string[], keys: string[], seconds: number): Promise<{ ok: number; errors: number; latenciesMs: number[] }> {
  const endAt = performance.now() + seconds * 1000;
  const latenciesMs: number[] = [];
  let ok = 0;
  let errors = 0;
  const intervalMs = ratePerNode === null ? 0 : 1000 / (ratePerNode * urls.length);
  let nextAtMs = performance.now();
  const worker = async () => {
    while (performance.now() < endAt && !interruptedSignal.aborted) {
      if (intervalMs > 0) {
        const atMs = nextAtMs;
        nextAtMs += intervalMs;
        if (atMs >= endAt) break;
        const waitMs = atMs - performance.now();
        if (waitMs > 0) await Bun.sleep(waitMs);
      }
      const url = urls[Math.floor(Math.random() * urls.length)]!;
      const key = keys[Math.floor(Math.random() * keys.length)]!;
      const startedMs = performance.now();
      try {
        const response = await fetch(`${url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body,
          signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
        });
        await response.arrayBuffer();
        if (response.status === 200) {
          ok++;
          latenciesMs.push(performance.now() - startedMs);
        } else errors++;
      } catch {
        errors++;
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return { ok, errors, latenciesMs };
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function measure(target: Target, keys: string[], nodes: number): Promise<Row> {
  const urls = target.urls ?? [target.url];
  await load(urls, keys, warmupS);
  const before = await admissions(urls, target.adminToken);
  const cpuBefore = (target.pids ?? []).reduce((sum, pid) => sum + cpuSeconds(pid), 0);
  const run = await load(urls, keys, durationS);
  const cpuAfter = (target.pids ?? []).reduce((sum, pid) => sum + cpuSeconds(pid), 0);
  const after = await admissions(urls, target.adminToken);
  const delta: Record<string, number> = {};
  for (const path of new Set([...Object.keys(before), ...Object.keys(after)])) delta[path] = (after[path] ?? 0) - (before[path] ?? 0);
  const total = Object.values(delta).reduce((a, b) => a + b, 0);
  const sorted = run.latenciesMs.sort((a, b) => a - b);
  return {
    nodes,
    rps: run.ok / durationS,
    p50Ms: percentile(sorted, 50),
    p99Ms: percentile(sorted, 99),
    errors: run.errors,
    // Local: from the node's own share; owner_local also crosses no broker (this node owns the key).
    localShare: total > 0 ? ((delta.local ?? 0) + (delta.owner_local ?? 0)) / total : null,
    admissions: delta,
    cpuUsPerRequest: run.ok > 0 ? ((cpuAfter - cpuBefore) * 1e6) / run.ok : 0,
  };
}

async function main(): Promise<void> {
  installExitHandlers();
  pinSelf();
  const reason = await servicesUnavailable(servicesDefaults);
  if (reason) {
    console.error(`bench:cluster needs NATS and PostgreSQL: ${reason}`);
    process.exit(2);
  }
  const sim = await startSimulator({ outputTokens: 64 });
  const rows: Row[] = [];
  try {
    for (const nodes of nodeCounts) {
      console.error(`starting ${nodes} node(s) …`);
      const target = await startDarvaze({ mode: "nats-pg", nodes, upstreamUrl: sim.url, services: servicesDefaults });
      try {
        const keys = [target.key, ...(keysCount > 1 ? await target.createKeys!(keysCount - 1) : [])];
        const row = await measure(target, keys, nodes);
        rows.push(row);
        console.error(
          `  ${Math.round(row.rps)} req/s, p50 ${row.p50Ms.toFixed(2)} ms, errors ${row.errors}, admissions ${JSON.stringify(row.admissions)}`,
        );
      } finally {
        await target.stop();
      }
    }
  } finally {
    await sim.stop();
    await stopAll();
  }
  const one = rows.find((r) => r.nodes === 1)?.rps;
  const lines = [
    `Cluster, random spread: ${concurrency} clients${ratePerNode === null ? "" : ` paced at ${ratePerNode} req/s per node`}, ${keysCount} keys, ${durationS} s after a ${warmupS} s warm-up; load average ${loadavg()
      .map((n) => n.toFixed(2))
      .join(" ")}`,
    "",
    "| Nodes | req/s | × one node | p50 ms | p99 ms | errors | admissions without a broker hop | gateway CPU µs per request (all nodes) |",
    "|---|---|---|---|---|---|---|---|",
    ...rows.map(
      (r) =>
        `| ${r.nodes} | ${Math.round(r.rps)} | ${one ? (r.rps / one).toFixed(2) : "—"} | ${r.p50Ms.toFixed(2)} | ${r.p99Ms.toFixed(2)} | ${r.errors} | ${r.localShare === null ? "—" : `${(r.localShare * 100).toFixed(1)}%`} | ${Math.round(r.cpuUsPerRequest)} |`,
    ),
  ];
  console.log(lines.join("\n"));
}

await main();
