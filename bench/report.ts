/**
 * Turns one run's measurements into markdown: the figures, the ratios of each gateway to the
 * bare proxy, the peer gateway and the ceiling from the same run, and the goals they are held to.
 */
import { appendFileSync, existsSync, writeFileSync } from "node:fs";
import type { Measurement } from "./measurement.ts";
import { PEER } from "./targets.ts";

export const CEILING = "simulator (ceiling)";
export const BARE = "bare Bun proxy";
/** Darvaze embedded, chat c=64 with requests spread round-robin over 1,000 keys. */
export const MANY_KEYS = "chat c=64, 1,000 keys";
const EMBEDDED = "Darvaze embedded";
const ONE_NODE = "Darvaze NATS + PostgreSQL, 1 node";
const TWO_NODES = "Darvaze NATS + PostgreSQL, 2 nodes";
const PEER_FACTOR_MIN = 10;
const TWO_NODE_FACTOR_MIN = 1.6;

/** The baselines (ceiling, bare proxy, peer) have no keys: the many-keys run compares with their chat c=64. */
const baselineWorkload = (workload: string) => (workload === MANY_KEYS ? "chat c=64" : workload);

/** DESIGN.md §6, per gateway target name prefix. */
const goals = [
  { target: "Darvaze embedded", throughputShareMin: 0.6, addedP50MsMax: 0.3, ttfbOverheadMsMax: 1 },
  { target: "Darvaze NATS", throughputShareMin: 0.5, addedP50MsMax: 0.5, ttfbOverheadMsMax: 1 },
];
const GOAL_THROUGHPUT_WORKLOAD = "chat c=64";
const GOAL_LATENCY_WORKLOAD = "chat c=1";
const GOAL_TTFB_WORKLOAD = "stream c=1";

const ms = (value: number | undefined) =>
  value === undefined || Number.isNaN(value) ? "—" : value < 10 ? value.toFixed(2) : value.toFixed(1);
const rate = (value: number) => (value >= 100 ? Math.round(value).toLocaleString("en-US") : value.toFixed(1));
const ratio = (value: number | undefined) => (value === undefined || !Number.isFinite(value) ? "—" : `${(value * 100).toFixed(0)}%`);
const times = (value: number) => `${value.toFixed(2)}×`;
const verdict = (ok: boolean) => (ok ? "✓" : "✗");
const signedMs = (value: number | undefined) =>
  value === undefined || Number.isNaN(value) ? "—" : `${value >= 0 ? "+" : ""}${value.toFixed(2)}`;

/**
 * One row per target and workload: the round with the median req/s, carrying every round for
 * the spread. Rows keep the order of their first round.
 */
export function combineRounds(measurements: Measurement[]): Measurement[] {
  const groups = new Map<string, Measurement[]>();
  for (const m of measurements) {
    const key = `${m.target}\u0000${m.workload}`;
    groups.set(key, [...(groups.get(key) ?? []), m]);
  }
  return [...groups.values()].map((rounds) => {
    const median = [...rounds].sort((a, b) => a.rps - b.rps)[Math.floor((rounds.length - 1) / 2)]!;
    return { ...median, rounds };
  });
}

/** "median (min–max)" over the rounds of a row. */
function spread(m: Measurement, pick: (r: Measurement) => number | undefined, format: (value: number) => string): string {
  const values = (m.rounds ?? [m]).map(pick).filter((v): v is number => v !== undefined && !Number.isNaN(v));
  const own = pick(m);
  if (own === undefined || Number.isNaN(own)) return "—";
  if (values.length < 2) return format(own);
  return `${format(own)} (${format(Math.min(...values))}–${format(Math.max(...values))})`;
}

/** The worst of the rounds (stalls, collections): a tail is what the worst round shows. */
function worst(m: Measurement, pick: (r: Measurement) => number | null | undefined): number | undefined {
  const values = (m.rounds ?? [m]).map(pick).filter((v): v is number => typeof v === "number");
  return values.length ? Math.max(...values) : undefined;
}

export function figuresTable(measurements: Measurement[]): string {
  const lines = [
    "| Target | Workload | req/s | p50 ms | p90 ms | p99 ms | max ms | TTFB p50 ms | TTFB p99 ms | longest stall ms | forced GCs, full ones (pause ms) | server CPU-ms per 1k | CPU 0 busy | Errors |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
  ];
  for (const m of measurements) {
    const rounds = m.rounds ?? [m];
    const errorCount = rounds.reduce((total, r) => total + r.errors, 0);
    const errors = errorCount > 0 ? `**${errorCount}** (${rounds.find((r) => r.errors > 0)?.errorDetail ?? ""})` : "0";
    const stall = worst(m, (r) => r.readings?.stallMaxMs);
    const gcs = worst(m, (r) => r.readings?.gcForced);
    const pause = worst(m, (r) => r.readings?.gcPauseMs);
    const full = worst(m, (r) => r.readings?.gcFull);
    const cpu0 = worst(m, (r) => r.readings?.cpu0Busy);
    lines.push(
      `| ${m.target} | ${m.workload} | ${spread(m, (r) => r.rps, rate)} | ${spread(m, (r) => r.p50Ms, ms)} | ${spread(m, (r) => r.p90Ms, ms)} | ${spread(m, (r) => r.p99Ms, ms)} | ${spread(m, (r) => r.maxMs, ms)} | ${spread(m, (r) => r.ttfbP50Ms, ms)} | ${spread(m, (r) => r.ttfbP99Ms, ms)} | ${ms(stall)} | ${gcs === undefined ? "—" : `${gcs}, ${full ?? 0} full (${ms(pause)})`} | ${spread(
        m,
        (r) => r.readings?.cpuMsPer1k ?? undefined,
        (v) => v.toFixed(0),
      )} | ${cpu0 === undefined ? "—" : ratio(cpu0)} | ${errors} |`,
    );
  }
  return lines.join("\n");
}

function find(measurements: Measurement[], target: string, workload: string): Measurement | undefined {
  return measurements.find((m) => m.target === target && m.workload === workload);
}

/**
 * Every non-ceiling target against the bare proxy and the ceiling, and every Darvaze target
 * against the peer (Darvaze ÷ Portkey), workload by workload.
 */
export function ratiosTable(measurements: Measurement[]): string {
  const lines = [
    "| Target | Workload | req/s ÷ bare proxy | req/s ÷ ceiling | Darvaze req/s ÷ Portkey | p50 added vs ceiling ms | TTFB p50 added vs ceiling ms |",
    "|---|---|---:|---:|---:|---:|---:|",
  ];
  for (const m of measurements) {
    if (m.target === CEILING) continue;
    const baseline = baselineWorkload(m.workload);
    const bare = find(measurements, BARE, baseline);
    const ceiling = find(measurements, CEILING, baseline);
    const peer = m.target.startsWith("Darvaze") ? find(measurements, PEER, baseline) : undefined;
    const ttfbAdded = m.ttfbP50Ms !== undefined && ceiling?.ttfbP50Ms !== undefined ? m.ttfbP50Ms - ceiling.ttfbP50Ms : undefined;
    lines.push(
      `| ${m.target} | ${m.workload} | ${m.target === BARE ? "—" : ratio(bare && m.rps / bare.rps)} | ${ratio(ceiling && m.rps / ceiling.rps)} | ${peer ? times(m.rps / peer.rps) : "—"} | ${signedMs(ceiling && m.p50Ms - ceiling.p50Ms)} | ${signedMs(ttfbAdded)} |`,
    );
  }
  return lines.join("\n");
}

/** The issue's goals against the peer and for scaling out, on chat c=64 req/s; "" when neither was measured. */
export function scaleGoalsTable(measurements: Measurement[]): string {
  const lines = ["| Goal | Measured (chat c=64 req/s) | Verdict |", "|---|---|---|"];
  const byPrefix = (prefix: string) => measurements.find((m) => m.target.startsWith(prefix) && m.workload === GOAL_THROUGHPUT_WORKLOAD);
  const row = (goal: string, a: Measurement | undefined, b: Measurement | undefined, min: number, note = "") => {
    if (!a || !b) return lines.push(`| ${goal} | n/a (${a ? (b?.target ?? "baseline") : "target"} not measured) | — |`);
    const value = a.rps / b.rps;
    return lines.push(`| ${goal} | ${rate(a.rps)} ÷ ${rate(b.rps)} = ${times(value)} | ${verdict(value >= min)}${note} |`);
  };
  const embedded = byPrefix(EMBEDDED);
  const peer = byPrefix(PEER);
  const one = byPrefix(ONE_NODE);
  const two = byPrefix(TWO_NODES);
  if (!embedded && !peer && !one && !two) return "";
  row(`Darvaze embedded ≥ ${PEER_FACTOR_MIN}× Portkey`, embedded, peer, PEER_FACTOR_MIN);
  row(
    `Darvaze NATS + PostgreSQL: two nodes ≥ ${TWO_NODE_FACTOR_MIN}× one node`,
    two,
    one,
    TWO_NODE_FACTOR_MIN,
    " (node 2 shares CPU 0 with the load generator and simulator)",
  );
  return lines.join("\n");
}

/** The §6 goals for each gateway measured; "n/a" where the run lacked the workload. */
export function goalsTable(measurements: Measurement[]): string {
  const lines = [
    `| Target | ${GOAL_THROUGHPUT_WORKLOAD} ÷ bare proxy | ${GOAL_LATENCY_WORKLOAD} added p50 vs ceiling | ${GOAL_TTFB_WORKLOAD} TTFB p50 added vs ceiling |`,
    "|---|---|---|---|",
  ];
  for (const goal of goals) {
    const target = measurements.find((m) => m.target.startsWith(goal.target))?.target;
    if (!target) continue;
    const get = (workload: string, name: string) => find(measurements, name, workload);
    const share = (() => {
      const gw = get(GOAL_THROUGHPUT_WORKLOAD, target);
      const bare = get(GOAL_THROUGHPUT_WORKLOAD, BARE);
      if (!gw || !bare) return "n/a";
      const value = gw.rps / bare.rps;
      return `${ratio(value)} (goal ≥ ${ratio(goal.throughputShareMin)}) ${verdict(value >= goal.throughputShareMin)}`;
    })();
    const added = (() => {
      const gw = get(GOAL_LATENCY_WORKLOAD, target);
      const ceiling = get(GOAL_LATENCY_WORKLOAD, CEILING);
      if (!gw || !ceiling) return "n/a";
      const value = gw.p50Ms - ceiling.p50Ms;
      return `${signedMs(value)} ms (goal ≤ ${goal.addedP50MsMax}) ${verdict(value <= goal.addedP50MsMax)}`;
    })();
    const ttfb = (() => {
      const gw = get(GOAL_TTFB_WORKLOAD, target);
      const ceiling = get(GOAL_TTFB_WORKLOAD, CEILING);
      if (gw?.ttfbP50Ms === undefined || ceiling?.ttfbP50Ms === undefined) return "n/a";
      const value = gw.ttfbP50Ms - ceiling.ttfbP50Ms;
      return `${signedMs(value)} ms (goal ≤ ${goal.ttfbOverheadMsMax}) ${verdict(value <= goal.ttfbOverheadMsMax)}`;
    })();
    lines.push(`| ${target} | ${share} | ${added} | ${ttfb} |`);
  }
  return lines.length > 2 ? lines.join("\n") : "";
}

/** The longest stall of any round of any of `target`'s rows; undefined when none was read. */
function longestStall(measurements: Measurement[], target: string): number | undefined {
  const stalls = measurements
    .filter((m) => m.target === target)
    .map((m) => worst(m, (r) => r.readings?.stallMaxMs))
    .filter((v): v is number => v !== undefined);
  return stalls.length ? Math.max(...stalls) : undefined;
}

/**
 * DESIGN.md §6's tail goals: streams against a bare proxy, the one-connection tail, first byte,
 * stalls. The bare proxy's own longest stall (the same monitor) stands beside each target's: at 64
 * connections a turn of the event loop serves every connection that is ready, so the stall read
 * there grows with the work of a request, the yardstick's too.
 */
export function tailGoalsTable(measurements: Measurement[]): string {
  const lines = [
    "| Target | stream c=64 ÷ bare (goal ≥ 40%) | chat c=1 p99 − bare p99 (goal ≤ +2 ms) | stream c=1 TTFB p50 − bare (goal ≤ +0.3 ms) | longest stall, any row (goal ≤ 5 ms) | the bare proxy's, any row |",
    "|---|---|---|---|---|---|",
  ];
  const bareStall = longestStall(measurements, BARE);
  const targets = [...new Set(measurements.filter((m) => m.target.startsWith("Darvaze")).map((m) => m.target))];
  for (const target of targets) {
    const pair = (workload: string) => ({ gw: find(measurements, target, workload), bare: find(measurements, BARE, workload) });
    const streams = pair("stream c=64");
    const share = streams.gw && streams.bare ? streams.gw.rps / streams.bare.rps : undefined;
    const chat1 = pair("chat c=1");
    const tail = chat1.gw && chat1.bare ? chat1.gw.p99Ms - chat1.bare.p99Ms : undefined;
    const stream1 = pair("stream c=1");
    const ttfb =
      stream1.gw?.ttfbP50Ms !== undefined && stream1.bare?.ttfbP50Ms !== undefined
        ? stream1.gw.ttfbP50Ms - stream1.bare.ttfbP50Ms
        : undefined;
    const stall = longestStall(measurements, target);
    const cell = (value: number | undefined, text: (v: number) => string, ok: (v: number) => boolean) =>
      value === undefined ? "n/a" : `${text(value)} ${verdict(ok(value))}`;
    lines.push(
      `| ${target} | ${cell(share, ratio, (v) => v >= 0.4)} | ${cell(
        tail,
        (v) => `${signedMs(v)} ms`,
        (v) => v <= 2,
      )} | ${cell(
        ttfb,
        (v) => `${signedMs(v)} ms`,
        (v) => v <= 0.3,
      )} | ${cell(
        stall,
        (v) => `${ms(v)} ms`,
        (v) => v <= 5,
      )} | ${bareStall === undefined ? "n/a" : `${ms(bareStall)} ms`} |`,
    );
  }
  return targets.length ? lines.join("\n") : "";
}

/** The limits of the shape (bench/limit-proxy.ts), as bench/targets.ts names them. */
export const LIMIT_BUN = "limit: metering Bun proxy";
export const LIMIT_ELYSIA = "limit: metering Elysia proxy";
export const LIMIT_NATS2 = "limit: metering proxy + 2 NATS hops";

/** DESIGN.md §6: each mode's share of the limit of the same shape, measured in the same run. */
const limitGoals = [
  { target: EMBEDDED, chatOfElysiaMin: 0.5, chatOfTwoHopsMin: null, streamsOfElysiaMin: 0.6 },
  { target: ONE_NODE, chatOfElysiaMin: 0.4, chatOfTwoHopsMin: 1, streamsOfElysiaMin: 0.6 },
] as const;

/**
 * Each Darvaze mode against the limits of its shape (DESIGN.md §6): chat c=64 against the
 * metering Elysia proxy (and, on NATS, the metering proxy with two NATS hops a request), streams
 * c=64 against the Elysia proxy's parsed streams. Every mode's row is printed once a limit ran,
 * each cell with both figures, its goal and its verdict ("n/a" naming what the run lacked); a
 * mode is found by its name's prefix ("Darvaze embedded (PGlite, in-process bus)"); "" when no
 * limit ran.
 */
export function limitGoalsTable(measurements: Measurement[]): string {
  if (!measurements.some((m) => m.target.startsWith("limit: "))) return "";
  const lines = [
    "| Target | chat c=64 ÷ metering Elysia | chat c=64 ÷ metering + 2 NATS hops | stream c=64 ÷ metering Elysia's parsed streams | chat c=64 ÷ metering Bun (no goal) |",
    "|---|---|---|---|---|",
  ];
  const share = (target: string, limit: string, workload: string, min: number | null) => {
    const gw = find(measurements, target, workload);
    const of = find(measurements, limit, workload);
    if (!gw || !of) return `n/a (${gw ? limit : target} ${workload} not measured)`;
    const value = gw.rps / of.rps;
    const figures = `${rate(gw.rps)} ÷ ${rate(of.rps)} = ${ratio(value)}`;
    return min === null ? figures : `${figures} (goal ≥ ${ratio(min)}) ${verdict(value >= min)}`;
  };
  for (const goal of limitGoals) {
    const target = measurements.find((m) => m.target.startsWith(goal.target))?.target ?? goal.target;
    const twoHops = goal.chatOfTwoHopsMin === null ? "—" : share(target, LIMIT_NATS2, "chat c=64", goal.chatOfTwoHopsMin);
    lines.push(
      `| ${target} | ${share(target, LIMIT_ELYSIA, "chat c=64", goal.chatOfElysiaMin)} | ${twoHops} | ${share(target, LIMIT_ELYSIA, "stream c=64", goal.streamsOfElysiaMin)} | ${share(target, LIMIT_BUN, "chat c=64", null)} |`,
    );
  }
  return lines.join("\n");
}

/** Many keys' goals: their req/s at least this share of the hot key's, their p99 at most this many times its. */
const MANY_KEYS_SHARE_MIN = 0.9;
const MANY_KEYS_P99_TIMES_MAX = 2;

/**
 * Many keys at the hot key's speed (issue 31, item 4): the 1,000-keys row against the same
 * target's hot-key row (chat c=64), in req/s and in p99; "" when no target ran both.
 */
export function manyKeysGoalsTable(measurements: Measurement[]): string {
  const lines = [
    `| Target | 1,000 keys ÷ hot key, req/s (goal ≥ ${ratio(MANY_KEYS_SHARE_MIN)}) | 1,000 keys p99 ÷ hot key p99 (goal ≤ ${MANY_KEYS_P99_TIMES_MAX}×) |`,
    "|---|---|---|",
  ];
  for (const target of new Set(measurements.map((m) => m.target))) {
    const many = find(measurements, target, MANY_KEYS);
    const hot = find(measurements, target, "chat c=64");
    if (!many || !hot) continue;
    const share = many.rps / hot.rps;
    const tail = many.p99Ms / hot.p99Ms;
    lines.push(
      `| ${target} | ${ratio(share)} ${verdict(share >= MANY_KEYS_SHARE_MIN)} | ${times(tail)} ${verdict(tail <= MANY_KEYS_P99_TIMES_MAX)} |`,
    );
  }
  return lines.length > 2 ? lines.join("\n") : "";
}

export interface RunInfo {
  startedAt: Date;
  mode: string;
  command: string;
  revision: string;
  pinning: string;
  durations: string;
  machine: string;
  skipped: string[];
}

export function runMarkdown(info: RunInfo, rounds: Measurement[]): string {
  const measurements = combineRounds(rounds);
  const sections = [
    `## ${info.startedAt.toISOString().replace("T", " ").slice(0, 16)} UTC · ${info.mode} · ${info.revision}`,
    [
      `- Command: \`${info.command}\``,
      `- CPU pinning: ${info.pinning}`,
      `- Machine: ${info.machine}`,
      `- Durations: ${info.durations}`,
      ...info.skipped.map((reason) => `- Skipped: ${reason}`),
    ].join("\n"),
    figuresTable(measurements),
    ratiosTable(measurements),
  ];
  const limitLines = limitGoalsTable(measurements);
  if (limitLines) sections.push(`Against the limits of the shape (DESIGN.md §6, the median round):\n\n${limitLines}`);
  const goalLines = goalsTable(measurements);
  if (goalLines) sections.push(`DESIGN.md §6 goals:\n\n${goalLines}`);
  const tailLines = tailGoalsTable(measurements);
  if (tailLines) sections.push(`Tail goals (DESIGN.md §6: the median round, the longest stall of any round):\n\n${tailLines}`);
  const manyKeysLines = manyKeysGoalsTable(measurements);
  if (manyKeysLines) sections.push(`Many keys (the median round of each row):\n\n${manyKeysLines}`);
  const scaleLines = scaleGoalsTable(measurements);
  if (scaleLines) sections.push(`Goals against the peer and for scaling out:\n\n${scaleLines}`);
  return `${sections.join("\n\n")}\n`;
}

export const resultsHeader = `# Benchmark results

Loopback only, on a 2-core machine: the load generator (wrk for non-streaming chat, \`bench/sse-client.ts\`
for streams) and the upstream simulator share CPU 0; the gateway or proxy under test runs on CPU 1.
Each run measures, side by side, the simulator directly (the ceiling), a bare Bun proxy
(\`bench/bare-proxy.ts\`), a peer gateway (Portkey's open-source gateway 1.15.2 on Node, from
\`bench/peers/\`, installed there with \`npm ci\` on first use), Darvaze embedded (PGlite, in-process
bus) and Darvaze on NATS + PostgreSQL with one node and with two, so ratios are only compared within a run.
Every request uses one hot key, except the "1,000 keys" run on Darvaze embedded (chat c=64, keys
taken round-robin per request, all on one funded account). Two nodes share the database, NATS
subjects and secrets; node 1 runs on CPU 1 and node 2 on CPU 0 (with the load generator: there
is no third CPU), each fed half the connections by its own wrk (req/s summed, the worse p50/p99).

    apt-get install -y wrk            # once
    bun run bench                     # full: chat c=1/64/256, stream c=1/64, 8 s each, 3 rounds (~35 min)
    bun run bench -- --quick          # 2 s each, chat and stream at c=1 and c=64 (+ 1,000 keys), 3 rounds
    bun run bench -- --rounds 5       # any mode: rounds of every target, taken in turn (default 3)
    bun run bench -- --only bare --only embedded   # only the targets whose label contains a word
    bun run bench -- --profile        # embedded gateway under bun --cpu-prof, chat c=64 and stream c=64; profile in bench/out/

Non-streaming: \`gpt-4o-mini\`, one short message, \`max_tokens: 16\`. Streaming: 64 content chunks
(\`max_tokens: 64\`, \`stream: true\`); p50/p99 is the whole stream, TTFB the first body byte, and a
stream that does not end with \`data: [DONE]\` counts as an error. req/s counts successful replies
only (wrk's latency percentiles include failed ones). PostgreSQL and NATS come from
\`BENCH_DATABASE_URL\`/\`DATABASE_URL\` and \`NATS_URL\` (defaults: local postgres, nats://127.0.0.1:4222);
they are system services and are not pinned.

`;

/** Appends one run to `path`, creating the file with its header first. */
export function appendResults(path: string, markdown: string): void {
  if (!existsSync(path)) writeFileSync(path, resultsHeader);
  appendFileSync(path, `\n${markdown}`);
}
