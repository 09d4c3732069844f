/**
 * The balancer against real simulators (HTTP, real latencies), driven through the pool actor:
 * skewed speeds, speeds that change, a saturated backend and bursts. The measured shares are
 * printed; the assertions leave wide margins for a loaded machine.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { PoolActor, type ChatOutcome } from "../actors/pool/pool.ts";
import { Prober } from "../actors/pool/probe.ts";
import type { BackendConfig } from "../src/config.ts";
import { startSimulator, type Simulator } from "../src/sim/server.ts";

const TTFTS_MS = [20, 60, 100, 140, 180, 220, 260, 300];
const body = { model: "m", messages: [{ role: "user", content: "Hello" }] };

function poolOver(sims: Simulator[]): PoolActor {
  const configs: BackendConfig[] = sims.map((sim, i) => ({
    name: `b${i}`,
    kind: "openai",
    url: `${sim.url}/v1`,
    region: "in-country",
    weight: 1,
    concurrency_max: 1_000,
  }));
  return new PoolActor("m", configs, { upstreamTimeoutMs: 30_000 });
}

/** `requests` non-stream chats from `workers` concurrent loops; returns the count per backend. */
async function load(pool: PoolActor, requests: number, workers: number): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  let next = 0;
  const worker = async () => {
    while (next < requests) {
      next++;
      const outcome = await pool.chat({ body, stream: false, maxTokens: 4, requestId: `r${next}`, created: 0 });
      expect(outcome.kind).toBe("json");
      const name = (outcome as Extract<ChatOutcome, { kind: "json" }>).backend.name;
      counts.set(name, (counts.get(name) ?? 0) + 1);
    }
  };
  await Promise.all(Array.from({ length: workers }, worker));
  return counts;
}

const shareOf = (counts: Map<string, number>, names: string[], total: number) =>
  names.reduce((n, name) => n + (counts.get(name) ?? 0), 0) / total;
const percent = (x: number) => `${(x * 100).toFixed(1)}%`;

describe("eight backends, 20 to 300 ms to the first token", () => {
  let sims: Simulator[];
  let pool: PoolActor;
  beforeAll(async () => {
    sims = await Promise.all(TTFTS_MS.map((ttftMs) => startSimulator({ ttftMs, outputTokens: 4 })));
    pool = poolOver(sims);
  });
  afterAll(async () => {
    await Promise.all(sims.map((s) => s.stop()));
  });

  test("starting cold, after warm-up the two fastest serve most of 1,000 requests, and every backend is still probed", async () => {
    await load(pool, 200, 4); // warm-up
    const counts = await load(pool, 1_000, 4);
    const share = shareOf(counts, ["b0", "b1"], 1_000);
    console.log(
      `balance: the two fastest of eight (20, 60 ms) served ${percent(share)} of 1000 requests (4 at a time);`,
      Object.fromEntries([...counts].sort()),
    );
    expect(share).toBeGreaterThan(0.5);
    expect(counts.get("b0") ?? 0).toBeGreaterThan(counts.get("b7") ?? 0);
    // The slowest still gets the probes that keep its estimate true.
    for (let i = 0; i < 8; i++) expect(counts.get(`b${i}`) ?? 0).toBeGreaterThanOrEqual(1);
  }, 120_000);

  test("when the speeds change the shares follow within seconds", async () => {
    sims[0]!.options.ttftMs = 300;
    sims[7]!.options.ttftMs = 20;
    const started = performance.now();
    await load(pool, 400, 8); // a few seconds of traffic to notice
    const counts = await load(pool, 600, 8);
    const seconds = (performance.now() - started) / 1000;
    const fastNow = shareOf(counts, ["b7"], 600);
    const slowNow = shareOf(counts, ["b0"], 600);
    console.log(
      `balance: ${seconds.toFixed(1)} s after swapping the fastest and the slowest, the new fastest serves ${percent(fastNow)}, the old ${percent(slowNow)}`,
    );
    expect(fastNow).toBeGreaterThan(0.2);
    expect(slowNow).toBeLessThan(0.05);
  }, 120_000);
});

describe("in flight", () => {
  let sims: Simulator[];
  let pool: PoolActor;
  beforeAll(async () => {
    sims = await Promise.all([30, 60, 90].map((ttftMs) => startSimulator({ ttftMs, outputTokens: 4 })));
    pool = poolOver(sims);
    await load(pool, 60, 4);
  });
  afterAll(async () => {
    await Promise.all(sims.map((s) => s.stop()));
  });

  test("a fastest backend that saturates (queueing beyond 4 at once) sheds traffic to the next ones", async () => {
    const free = await load(pool, 400, 32);
    const freeShare = shareOf(free, ["b0"], 400);
    sims[0]!.options.concurrency = 4;
    const prober = new Prober(() => [pool]);
    const scrape = setInterval(() => void prober.scrapeAll(), 200);
    try {
      await load(pool, 200, 32); // the queue shows in its latency and its /metrics
      const saturated = await load(pool, 400, 32);
      const saturatedShare = shareOf(saturated, ["b0"], 400);
      console.log(
        `in flight: the fastest of three served ${percent(freeShare)} with room, ${percent(saturatedShare)} when it queues beyond 4; its queue peaked at ${sims[0]!.log.inFlightMax} in flight`,
      );
      expect(saturatedShare).toBeLessThan(freeShare - 0.1);
      expect(shareOf(saturated, ["b1", "b2"], 400)).toBeGreaterThan(0.4);
    } finally {
      clearInterval(scrape);
      sims[0]!.options.concurrency = null;
    }
  }, 120_000);

  test("a burst of 200 simultaneous requests does not land on one backend", async () => {
    const outcomes = await Promise.all(
      Array.from({ length: 200 }, (_, i) => pool.chat({ body, stream: false, maxTokens: 4, requestId: `burst${i}`, created: 0 })),
    );
    const counts = new Map<string, number>();
    for (const o of outcomes) {
      expect(o.kind).toBe("json");
      const name = (o as Extract<ChatOutcome, { kind: "json" }>).backend.name;
      counts.set(name, (counts.get(name) ?? 0) + 1);
    }
    console.log("in flight: a burst of 200 spread as", Object.fromEntries([...counts].sort()));
    expect(Math.max(...counts.values())).toBeLessThan(150);
    expect(counts.size).toBe(3);
    expect(pool.backends.every((b) => b.inFlight === 0)).toBe(true);
  }, 60_000);
});
