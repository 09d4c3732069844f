/**
 * One client's tail, from the first second after start and after a burst: the newcomer's first
 * experience. Each round starts the bare Bun proxy, Darvaze embedded and Darvaze on NATS +
 * PostgreSQL (one node) in turn, fresh, and measures each with one connection sending chat
 * requests one after another (wrk -c1, on the load CPU):
 *
 * - *first seconds*: straight after the target answers (the key funded), no warm-up;
 * - *after a burst*: straight after BURST_CONNECTIONS connections of chat and as many of streams
 *   (the side-by-side harness's warm-up, bench-peers' run-peers.sh);
 * - *steady*: the same again, once more right after.
 *
 * Each row has p50, p99 and max, the longest event-loop stall (the gateway's own monitor; the
 * bare proxy's `/stall`, the same monitor) and the memory guard's collections with their pause,
 * apart. The verdict, against the bare proxy's row of the same phase and round (DESIGN.md §6):
 * p99 ≤ bare + 2 ms, max ≤ bare + 10 ms, longest stall ≤ bare's + 5 ms.
 *
 *   bun run bench:one-client                      # 2 rounds, 5 s a phase (~2 min)
 *   bun run bench:one-client -- --rounds 3 --seconds 8 --only embedded --only bare
 *
 * `bun run bench` runs the same phases (oneClientPhases) for its bare, embedded and one-node targets.
 */
import { parseArgs } from "node:util";
import { loadavg } from "node:os";
import { countFlag, envFlags } from "./flags.ts";
import type { Measurement } from "./measurement.ts";
import { LOAD_CPU, runBenchmark } from "./procs.ts";
import { startReadings } from "./readings.ts";
import { pinServices } from "./services-cpu.ts";
import { runSseClient } from "./sse-client.ts";
import { servicesDefaults, servicesUnavailable, startBareProxy, startDarvaze, startSimulator, type Target } from "./targets.ts";
import { runWrk } from "./wrk.ts";

/** Connections of the burst before the "after a burst" phase, chat and streams each (run-peers.sh warms at 16). */
export const BURST_CONNECTIONS = 16;
/** The burst's chat and stream seconds (run-peers.sh: 3 and 2). */
const BURST_CHAT_S = 3;
const BURST_STREAM_S = 2;
/** How long a gateway may take to answer /health (a busy machine's start takes tens of seconds). */
const READY_MS_MAX = 90_000;

export const ONE_CLIENT_PHASES = ["first seconds", "after a burst", "steady"] as const;
export type OneClientPhase = (typeof ONE_CLIENT_PHASES)[number];

export interface OneClientRow {
  target: string;
  phase: OneClientPhase;
  round: number;
  m: Measurement;
}

/** One connection of chat for `seconds`, with the server's readings around it. */
async function oneConnection(target: Target, phase: OneClientPhase, seconds: number): Promise<Measurement> {
  const readings = await startReadings(target);
  const m = await runWrk({ target, workload: `chat c=1, ${phase}`, concurrency: 1, durationS: seconds });
  return { ...m, readings: await readings(m.requests - m.errors) };
}

/** The three phases on a target just started; rows in ONE_CLIENT_PHASES' order. */
export async function oneClientPhases(target: Target, round: number, seconds: number): Promise<OneClientRow[]> {
  const rows: OneClientRow[] = [];
  rows.push({ target: target.name, phase: "first seconds", round, m: await oneConnection(target, "first seconds", seconds) });
  await runWrk({ target, workload: "burst", concurrency: BURST_CONNECTIONS, durationS: BURST_CHAT_S });
  await runSseClient({ target, workload: "burst", concurrency: BURST_CONNECTIONS, durationMs: BURST_STREAM_S * 1000, warmupMs: 0 });
  rows.push({ target: target.name, phase: "after a burst", round, m: await oneConnection(target, "after a burst", seconds) });
  rows.push({ target: target.name, phase: "steady", round, m: await oneConnection(target, "steady", seconds) });
  return rows;
}

/** Added over the bare proxy's figure of the same phase and round, at most (DESIGN.md §6). */
export const ONE_CLIENT_GOALS = { p99AddedMs: 2, maxAddedMs: 10, stallAddedMs: 5 } as const;

const ms = (value: number | null | undefined) => (value === null || value === undefined || Number.isNaN(value) ? "—" : value.toFixed(2));
const added = (value: number, bare: number | undefined, goal: number) =>
  bare === undefined ? "" : ` (${value >= bare ? "+" : "−"}${Math.abs(value - bare).toFixed(1)} ${value - bare <= goal ? "✓" : "✗"})`;

/** The rows as a markdown table, each Darvaze figure beside its excess over the bare proxy's and the verdict. */
export function oneClientMarkdown(rows: OneClientRow[], bareName: string): string {
  const bareOf = (row: OneClientRow) => rows.find((r) => r.target === bareName && r.phase === row.phase && r.round === row.round)?.m;
  const lines = [
    `| Round | Target | Phase | requests | p50 ms | p99 ms (+ over bare, goal ≤ ${ONE_CLIENT_GOALS.p99AddedMs}) | max ms (goal ≤ +${ONE_CLIENT_GOALS.maxAddedMs}) | longest stall ms (goal ≤ +${ONE_CLIENT_GOALS.stallAddedMs}) | guard's collections, full (pause ms) | errors |`,
    "|---:|---|---|---:|---:|---|---|---|---|---:|",
  ];
  for (const row of rows) {
    const bare = row.target === bareName ? undefined : bareOf(row);
    const { m } = row;
    const stall = m.readings?.stallMaxMs ?? null;
    const bareStall = bare?.readings?.stallMaxMs ?? undefined;
    const gc =
      m.readings?.gcForced === null || m.readings?.gcForced === undefined
        ? "—"
        : `${m.readings.gcForced}, ${m.readings.gcFull ?? 0} (${ms(m.readings.gcPauseMs)})`;
    lines.push(
      `| ${row.round} | ${row.target} | ${row.phase} | ${m.requests} | ${ms(m.p50Ms)} | ${ms(m.p99Ms)}${added(m.p99Ms, bare?.p99Ms, ONE_CLIENT_GOALS.p99AddedMs)} | ${ms(m.maxMs)}${added(m.maxMs, bare?.maxMs, ONE_CLIENT_GOALS.maxAddedMs)} | ${ms(stall)}${stall === null || bareStall === undefined ? "" : added(stall, bareStall, ONE_CLIENT_GOALS.stallAddedMs)} | ${gc} | ${m.errors} |`,
    );
  }
  return lines.join("\n");
}

async function main(): Promise<void> {
  const { values: flags } = parseArgs({
    args: process.argv.slice(2),
    strict: true,
    options: {
      rounds: { type: "string", default: "2" },
      seconds: { type: "string", default: "5" },
      /** Targets whose name contains any of these words (bare, embedded, NATS). */
      only: { type: "string", multiple: true },
      /** `NAME=value` for the Darvaze targets' environment (repeatable). */
      env: { type: "string", multiple: true, default: [] },
      /** Another checkout (an older release): its Darvaze targets run beside this one's, in turn, in the same run. */
      "gateway-root": { type: "string" },
    },
  });
  const rounds = countFlag(flags.rounds, { fallback: 1, max: 10 });
  const seconds = countFlag(flags.seconds, { fallback: 5, max: 60 });
  const env = envFlags(flags.env, "bench:one-client");
  const sim = await startSimulator({ outputTokens: 64 });
  const services = pinServices(LOAD_CPU);
  const starts: { name: string; start(): Promise<Target | string> }[] = [
    { name: "bare", start: () => startBareProxy(sim.url) },
    { name: "embedded", start: () => startDarvaze({ mode: "embedded", upstreamUrl: sim.url, env, readyTimeoutMs: READY_MS_MAX }) },
    {
      name: "NATS",
      start: async () =>
        (await servicesUnavailable(servicesDefaults)) ??
        startDarvaze({ mode: "nats-pg", upstreamUrl: sim.url, services: servicesDefaults, env, readyTimeoutMs: READY_MS_MAX }),
    },
  ];
  const other = flags["gateway-root"];
  if (other) {
    const label = `, ${other.split("/").at(-1)}`;
    for (const mode of ["embedded", "nats-pg"] as const)
      starts.push({
        name: mode === "embedded" ? `embedded${label}` : `NATS${label}`,
        start: async () => {
          const reason = mode === "nats-pg" ? await servicesUnavailable(servicesDefaults) : null;
          if (reason) return reason;
          const target = await startDarvaze({
            mode,
            upstreamUrl: sim.url,
            services: servicesDefaults,
            env,
            root: other,
            readyTimeoutMs: READY_MS_MAX,
          });
          return { ...target, name: `${target.name}${label}` };
        },
      });
  }
  const chosen = flags.only?.length
    ? starts.filter((s) => flags.only!.some((word) => s.name.toLowerCase().includes(word.toLowerCase())))
    : starts;
  const rows: OneClientRow[] = [];
  let bareName = "bare Bun proxy";
  try {
    for (let round = 1; round <= rounds; round++)
      for (const { start } of chosen) {
        const target = await start().catch((error: Error) => `failed to start: ${error.message.split("\n")[0]}`);
        if (typeof target === "string") {
          console.error(`skipped: ${target}`);
          continue;
        }
        if (!target.adminToken) bareName = target.name;
        try {
          const got = await oneClientPhases(target, round, seconds);
          for (const row of got)
            console.error(
              `${row.round} ${row.target} · ${row.phase}: p50 ${ms(row.m.p50Ms)} p99 ${ms(row.m.p99Ms)} max ${ms(row.m.maxMs)} stall ${ms(row.m.readings?.stallMaxMs)}`,
            );
          rows.push(...got);
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
  console.log(`\nOne client, ${seconds} s a phase, ${rounds} round(s), targets in turn; load average at the end ${load}\n`);
  console.log(oneClientMarkdown(rows, bareName));
}

if (import.meta.main) await runBenchmark({ name: "bench:one-client", runSMax: 1_200 }, main);
