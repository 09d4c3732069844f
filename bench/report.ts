/**
 * Turns one run's measurements into markdown: the figures, the ratios of each gateway to the
 * bare proxy, the peer gateway and the ceiling from the same run, and the goals they are held to.
 */
import { appendFileSync, existsSync, writeFileSync } from "node:fs";
import type { Measurement } from "./measurement.ts";

export const CEILING = "simulator (ceiling)";
export const BARE = "bare Bun proxy";
export const PEER = "Portkey gateway 1.15.2 (Node)";
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
const signedMs = (value: number | undefined) =>
  value === undefined || Number.isNaN(value) ? "—" : `${value >= 0 ? "+" : ""}${value.toFixed(2)}`;

export function figuresTable(measurements: Measurement[]): string {
  const lines = [
    "| Target | Workload | req/s | p50 ms | p99 ms | TTFB p50 ms | TTFB p99 ms | Errors |",
    "|---|---|---:|---:|---:|---:|---:|---:|",
  ];
  for (const m of measurements) {
    const errors = m.errors > 0 ? `**${m.errors}** (${m.errorDetail ?? ""})` : "0";
    lines.push(
      `| ${m.target} | ${m.workload} | ${rate(m.rps)} | ${ms(m.p50Ms)} | ${ms(m.p99Ms)} | ${ms(m.ttfbP50Ms)} | ${ms(m.ttfbP99Ms)} | ${errors} |`,
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

/** The goals against the peer and for scaling out, on chat c=64 req/s; "" when neither was measured. */
export function scaleGoalsTable(measurements: Measurement[]): string {
  const lines = ["| Goal | Measured (chat c=64 req/s) | Verdict |", "|---|---|---|"];
  const byPrefix = (prefix: string) => measurements.find((m) => m.target.startsWith(prefix) && m.workload === GOAL_THROUGHPUT_WORKLOAD);
  const row = (goal: string, a: Measurement | undefined, b: Measurement | undefined, min: number, note = "") => {
    if (!a || !b) return lines.push(`| ${goal} | n/a (${a ? (b?.target ?? "baseline") : "target"} not measured) | — |`);
    const value = a.rps / b.rps;
    return lines.push(`| ${goal} | ${rate(a.rps)} ÷ ${rate(b.rps)} = ${times(value)} | ${value >= min ? "✓" : "✗"}${note} |`);
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
  const verdict = (ok: boolean) => (ok ? "✓" : "✗");
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

export function runMarkdown(info: RunInfo, measurements: Measurement[]): string {
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
  const goalLines = goalsTable(measurements);
  if (goalLines) sections.push(`DESIGN.md §6 goals:\n\n${goalLines}`);
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
    bun run bench                     # full: chat c=1/64/256, stream c=1/64, ~10 s each (~8 min)
    bun run bench -- --quick          # 2 s each, chat c=64 and stream c=64 only (+ 1,000 keys)
    bun run bench -- --profile        # embedded gateway under bun --cpu-prof, chat c=64; profile in bench/out/

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
