import { expect, test } from "bun:test";
import type { BackendConfig } from "../../src/config.ts";
import { poolStats } from "../protocol.ts";
import { PoolActor } from "./pool.ts";
import { foldStats, PEER_SHARE_MAX, statsOf } from "./stats.ts";

const config = (name: string): BackendConfig => ({
  name,
  kind: "openai",
  url: `http://${name}.invalid/v1`,
  region: "abroad",
  weight: 1,
  concurrency_max: 8,
});

test("a node shares only what it observed since its last message, and a peer's view moves ours at most part of the way", () => {
  let now = 0;
  const here = new PoolActor("m", [config("a"), config("b")], { upstreamTimeoutMs: 1_000, nowMs: () => now });
  const there = new PoolActor("m", [config("a"), config("b")], { upstreamTimeoutMs: 1_000, nowMs: () => now });
  expect(statsOf("n1", here)).toBeNull();
  now = 10;
  here.backends[0]!.observe({ ttftMs: 900, outputTokens: 1, durationMs: 900 }, now);
  const message = statsOf("n1", here)!;
  expect(poolStats.parse(message)).toEqual(message); // what crosses NATS validates
  expect(message.backends).toEqual([{ name: "a", ttftMs: 900, tpotMs: 20, samples: 1 }]);
  expect(statsOf("n1", here)).toBeNull(); // nothing new since

  const before = there.backends[0]!.ttft.value;
  foldStats(there, message);
  const after = there.backends[0]!.ttft.value;
  expect(after).toBeGreaterThan(before);
  expect(after).toBeLessThanOrEqual(before + PEER_SHARE_MAX * (900 - before) + 1e-9);
  expect(there.backends[1]!.ttft.value).toBe(before); // b was not reported
  foldStats(there, { node: "n1", model: "m", backends: [{ name: "unknown", ttftMs: 1, tpotMs: 1, samples: 5 }] });
  expect(there.backends.map((b) => b.ttft.value)).toEqual([after, before]);
});
