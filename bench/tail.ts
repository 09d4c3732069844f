/**
 * `bun run bench/tail.ts [--mode embedded|nats-pg|bare] [--seconds 10] [--stream] [--summary]`: where the slow
 * requests of one connection come from. One client sends requests one after the other (no
 * coordinated-omission correction, unlike wrk's percentiles) and lists every request slower than
 * `--slow-ms`, with the time it started, so a pause can be matched with what the gateway did then,
 * and how long each of the gateway's threads ran and waited for the CPU meanwhile (threads.ts).
 * `--env NAME=value` (repeatable) sets the gateway's environment, to see what a setting changes;
 * `--warmup` sets the seconds of requests before the measured ones; `--burst-seconds` first sends
 * BURST_CLIENTS connections of requests with ~16 KB prompts for that long, so the measured seconds
 * are the ones right after a burst (what the gateway's collector does then); `--gateway-root <dir>`
 * runs another checkout's gateway (an older release) against this one's simulator. The gateway runs pinned to
 * CPU 1 as in `bun run bench`; this client, the simulator, and with `--mode nats-pg` nats-server
 * and PostgreSQL, on CPU 0.
 */
import { join } from "node:path";
import { parseArgs } from "node:util";
import { envFlags } from "./flags.ts";
import { installExitHandlers, LOAD_CPU, onInterrupt, pinSelf } from "./procs.ts";
import { pinServices } from "./services-cpu.ts";
import { servicesDefaults, startBareProxy, startDarvaze, startSimulator } from "./targets.ts";
import { startThreadTimes } from "./threads.ts";
import { benchChatBody } from "./measurement.ts";

const { values: flags } = parseArgs({
  args: process.argv.slice(2),
  strict: true,
  options: {
    /** embedded, nats-pg, or bare (the bare Bun proxy, for comparison). */
    mode: { type: "string", default: "embedded" },
    seconds: { type: "string", default: "10" },
    /** Seconds of requests before the measured ones (the JIT compiles the hot path meanwhile). */
    warmup: { type: "string", default: "2" },
    "slow-ms": { type: "string", default: "3" },
    stream: { type: "boolean", default: false },
    /** Run the gateway under `bun --cpu-prof`; the profile goes to bench/out/. */
    profile: { type: "boolean", default: false },
    /** `NAME=value` for the gateway's environment (repeatable): to see what a setting changes. */
    env: { type: "string", multiple: true, default: [] },
    /** Seconds of a burst (BURST_CLIENTS at once, ~16 KB prompts) before the warm-up; 0: none. */
    "burst-seconds": { type: "string", default: "0" },
    /** Print only the summary, not every slow request. */
    summary: { type: "boolean", default: false },
    /** Another checkout whose `src/main.ts` is measured (bench/run.ts has the same flag). */
    "gateway-root": { type: "string" },
  },
});
const mode = flags.mode === "nats-pg" || flags.mode === "bare" ? flags.mode : "embedded";
const seconds = Math.min(120, Math.max(1, Number(flags.seconds)));
const slowMs = Number(flags["slow-ms"]);

installExitHandlers();
pinSelf();
// As in `bun run bench`: nats-server and PostgreSQL on the load CPU while it runs.
const services = mode === "nats-pg" ? pinServices(LOAD_CPU) : null;
if (services) onInterrupt(() => services.restore());
const sim = await startSimulator({ outputTokens: 64 });
const gateway =
  mode === "bare"
    ? await startBareProxy(sim.url)
    : await startDarvaze({
        mode,
        upstreamUrl: sim.url,
        services: servicesDefaults,
        env: envFlags(flags.env, "bench/tail.ts"),
        readyTimeoutMs: 90_000, // a busy machine starts the embedded database slowly
        ...(flags["gateway-root"] ? { root: flags["gateway-root"] } : {}),
        ...(flags.profile ? { cpuProfile: { dir: join(import.meta.dir, "out"), name: `tail-${mode}.cpuprofile` } } : {}),
      });
const body = benchChatBody({ stream: flags.stream });
const headers = { authorization: `Bearer ${gateway.key}`, "content-type": "application/json" };

/** Connections of the burst: the concurrency of `bun run bench`'s c=64 rows. */
const BURST_CLIENTS = 64;
const burstBody = JSON.stringify({
  model: "gpt-4o-mini",
  messages: [{ role: "user", content: "Summarise this. ".repeat(1_000) }],
  max_tokens: 64,
});

async function once(requestBody = body): Promise<void> {
  const response = await fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers, body: requestBody });
  await response.arrayBuffer();
  if (!response.ok) throw new Error(`status ${response.status}`);
}

try {
  const burstUntil = performance.now() + Number(flags["burst-seconds"]) * 1000;
  let burstRequests = 0;
  const burstClient = async () => {
    while (performance.now() < burstUntil) {
      await once(burstBody);
      burstRequests++;
    }
  };
  await Promise.all(Array.from({ length: BURST_CLIENTS }, burstClient));
  if (burstRequests > 0) console.log(`burst: ${burstRequests} requests from ${BURST_CLIENTS} connections in ${flags["burst-seconds"]} s`);
  const warmUntil = performance.now() + Number(flags.warmup) * 1000;
  while (performance.now() < warmUntil) await once();
  const latencies: number[] = [];
  const slow: { atMs: number; ms: number }[] = [];
  const threadTimes = gateway.pid ? startThreadTimes(gateway.pid) : null;
  const started = performance.now();
  const until = started + seconds * 1000;
  while (performance.now() < until) {
    const t0 = performance.now();
    await once();
    const ms = performance.now() - t0;
    latencies.push(ms);
    if (ms > slowMs) slow.push({ atMs: t0 - started, ms });
  }
  const threads = threadTimes?.() ?? [];
  const firstMs = latencies[0]!;
  latencies.sort((a, b) => a - b);
  const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))]!.toFixed(2);
  const slowTotal = slow.reduce((t, s) => t + s.ms, 0);
  console.log(`the first measured request: ${firstMs.toFixed(1)} ms`);
  console.log(
    `${mode}${flags.stream ? " stream" : ""}: ${latencies.length} requests in ${seconds} s; p50 ${at(0.5)} p90 ${at(0.9)} p99 ${at(0.99)} p99.9 ${at(0.999)} max ${at(1)} ms`,
  );
  console.log("the gateway's threads while measured: ms running, ms ready but waiting for the CPU");
  for (const t of threads) console.log(`  ${t.name.padEnd(20)} ${t.runMs.toFixed(0).padStart(6)} ${t.waitMs.toFixed(0).padStart(6)}`);
  console.log(`${slow.length} slower than ${slowMs} ms, ${slowTotal.toFixed(0)} ms in all${flags.summary ? "" : ":"}`);
  if (!flags.summary) for (const s of slow) console.log(`  at ${(s.atMs / 1000).toFixed(3)} s: ${s.ms.toFixed(1)} ms`);
  if (gateway.adminToken) {
    const metrics = await (await fetch(`${gateway.url}/metrics`, { headers: { authorization: `Bearer ${gateway.adminToken}` } })).text();
    for (const line of metrics.split("\n")) if (/^darvaze_(gc_forced|event_loop_stall)/.test(line)) console.log(line);
  }
} finally {
  await gateway.stop();
  await sim.stop();
  services?.restore();
}
process.exit(0);
