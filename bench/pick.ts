/**
 * `bun run bench:pick`: the cost of one routing decision and the traffic share it produces.
 *
 *   1. µs per pick with 8 backends (warm estimates, in-flight counts, breakers all closed),
 *      the pool actor's `pick` alone: no HTTP.
 *   2. The skewed-latency scenario: 8 simulators with 20 to 300 ms to the first token, started
 *      cold; after a warm-up, the share of requests each backend serves (non-stream chats
 *      through the pool actor, `--workers` at a time).
 *
 * Prints a markdown table.
 *
 *   bun run bench:pick [-- --picks 1000000] [--requests 1000] [--workers 4]
 */
import { parseArgs } from "node:util";
import { PoolActor, type ChatOutcome } from "../actors/pool/pool.ts";
import type { BackendConfig } from "../src/config.ts";
import { startSimulator } from "../src/sim/server.ts";

const { values } = parseArgs({
  options: {
    picks: { type: "string", default: "1000000" },
    requests: { type: "string", default: "1000" },
    workers: { type: "string", default: "4" },
  },
});
const PICKS = Math.min(100_000_000, Math.max(1_000, Number(values.picks)));
const REQUESTS = Math.min(100_000, Math.max(10, Number(values.requests)));
const WORKERS = Math.min(256, Math.max(1, Number(values.workers)));
const WARMUP_REQUESTS = Math.max(10, Math.round(REQUESTS / 5));
const TTFTS_MS = [20, 60, 100, 140, 180, 220, 260, 300];

const config = (name: string, url: string): BackendConfig => ({
  name,
  kind: "openai",
  url,
  region: "in-country",
  weight: 1,
  concurrency_max: 10_000,
});

function pickCost(): { usPerPick: number; picks: number } {
  const pool = new PoolActor(
    "m",
    TTFTS_MS.map((_, i) => config(`b${i}`, `http://b${i}.invalid/v1`)),
    { upstreamTimeoutMs: 10_000 },
  );
  const now = performance.now();
  pool.backends.forEach((b, i) => {
    b.observe({ ttftMs: TTFTS_MS[i]!, outputTokens: 16, durationMs: TTFTS_MS[i]! + 150 }, now);
    b.inFlight = i % 3;
  });
  const none = new Set<never>();
  for (let i = 0; i < 10_000; i++) pool.pick(none, undefined, 256); // JIT warm-up
  const started = Bun.nanoseconds();
  let sink = 0;
  for (let i = 0; i < PICKS; i++) sink += pool.pick(none, undefined, 256)!.inFlight;
  const elapsedNs = Bun.nanoseconds() - started;
  if (sink < 0) console.log(sink);
  return { usPerPick: elapsedNs / 1_000 / PICKS, picks: PICKS };
}

async function skewedShares(): Promise<{ counts: number[]; seconds: number }> {
  const sims = await Promise.all(TTFTS_MS.map((ttftMs) => startSimulator({ ttftMs, outputTokens: 4 })));
  try {
    const pool = new PoolActor(
      "m",
      sims.map((s, i) => config(`b${i}`, `${s.url}/v1`)),
      { upstreamTimeoutMs: 30_000 },
    );
    const body = { model: "m", messages: [{ role: "user", content: "Hello" }] };
    const load = async (requests: number) => {
      const counts = new Array<number>(TTFTS_MS.length).fill(0);
      let next = 0;
      const worker = async () => {
        while (next < requests) {
          next++;
          const outcome = await pool.chat({ body, stream: false, maxTokens: 4, requestId: `r${next}`, created: 0 });
          if (outcome.kind !== "json")
            throw new Error(`a request failed: ${JSON.stringify((outcome as Extract<ChatOutcome, { kind: "failed" }>).failure)}`);
          counts[Number(outcome.backend.name.slice(1))]!++;
        }
      };
      await Promise.all(Array.from({ length: WORKERS }, worker));
      return counts;
    };
    await load(WARMUP_REQUESTS);
    const started = performance.now();
    const counts = await load(REQUESTS);
    return { counts, seconds: (performance.now() - started) / 1000 };
  } finally {
    await Promise.all(sims.map((s) => s.stop()));
  }
}

const pick = pickCost();
const shares = await skewedShares();
const pct = (n: number) => `${((n / REQUESTS) * 100).toFixed(1)}%`;
console.log(`## Routing decision (bench/pick.ts, ${new Date().toISOString()})\n`);
console.log("| What | Value |\n|---|---|");
console.log(`| µs per pick, 8 backends (${pick.picks.toLocaleString("en")} picks) | ${pick.usPerPick.toFixed(3)} |`);
console.log(
  `| Share of the two fastest (20, 60 ms), ${REQUESTS} requests after ${WARMUP_REQUESTS} warm-up, ${WORKERS} at a time | ${pct(shares.counts[0]! + shares.counts[1]!)} |`,
);
console.log(`| Duration of the measured requests | ${shares.seconds.toFixed(1)} s |\n`);
console.log(`| Backend TTFT | ${TTFTS_MS.map((ms) => `${ms} ms`).join(" | ")} |`);
console.log(`|---|${TTFTS_MS.map(() => "---").join("|")}|`);
console.log(`| Share | ${shares.counts.map(pct).join(" | ")} |`);
