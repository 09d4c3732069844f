/**
 * Turns one run's measurements into markdown: the figures, the ratios of each gateway to the
 * bare proxy and to the ceiling from the same run, and the DESIGN.md §6 goals they are held to.
 */
import { appendFileSync, existsSync, writeFileSync } from "node:fs";
import type { Measurement } from "./measurement.ts";

export const CEILING = "simulator (ceiling)";
export const BARE = "bare Bun proxy";

/** DESIGN.md §6, per gateway target name prefix. */
const goals = [
  { target: "Darvaze embedded", throughputShareMin: 0.6, addedP50MsMax: 0.3, ttfbOverheadMsMax: 1 },
  { target: "Darvaze NATS", throughputShareMin: 0.5, addedP50MsMax: 0.5, ttfbOverheadMsMax: 1 },
];
const GOAL_THROUGHPUT_WORKLOAD = "chat c=64";
const GOAL_LATENCY_WORKLOAD = "chat c=1";
const GOAL_TTFB_WORKLOAD = "stream c=1";

const ms = (value: number | undefined) => (value === undefined || Number.isNaN(value) ? "—" : value < 10 ? value.toFixed(2) : value.toFixed(1));
const rate = (value: number) => (value >= 100 ? Math.round(value).toLocaleString("en-US") : value.toFixed(1));
const ratio = (value: number | undefined) => (value === undefined || !Number.isFinite(value) ? "—" : `${(value * 100).toFixed(0)}%`);
const signedMs = (value: number | undefined) => (value === undefined || Number.isNaN(value) ? "—" : `${value >= 0 ? "+" : ""}${value.toFixed(2)}`);

export function figuresTable(measurements: Measurement[]): string {
  const lines = [
    "| Target | Workload | req/s | p50 ms | p99 ms | TTFB p50 ms | TTFB p99 ms | Errors |",
    "|---|---|---:|---:|---:|---:|---:|---:|",
  ];
  for (const m of measurements) {
    const errors = m.errors > 0 ? `**${m.errors}** (${m.errorDetail ?? ""})` : "0";
    lines.push(`| ${m.target} | ${m.workload} | ${rate(m.rps)} | ${ms(m.p50Ms)} | ${ms(m.p99Ms)} | ${ms(m.ttfbP50Ms)} | ${ms(m.ttfbP99Ms)} | ${errors} |`);
  }
  return lines.join("\n");
}

function find(measurements: Measurement[], target: string, workload: string): Measurement | undefined {
  return measurements.find((m) => m.target === target && m.workload === workload);
}

/** Every non-ceiling target against the bare proxy and the ceiling, workload by workload. */
export function ratiosTable(measurements: Measurement[]): string {
  const lines = [
    "| Target | Workload | req/s ÷ bare proxy | req/s ÷ ceiling | p50 added vs ceiling ms | TTFB p50 added vs ceiling ms |",
    "|---|---|---:|---:|---:|---:|",
  ];
  for (const m of measurements) {
    if (m.target === CEILING) continue;
    const bare = find(measurements, BARE, m.workload);
    const ceiling = find(measurements, CEILING, m.workload);
    const ttfbAdded = m.ttfbP50Ms !== undefined && ceiling?.ttfbP50Ms !== undefined ? m.ttfbP50Ms - ceiling.ttfbP50Ms : undefined;
    lines.push(
      `| ${m.target} | ${m.workload} | ${m.target === BARE ? "—" : ratio(bare && m.rps / bare.rps)} | ${ratio(ceiling && m.rps / ceiling.rps)} | ${signedMs(ceiling && m.p50Ms - ceiling.p50Ms)} | ${signedMs(ttfbAdded)} |`,
    );
  }
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
  return sections.join("\n\n") + "\n";
}

export const resultsHeader = `# Benchmark results

Loopback only, on a 2-core machine: the load generator (wrk for non-streaming chat, \`bench/sse-client.ts\`
for streams) and the upstream simulator share CPU 0; the gateway or proxy under test runs on CPU 1.
Each run measures, side by side, the simulator directly (the ceiling), a bare Bun proxy
(\`bench/bare-proxy.ts\`), Darvaze embedded (PGlite, in-process bus) and Darvaze on NATS + PostgreSQL
(one node), so ratios are only compared within a run.

    apt-get install -y wrk            # once
    bun run bench                     # full: chat c=1/64/256, stream c=1/64, ~10 s each (~5 min)
    bun run bench -- --quick          # 2 s each, chat c=64 and stream c=64 only
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
