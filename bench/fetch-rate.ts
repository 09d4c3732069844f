/**
 * `bun run bench/fetch-rate.ts [--rounds 2]`: what one upstream `fetch` costs a process on one core
 * at the rate its own work allows. A bare program on the server CPU (as the gateway runs in
 * `bun run bench`) keeps 64 fetches in flight to the simulator (on the load CPU), each made as the
 * gateway makes it (an AbortController, a 120 s timer, `redirect: "manual"`, the reply read whole),
 * and spends `busy` µs of its own work (a spin) before each: 0, then as much as a request of the
 * metering proxy, then of Darvaze. It prints the process's CPU per fetch less the spin, every thread
 * (a lower bound: the spin is wall time, and on one core the HTTP client thread's work during it is
 * taken off with it), and the fetches a second: Bun's HTTP client thread takes each wake-up's sockets
 * together, so the fewer fetches a second, the more each costs.
 */
import { parseArgs } from "node:util";
import { countFlag } from "./flags.ts";
import { benchChatBody } from "./measurement.ts";
import { runBenchmark, SERVER_CPU } from "./procs.ts";
import { ROOT, startSimulator } from "./targets.ts";

const { values: flags } = parseArgs({
  args: process.argv.slice(2),
  strict: true,
  options: {
    rounds: { type: "string", default: "2" },
    /** Internal: run as the measured program against this simulator, with this much work a fetch. */
    child: { type: "string" },
    "busy-us": { type: "string", default: "0" },
  },
});

/** Fetches in flight at once, as the gateway's at 64 connections. */
const IN_FLIGHT = 64;
/** Each in-flight slot's fetches before measuring (warm-up) and measured. */
const WARMUP_EACH = 100;
const MEASURED_EACH = 500;
/** The work a fetch, µs: none, then from about the metering proxy's request to about Darvaze's (bench/RESULTS.md, the cost ledger). */
const BUSY_US = [0, 25, 50, 100];

async function measure(url: string, busyUs: number): Promise<void> {
  const body = benchChatBody();
  let sent = 0;
  const spin = () => {
    const endMs = performance.now() + busyUs / 1000;
    while (performance.now() < endMs) {}
  };
  const once = async () => {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), 120_000);
    const response = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      body,
      headers: { "content-type": "application/json", authorization: "Bearer bench", "x-request-id": `req_${++sent}` },
      redirect: "manual",
      signal: controller.signal,
    });
    await response.arrayBuffer();
    clearTimeout(timer);
  };
  const slots = (each: number) =>
    Promise.all(
      Array.from({ length: IN_FLIGHT }, async () => {
        for (let i = 0; i < each; i++) {
          if (busyUs > 0) spin();
          await once();
        }
      }),
    );
  await slots(WARMUP_EACH);
  const cpuBefore = process.cpuUsage();
  const startedMs = performance.now();
  await slots(MEASURED_EACH);
  const seconds = (performance.now() - startedMs) / 1000;
  const cpu = process.cpuUsage(cpuBefore);
  const fetches = IN_FLIGHT * MEASURED_EACH;
  // The spin is wall time: on one core, part of it is other threads' CPU, taken off with it (a lower bound).
  const spinUs = fetches * busyUs;
  console.log(
    JSON.stringify({
      busyUs,
      fetchesPerS: fetches / seconds,
      allThreadsUs: (cpu.user + cpu.system - spinUs) / fetches,
    }),
  );
}

if (flags.child) {
  await measure(flags.child, Number(flags["busy-us"]));
  process.exit(0);
}

await runBenchmark({ name: "bench/fetch-rate.ts", runSMax: 600 }, async () => {
  const rounds = countFlag(flags.rounds, { fallback: 2, max: 10 });
  const sim = await startSimulator({ outputTokens: 16 });
  const rows: { busyUs: number; fetchesPerS: number; allThreadsUs: number }[] = [];
  try {
    for (let round = 1; round <= rounds; round++) {
      for (const busyUs of BUSY_US) {
        const child = Bun.spawn(
          ["taskset", "-c", String(SERVER_CPU), "bun", `${ROOT}/bench/fetch-rate.ts`, "--child", sim.url, "--busy-us", String(busyUs)],
          { stdout: "pipe", stderr: "inherit", env: { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "16384" } },
        );
        const out = await new Response(child.stdout).text();
        if ((await child.exited) !== 0) throw new Error(`the measured program failed (busy ${busyUs} µs)`);
        const row = JSON.parse(out.trim().split("\n").at(-1)!);
        rows.push(row);
        console.error(
          `[round ${round}] busy ${busyUs} µs: ${Math.round(row.fetchesPerS)} fetches/s, ${row.allThreadsUs.toFixed(1)} µs a fetch`,
        );
      }
    }
  } finally {
    await sim.stop();
  }
  const lines = [
    `A fetch's CPU against the rate (\`bun run bench/fetch-rate.ts --rounds ${rounds}\`; ${IN_FLIGHT} in flight, one core; the spin taken off):`,
    "",
    "| Own work a fetch (µs) | fetches/s | CPU a fetch, every thread, at least (µs) |",
    "|---:|---:|---:|",
    ...rows.map((r) => `| ${r.busyUs} | ${Math.round(r.fetchesPerS).toLocaleString("en-US")} | ${r.allThreadsUs.toFixed(1)} |`),
  ];
  console.log(lines.join("\n"));
});
