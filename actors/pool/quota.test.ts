import { expect, test } from "bun:test";
import type { KV } from "nats";
import { silentLogger } from "../../src/log.ts";
import type { PoolHost } from "./host.ts";
import { PoolActor } from "./pool.ts";
import { BackendQuotas, splitCap } from "./quota.ts";

const sumOver = (cap: number, wants: Map<string, number>) => [...wants.keys()].reduce((sum, node) => sum + splitCap(cap, wants, node), 0);

test("one node alone gets the whole cap", () => {
  expect(splitCap(10, new Map([["a", 3]]), "a")).toBe(10);
});

test("a cap is split by want, one slot each first, never summing above the cap", () => {
  const wants = new Map([
    ["a", 6],
    ["b", 2],
    ["c", 0],
  ]);
  expect(splitCap(11, wants, "a")).toBe(1 + 6);
  expect(splitCap(11, wants, "b")).toBe(1 + 2);
  expect(splitCap(11, wants, "c")).toBe(1);
  for (const cap of [1, 2, 3, 5, 7, 100]) {
    for (const w of [
      new Map([
        ["a", 1],
        ["b", 1],
        ["c", 1],
      ]),
      new Map([
        ["a", 9],
        ["b", 1],
        ["c", 5],
      ]),
      new Map([
        ["a", 0],
        ["b", 0],
        ["c", 0],
      ]),
    ]) {
      expect(sumOver(cap, w)).toBeLessThanOrEqual(cap);
    }
  }
});

test("with fewer slots than nodes, the nodes that want most get one each", () => {
  const wants = new Map([
    ["a", 1],
    ["b", 5],
    ["c", 3],
  ]);
  expect([splitCap(2, wants, "a"), splitCap(2, wants, "b"), splitCap(2, wants, "c")]).toEqual([0, 1, 1]);
});

/** The KV operations the quotas use, in memory. */
function memoryKv(): KV {
  const entries = new Map<string, string>();
  return {
    put: async (k: string, v: string) => void entries.set(k, v),
    get: async (k: string) => (entries.has(k) ? { operation: "PUT", string: () => entries.get(k)! } : null),
    delete: async (k: string) => void entries.delete(k),
    keys: async () =>
      (async function* () {
        yield* [...entries.keys()];
      })(),
  } as unknown as KV;
}

test("nodes split a backend's cap through the KV by demand, and a leaving node's share goes back", async () => {
  const kv = memoryKv();
  const config = {
    name: "gpu-1",
    kind: "openai" as const,
    url: "http://127.0.0.1:1/v1",
    region: "in-country" as const,
    weight: 1,
    concurrency_max: 12,
  };
  const host = () => {
    const pool = new PoolActor("llama", [config], { upstreamTimeoutMs: 1_000 });
    return { pool, host: { all: () => [pool] } as unknown as PoolHost };
  };
  const [a, b] = [host(), host()];
  const qa = new BackendQuotas(kv, "a", a.host, silentLogger);
  const qb = new BackendQuotas(kv, "b", b.host, silentLogger);
  const backendA = a.pool.backends[0]!;
  const backendB = b.pool.backends[0]!;
  // a is busy (at its quota), b is idle.
  backendA.requests = 100;
  backendA.inFlight = 12;
  await qa.tick();
  await qb.tick();
  await qa.tick();
  expect(backendA.concurrencyLimit + backendB.concurrencyLimit).toBeLessThanOrEqual(12);
  expect(backendA.concurrencyLimit).toBeGreaterThan(backendB.concurrencyLimit);
  expect(backendB.concurrencyLimit).toBeGreaterThanOrEqual(1);
  await qb.stop();
  await qa.tick();
  expect(backendA.concurrencyLimit).toBe(12);
});
