/**
 * The balancer, breaker and estimates on an injected clock and seeded random numbers: no HTTP.
 * (test/balance.test.ts drives the same pool against real simulators.)
 */
import { describe, expect, test } from "bun:test";
import type { BackendConfig } from "../../src/config.ts";
import { mulberry32 } from "../../src/sim/text.ts";
import { FAILURE_PENALTY_MS, TTFT_MS_NEUTRAL } from "./backend.ts";
import { Breaker, BREAKER_COOLDOWN_MS, BREAKER_FAILURES_MAX } from "./breaker.ts";
import { PeakEwma } from "./ewma.ts";
import { EXPLORE_AFTER_MS, PoolActor } from "./pool.ts";
import { parseVllmMetrics, metricsUrlOf } from "./probe.ts";

const config = (name: string, extra: Partial<BackendConfig> = {}): BackendConfig => ({
  name,
  kind: "openai",
  url: `http://${name}.invalid/v1`,
  region: "abroad",
  weight: 1,
  concurrency_max: 100,
  ...extra,
});

function harness(names: string[], extra: (name: string) => Partial<BackendConfig> = () => ({})) {
  const clock = { now: 1_000_000 };
  const pool = new PoolActor(
    "m",
    names.map((n) => config(n, extra(n))),
    { upstreamTimeoutMs: 10_000, nowMs: () => clock.now, random: mulberry32(7) },
  );
  return { clock, pool };
}

/** Sequential requests `stepMs` apart, each taking `latencyOf(backend)`; returns the count per backend. */
function run(
  h: ReturnType<typeof harness>,
  requests: number,
  stepMs: number,
  latencyOf: (name: string) => number | "fail",
): Map<string, number> {
  const counts = new Map<string, number>();
  const jitter = mulberry32(11); // ±10%, as real latencies are never exactly equal
  for (let i = 0; i < requests; i++) {
    h.clock.now += stepMs;
    const b = h.pool.pick(new Set())!;
    counts.set(b.name, (counts.get(b.name) ?? 0) + 1);
    const latency = latencyOf(b.name);
    if (latency === "fail") b.failed(h.clock.now);
    else {
      const ms = latency * (0.9 + 0.2 * jitter());
      b.accepted(h.clock.now);
      b.observe({ ttftMs: ms, outputTokens: 1, durationMs: ms }, h.clock.now);
    }
  }
  return counts;
}

describe("peak EWMA", () => {
  test("a sample above the estimate replaces it at once; one below pulls it down with the time since the last", () => {
    const e = new PeakEwma(100, 1_000, 0);
    e.observe(400, 10);
    expect(e.value).toBe(400);
    e.observe(100, 10); // no time passed: no weight
    expect(e.value).toBe(400);
    e.observe(100, 1_010); // one time constant: 1/e of the gap remains
    expect(e.value).toBeCloseTo(100 + 300 / Math.E, 5);
    e.blend(0, 0.5);
    expect(e.value).toBeCloseTo((100 + 300 / Math.E) / 2, 5);
  });
});

describe("breaker", () => {
  test("opens on consecutive failures, lets one probe through after the cool-down, and closes on its success", () => {
    const b = new Breaker();
    for (let i = 0; i < BREAKER_FAILURES_MAX - 1; i++) b.failed(i);
    expect(b.state(10)).toBe("closed");
    b.failed(10);
    expect(b.state(11)).toBe("open");
    expect(b.allows(11)).toBe(false);
    const later = 10 + BREAKER_COOLDOWN_MS;
    expect(b.state(later)).toBe("half-open");
    expect(b.allows(later)).toBe(true);
    b.taken(later);
    expect(b.allows(later)).toBe(false); // only one probe at a time
    b.succeeded(later + 5);
    expect(b.state(later + 5)).toBe("closed");
  });

  test("a failed probe opens it again for twice as long", () => {
    const b = new Breaker();
    for (let i = 0; i < BREAKER_FAILURES_MAX; i++) b.failed(0);
    b.taken(BREAKER_COOLDOWN_MS);
    b.failed(BREAKER_COOLDOWN_MS);
    expect(b.state(BREAKER_COOLDOWN_MS + 2 * BREAKER_COOLDOWN_MS - 1)).toBe("open");
    expect(b.state(BREAKER_COOLDOWN_MS + 2 * BREAKER_COOLDOWN_MS)).toBe("half-open");
  });

  test("opens on a failure ratio over the window even without a run of failures", () => {
    const b = new Breaker();
    for (let i = 0; i < 12; i++) (i % 2 === 0 ? b.failed : b.succeeded).call(b, i * 100);
    expect(b.state(1_200)).toBe("open");
  });

  test("successes from before the window slid out do not hold it closed", () => {
    const b = new Breaker();
    for (let i = 0; i < 20; i++) b.succeeded(i);
    // Twelve seconds later: the successes are out of the window; four failures in a row do not trip it.
    for (let i = 0; i < 4; i++) b.failed(12_000 + i);
    expect(b.state(12_010)).toBe("closed");
  });

  test("a health probe that answers cuts a doubled cool-down back to the base one, never shorter", () => {
    const b = new Breaker();
    for (let i = 0; i < BREAKER_FAILURES_MAX; i++) b.failed(0);
    b.healthy(100);
    expect(b.state(100)).toBe("open");
    b.taken(BREAKER_COOLDOWN_MS);
    b.failed(BREAKER_COOLDOWN_MS); // open again, for twice as long
    b.healthy(BREAKER_COOLDOWN_MS + 10);
    expect(b.state(2 * BREAKER_COOLDOWN_MS - 1)).toBe("open");
    expect(b.state(2 * BREAKER_COOLDOWN_MS)).toBe("half-open");
  });
});

describe("pick", () => {
  test("eight backends from 20 to 300 ms, cold: after warm-up the two fastest serve most requests and none is starved", () => {
    const names = ["b20", "b60", "b100", "b140", "b180", "b220", "b260", "b300"];
    const h = harness(names);
    run(h, 200, 10, (n) => Number(n.slice(1))); // warm-up
    const counts = run(h, 1_000, 10, (n) => Number(n.slice(1)));
    const share = ((counts.get("b20") ?? 0) + (counts.get("b60") ?? 0)) / 1_000;
    console.log(`unit: two fastest of eight serve ${(share * 100).toFixed(1)}% of 1000 requests`, Object.fromEntries(counts));
    expect(share).toBeGreaterThan(0.55);
    // 10 s of traffic: every backend was probed at least every EXPLORE_AFTER_MS.
    for (const n of names) expect(counts.get(n) ?? 0).toBeGreaterThanOrEqual(Math.floor(10_000 / EXPLORE_AFTER_MS) - 1);
  });

  test("the shares follow within seconds when the speeds change", () => {
    const h = harness(["a", "b", "c", "d"]);
    const fast = { now: "a" };
    const latency = (n: string) => (n === fast.now ? 20 : 200);
    run(h, 500, 10, latency);
    fast.now = "d";
    run(h, 500, 10, latency); // 5 s after the change
    const after = run(h, 500, 10, latency);
    // With four backends a pick compares two: the best can win at most half of the picks.
    expect((after.get("d") ?? 0) / 500).toBeGreaterThan(0.4);
    expect((after.get("a") ?? 0) / 500).toBeLessThan(0.3);
  });

  test("in-flight counts: requests that stay open spread instead of piling on the fastest", () => {
    const h = harness(["fast", "mid", "slow"]);
    const latency = { fast: 20, mid: 40, slow: 80 } as Record<string, number>;
    run(h, 300, 10, (n) => latency[n]!);
    const burst = new Map<string, number>();
    for (let i = 0; i < 200; i++) {
      const b = h.pool.pick(new Set())!;
      b.inFlight++; // none finishes during the burst
      burst.set(b.name, (burst.get(b.name) ?? 0) + 1);
    }
    expect(Math.max(...burst.values())).toBeLessThan(200 * 0.75);
    expect(burst.get("fast")!).toBeGreaterThan(burst.get("slow")!);
  });

  test("a backend at its concurrency limit is not picked", () => {
    const h = harness(["a", "b"]);
    const a = h.pool.backends[0]!;
    a.concurrencyLimit = 1;
    a.inFlight = 1;
    for (let i = 0; i < 20; i++) expect(h.pool.pick(new Set())!.name).toBe("b");
  });

  test("a backend that fails at once looks slow, not fast, and gets little traffic", () => {
    const h = harness(["ok1", "ok2", "bad"]);
    const counts = run(h, 2_000, 10, (n) => (n === "bad" ? "fail" : 100));
    expect((counts.get("bad") ?? 0) / 2_000).toBeLessThan(0.05);
    expect(h.pool.backends[2]!.ttft.value).toBeGreaterThanOrEqual(FAILURE_PENALTY_MS * 0.5);
  });

  test("weight scales the cost", () => {
    const h = harness(["light", "heavy"], (n) => ({ weight: n === "heavy" ? 4 : 1 }));
    const counts = run(h, 1_000, 1, () => 100);
    expect(counts.get("heavy") ?? 0).toBeGreaterThan(counts.get("light") ?? 0);
  });

  test("a host's queue from /metrics makes it look busier", () => {
    const h = harness(["queued", "idle"]);
    const [queued, idle] = h.pool.backends;
    queued!.host = { waiting: 8, running: 4, kvCacheUsage: 0.5, atMs: h.clock.now };
    expect(queued!.cost(0, h.clock.now)).toBeCloseTo(idle!.cost(0, h.clock.now) * 9, 5);
    // Stale metrics are ignored.
    expect(queued!.cost(0, h.clock.now + 60_000)).toBeCloseTo(idle!.cost(0, h.clock.now + 60_000), 5);
  });

  test("residency: only in-country backends are eligible", () => {
    const h = harness(["home", "away"], (n) => ({ region: n === "home" ? "in-country" : "abroad" }));
    for (let i = 0; i < 20; i++) expect(h.pool.pick(new Set(), "in-country")!.name).toBe("home");
    h.pool.backends[0]!.concurrencyLimit = 0;
    expect(h.pool.pick(new Set(), "in-country")).toBeNull();
  });
});

describe("update", () => {
  test("unchanged backends keep their state; a new one starts at the median of the warm ones, not at zero", () => {
    const h = harness(["a", "b", "c"]);
    run(h, 300, 10, (n) => ({ a: 30, b: 60, c: 90 })[n]!);
    const a = h.pool.backends[0]!;
    a.inFlight = 2;
    h.pool.update([config("a", { weight: 3 }), config("c"), config("d")]);
    expect(h.pool.backends.map((b) => b.name)).toEqual(["a", "c", "d"]);
    expect(h.pool.backends[0]).toBe(a);
    expect([a.inFlight, a.config.weight]).toEqual([2, 3]);
    const d = h.pool.backends[2]!;
    expect(d.ttft.value).toBeGreaterThan(25);
    expect(d.ttft.value).toBeLessThan(TTFT_MS_NEUTRAL);
  });
});

describe("host metrics", () => {
  test("the three vLLM gauges are read, summed over models; a page without them is no term", () => {
    const text = [
      "# TYPE vllm:num_requests_waiting gauge",
      'vllm:num_requests_waiting{model_name="a"} 3',
      'vllm:num_requests_waiting{model_name="b"} 2',
      'vllm:num_requests_running{model_name="a"} 7.0',
      'vllm:kv_cache_usage_perc{model_name="a"} 0.25',
      "vllm:request_success_total 9",
    ].join("\n");
    expect(parseVllmMetrics(text, 5)).toEqual({ waiting: 5, running: 7, kvCacheUsage: 0.25, atMs: 5 });
    expect(parseVllmMetrics("process_cpu_seconds_total 1\n", 5)).toBeNull();
    expect(metricsUrlOf("http://h:8000/v1")).toBe("http://h:8000/metrics");
    expect(metricsUrlOf("http://h:8000/v1/")).toBe("http://h:8000/metrics");
  });
});
