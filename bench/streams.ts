/**
 * `bun run bench:streams`: what a stream costs in the gateway.
 *
 *   1. TTFB overhead: time to the first body byte through Darvaze (embedded) minus the same
 *      against the simulator directly, p50 and p99, at 1 and 64 concurrent streams.
 *   2. RSS per open stream: the gateway's resident memory with N slow streams open (the
 *      simulator sends a token a second; clients read as it comes) minus before, divided by N,
 *      at 2,000 and 8,000 streams. Each stream holds two sockets in the gateway, so the command
 *      raises the file limit first (`ulimit -n 20000`).
 *   3. Relay throughput: chunks per second relayed by the gateway pinned to one core.
 *
 * The gateway runs on the server CPU; simulators, clients and this runner on the load CPU.
 * Figures are appended to bench/RESULTS.md, except with `--check` (tiny numbers, a smoke test).
 *
 *   bun run bench:streams                       # full: 10 s TTFB runs, 2,000 and 8,000 streams
 *   bun run bench:streams -- --check            # seconds, 50 streams: does it run?
 *   bun run bench:streams -- --parts rss        # only some of ttfb, relay, rss
 */
import { appendFileSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { installExitHandlers, pinSelf, stopAll } from "./procs.ts";
import { openRawStreams } from "./raw-streams.ts";
import { runSseClient } from "./sse-client.ts";
import { cpuTicks, forcedCollections, TICKS_PER_S } from "./readings.ts";
import { servicesDefaults, servicesUnavailable, startBareProxy, startDarvaze, startSimulator, type Target } from "./targets.ts";

const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: {
    check: { type: "boolean", default: false },
    streams: { type: "string" },
    "ttfb-seconds": { type: "string" },
    "relay-seconds": { type: "string" },
    parts: { type: "string", default: "ttfb,relay,rss" },
    /** How long the slow streams stay open while memory is read (default 30 s). */
    "hold-seconds": { type: "string" },
    /** The gateway whose memory is read: nats-pg (default, when reachable) or embedded (the newcomer's default). */
    mode: { type: "string" },
  },
});
const CHECK = values.check;
const STREAM_COUNTS = (values.streams ?? (CHECK ? "50" : "2000,8000")).split(",").map(Number);
const TTFB_MS = Number(values["ttfb-seconds"] ?? (CHECK ? 1 : 10)) * 1000;
const RELAY_MS = Number(values["relay-seconds"] ?? (CHECK ? 1 : 10)) * 1000;
const WARMUP_MS = CHECK ? 200 : 2_000;
/** Longest wait for every slow stream to be answered before memory is read. */
const ANSWER_WAIT_MS_MAX = CHECK ? 5_000 : 60_000;
/** Memory is read once a second for this long with the streams open (mean and peak reported). */
const SAMPLE_MS = Number(values["hold-seconds"] ?? (CHECK ? 2 : 30)) * 1000;
/** The window at each end of the hold whose mean RSS is compared: flat memory has the same at both. */
const EDGE_SAMPLES = Math.max(1, Math.min(30, Math.floor(SAMPLE_MS / 1000 / 4)));

installExitHandlers();
pinSelf();

function rssBytes(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = Number(/VmRSS:\s+(\d+)\s+kB/.exec(status)?.[1] ?? NaN);
  return kb * 1024;
}

/** A backend that sends a token a second: its streams stay open while memory is read. */
const slowSimulator = () => startSimulator({ outputTokens: 3600, itlMs: 1000, label: "slow simulator" });

async function rssPerStream(lines: string[]): Promise<void> {
  const sim = await slowSimulator();
  // As in production: PostgreSQL and NATS when reachable (no embedded database in the heap).
  const unavailable =
    values.mode === "embedded" ? "asked for the embedded gateway (--mode embedded)" : await servicesUnavailable(servicesDefaults);
  const mode = unavailable ? "embedded" : "nats-pg";
  if (unavailable) console.error(`rss: ${unavailable}; measuring the embedded gateway`);
  const gateway = await startDarvaze({
    mode,
    upstreamUrl: sim.url,
    readyTimeoutMs: 90_000, // a busy machine starts the embedded database slowly
    ...(mode === "nats-pg" ? { services: servicesDefaults } : {}),
  });
  const bare = await startBareProxy(sim.url);
  try {
    for (const [name, target] of [
      [`Darvaze (${mode})`, gateway],
      ["bare Bun proxy", bare],
    ] as const)
      for (const count of STREAM_COUNTS) {
        const warm = await openRawStreams(target, 20);
        await Bun.sleep(1_000);
        warm.close();
        await Bun.sleep(1_000);
        Bun.gc(true);
        const before = rssBytes(target.pid!);
        const streams = await openRawStreams(target, count);
        const openedMs = performance.now();
        while (streams.ok() < count && performance.now() - openedMs < ANSWER_WAIT_MS_MAX) await Bun.sleep(250);
        const answeredS = (performance.now() - openedMs) / 1000;
        const gcBefore = await forcedCollections(target);
        const samples: number[] = [];
        for (let waited = 0; waited < SAMPLE_MS; waited += 1_000) {
          await Bun.sleep(1_000);
          samples.push(rssBytes(target.pid!));
        }
        const gcAfter = await forcedCollections(target);
        const open = streams.ok();
        const mean = samples.reduce((a, b) => a + b, 0) / samples.length;
        const peak = Math.max(...samples);
        const kib = (rss: number) => ((rss - before) / Math.max(1, open) / 1024).toFixed(1);
        const meanOf = (part: number[]) => part.reduce((a, b) => a + b, 0) / part.length;
        const firstMiB = (meanOf(samples.slice(0, EDGE_SAMPLES)) / 2 ** 20).toFixed(1);
        const lastMiB = (meanOf(samples.slice(-EDGE_SAMPLES)) / 2 ** 20).toFixed(1);
        const collections = gcAfter.count - gcBefore.count;
        const pauseMs = collections > 0 ? ((gcAfter.pauseS - gcBefore.pauseS) * 1000) / collections : 0;
        const full = gcAfter.full - gcBefore.full;
        lines.push(
          `| ${name} | ${count} | ${open} (${answeredS.toFixed(1)} s) | ${(before / 2 ** 20).toFixed(1)} | ${(mean / 2 ** 20).toFixed(1)} / ${(peak / 2 ** 20).toFixed(1)} | ${kib(mean)} / ${kib(peak)} | ${firstMiB} → ${lastMiB} | ${collections} × ${pauseMs.toFixed(0)} ms (${full} full) |`,
        );
        console.error(`rss: ${name}, ${count} streams (${open} answered 200): ${kib(mean)} KiB each (mean), ${kib(peak)} KiB (peak)`);
        streams.close();
        await Bun.sleep(CHECK ? 1_000 : 5_000);
      }
  } finally {
    await bare.stop();
    await gateway.stop();
    await sim.stop();
  }
}

async function ttfbOverhead(lines: string[]): Promise<void> {
  const sim = await startSimulator({ outputTokens: 64 });
  const gateway = await startDarvaze({ mode: "embedded", upstreamUrl: sim.url });
  try {
    for (const concurrency of [1, 64]) {
      const run = (target: Target) =>
        runSseClient({ target, workload: `stream c=${concurrency}`, concurrency, durationMs: TTFB_MS, warmupMs: WARMUP_MS });
      const direct = await run(sim);
      const through = await run(gateway);
      const p50 = (through.ttfbP50Ms ?? NaN) - (direct.ttfbP50Ms ?? NaN);
      const p99 = (through.ttfbP99Ms ?? NaN) - (direct.ttfbP99Ms ?? NaN);
      lines.push(
        `| ${concurrency} | ${direct.ttfbP50Ms?.toFixed(3)} / ${direct.ttfbP99Ms?.toFixed(3)} | ${through.ttfbP50Ms?.toFixed(3)} / ${through.ttfbP99Ms?.toFixed(3)} | ${p50.toFixed(3)} | ${p99.toFixed(3)} | ${through.errors} |`,
      );
      console.error(`ttfb c=${concurrency}: overhead p50 ${p50.toFixed(3)} ms, p99 ${p99.toFixed(3)} ms`);
    }
  } finally {
    await gateway.stop();
    await sim.stop();
  }
}

async function relayThroughput(lines: string[]): Promise<void> {
  const tokens = 2_000;
  const sim = await startSimulator({ outputTokens: tokens });
  const gateway = await startDarvaze({ mode: "embedded", upstreamUrl: sim.url });
  const body = JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Go." }], stream: true, max_tokens: tokens });
  const marker = new TextEncoder().encode("data: ")[0]!; // 'd' starting a line: counted as a frame
  try {
    let chunks = 0;
    let streams = 0;
    const ticksBefore = cpuTicks([gateway.pid!]);
    const deadline = performance.now() + RELAY_MS;
    const startedMs = performance.now();
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (performance.now() < deadline) {
          const response = await fetch(`${gateway.url}/v1/chat/completions`, {
            method: "POST",
            headers: { authorization: `Bearer ${gateway.key}`, "content-type": "application/json" },
            body,
          });
          let previous = 10; // '\n'
          for await (const part of response.body!) {
            for (let i = 0; i < part.length; i++) {
              if (part[i] === marker && previous === 10) chunks++;
              previous = part[i]!;
            }
          }
          streams++;
        }
      }),
    );
    const rate = chunks / ((performance.now() - startedMs) / 1000);
    const cpuUs = ((cpuTicks([gateway.pid!]) - ticksBefore) / TICKS_PER_S) * 1e6;
    lines.push(`| ${streams} | ${chunks} | ${Math.round(rate)} | ${(cpuUs / Math.max(1, chunks)).toFixed(2)} |`);
    console.error(
      `relay: ${Math.round(rate)} chunks/s over ${streams} streams, ${(cpuUs / Math.max(1, chunks)).toFixed(2)} µs of gateway CPU a chunk`,
    );
  } finally {
    await gateway.stop();
    await sim.stop();
  }
}

const ttfb: string[] = [];
const rss: string[] = [];
const relay: string[] = [];
try {
  const parts = new Set(values.parts!.split(","));
  if (parts.has("ttfb")) await ttfbOverhead(ttfb);
  if (parts.has("relay")) await relayThroughput(relay);
  if (parts.has("rss")) await rssPerStream(rss);
} finally {
  await stopAll();
}

/** A table only when its part ran. */
const table = (header: string, rows: string[]) =>
  rows.length === 0 ? [] : [header, `|${"---|".repeat(header.split("|").length - 2)}`, ...rows, ""];
const text = [
  `\n## Streams — ${new Date().toISOString()}\n`,
  `Command: \`ulimit -n 20000 && bun run bench:streams${Bun.argv.length > 2 ? ` -- ${Bun.argv.slice(2).join(" ")}` : ""}\`; TTFB and relay: Darvaze embedded on the server CPU, simulators and clients on the load CPU. Goals: TTFB overhead p50 < 1 ms; ≤ 64 KiB RSS per open stream.\n`,
  ...table(
    "| Concurrent streams | Simulator TTFB p50 / p99 (ms) | Darvaze TTFB p50 / p99 (ms) | Overhead p50 (ms) | Overhead p99 (ms) | Errors |",
    ttfb,
  ),
  ...table("| Streams relayed | Chunks | Chunks/s (gateway on one core) | Gateway CPU µs a chunk (every thread) |", relay),
  ...(rss.length === 0
    ? []
    : [
        `Slow streams: one token a second each; memory read each second for ${SAMPLE_MS / 1000} s once all were answered; the gateway ${values.mode === "embedded" ? "embedded (--mode embedded)" : "on PostgreSQL + NATS when reachable"}, its memory guard at GC_RSS_GROWTH_MIB=${process.env.GC_RSS_GROWTH_MIB ?? "(default)"}; the bare Bun proxy (no JavaScript per chunk) for reference.`,
        "",
        ...table(
          `| Server | Slow streams opened | Answered 200 (time to all) | RSS before (MiB) | RSS with them open, mean / peak (MiB) | RSS per open stream, mean / peak (KiB) | RSS mean, first → last ${EDGE_SAMPLES} s (MiB) | Guard's collections × mean pause (full ones) |`,
          rss,
        ),
      ]),
].join("\n");
console.log(text);
if (!CHECK) appendFileSync(join(import.meta.dir, "RESULTS.md"), text);
process.exit(0);
