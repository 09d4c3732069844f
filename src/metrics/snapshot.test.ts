import { expect, test } from "bun:test";
import { PoolHost } from "../../actors/pool/host.ts";
import { BREAKER_COOLDOWN_MS, BREAKER_FAILURES_MAX } from "../../actors/pool/breaker.ts";
import { TPOT_MS_NEUTRAL, TTFT_MS_NEUTRAL } from "../../actors/pool/backend.ts";
import type { PoolActor } from "../../actors/pool/pool.ts";
import { poolSnapshot } from "../../actors/protocol.ts";
import type { Catalog } from "../catalog/catalog.ts";
import { encodeJson } from "../json.ts";
import { keyClassOf } from "../../actors/key/host.ts";
import { backendSnapshot, Sampler, Traffic, TRACKED_KEYS_MAX } from "./snapshot.ts";

const MODEL = "m-1";
const catalog = { list: () => [{ id: MODEL, openWeight: true }] } as unknown as Catalog;
const backendConfig = (name: string) => ({
  name,
  kind: "openai" as const,
  url: "http://127.0.0.1:9/v1",
  region: "in-country" as const,
  weight: 1,
  concurrency_max: 8,
});

function setup(): { pool: PoolActor; traffic: Traffic; sampler: Sampler } {
  const host = new PoolHost(
    catalog,
    { default_backends: [], pools: { [MODEL]: { backends: [backendConfig("a"), backendConfig("b")] } } },
    { upstreamTimeoutMs: 1000 },
  );
  const traffic = new Traffic();
  return { pool: host.get(MODEL)!, traffic, sampler: new Sampler("node-1", host, traffic) };
}

const settled = (over: Partial<Parameters<Traffic["add"]>[0]> = {}) => ({
  model: MODEL,
  backend: "a",
  status: 200,
  outputTokens: 10,
  billedMicro: 1_000n,
  ttftMs: null,
  keyId: "key_1",
  keyName: "first",
  ...over,
});

test("backendSnapshot reads breaker states: closed, open, due a probe (half-open)", () => {
  const { pool } = setup();
  const b = pool.backends[0]!;
  expect(backendSnapshot(b, 1000).breaker).toBe("closed");
  for (let i = 0; i < BREAKER_FAILURES_MAX; i++) b.failed(1000);
  expect(backendSnapshot(b, 1000).breaker).toBe("open");
  const due = 1000 + BREAKER_COOLDOWN_MS + 1;
  expect(backendSnapshot(b, due).breaker).toBe("half_open");
  b.accepted(due);
  expect(backendSnapshot(b, due).breaker).toBe("closed");
});

test("the sampler turns cumulative counts into rates over the interval", () => {
  const { pool, traffic, sampler } = setup();
  const [a, b] = pool.backends as [(typeof pool.backends)[0], (typeof pool.backends)[0]];
  a.requests = 4;
  a.inFlight = 2;
  b.requests = 4;
  b.failures = 1;
  sampler.sample(0, 1_000);
  a.requests += 10;
  b.requests += 4;
  b.failures += 2;
  for (let i = 0; i < 10; i++) traffic.add(settled({ ttftMs: 100 + i * 10 }));
  traffic.add(settled({ status: 502, outputTokens: 0, billedMicro: 0n, keyId: "key_2" }));
  const s = sampler.sample(2_000, 3_000); // two seconds later
  expect(poolSnapshot.parse(JSON.parse(encodeJson(s)))).toEqual(s);
  expect(s).toMatchObject({ node: "node-1", atMs: 3_000, intervalMs: 2_000 });
  const ba = s.backends.find((x) => x.backend === "a")!;
  expect(ba).toMatchObject({
    inFlight: 2,
    requestsPerS: 5,
    tokensPerS: 50,
    errorRate: 0,
    breaker: "closed",
    concurrencyLimit: 8,
    quotaShare: 1,
    ttftEwmaMs: TTFT_MS_NEUTRAL,
    tpotEwmaMs: TPOT_MS_NEUTRAL,
  });
  expect(s.backends.find((x) => x.backend === "b")!).toMatchObject({ requestsPerS: 2, errorRate: 0.5 });
  expect(s.models).toEqual([{ model: MODEL, requestsPerS: 5.5, errorsPerS: 0.5, tokensPerS: 50, spendMicroPerS: 5_000, ttftMs: 145 }]);
  expect(s.topKeys).toEqual([{ keyId: "key_1", name: "first", spentMicro: 10_000n }]);
  // Nothing new: rates fall to zero, totals stay.
  const idle = sampler.sample(3_000, 4_000);
  expect(idle.models[0]).toMatchObject({ requestsPerS: 0, tokensPerS: 0, spendMicroPerS: 0, ttftMs: null });
  expect(idle.topKeys[0]!.spentMicro).toBe(10_000n);
});

test("pools without any traffic are left out of the snapshot", () => {
  const { sampler } = setup();
  expect(sampler.sample(0, 0).backends).toEqual([]);
});

test("the top keys are ordered by spend and the tracked keys are bounded", () => {
  const traffic = new Traffic();
  for (let i = 0; i < TRACKED_KEYS_MAX + 10; i++) traffic.add(settled({ keyId: `key_${i}`, billedMicro: BigInt(i + 1) }));
  expect(traffic.keys.size).toBeLessThanOrEqual(TRACKED_KEYS_MAX);
  const top = traffic.topKeys(3);
  expect(top.map((k) => k.keyId)).toEqual([`key_${TRACKED_KEYS_MAX + 9}`, `key_${TRACKED_KEYS_MAX + 8}`, `key_${TRACKED_KEYS_MAX + 7}`]);
});

test("key classes are concurrency tiers", () => {
  expect([1, 4, 5, 32, 33, 256, 257, 10_000].map(keyClassOf)).toEqual([
    "concurrency_le_4",
    "concurrency_le_4",
    "concurrency_le_32",
    "concurrency_le_32",
    "concurrency_le_256",
    "concurrency_le_256",
    "concurrency_gt_256",
    "concurrency_gt_256",
  ]);
});
