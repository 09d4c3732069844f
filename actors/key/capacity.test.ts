import { expect, test } from "bun:test";
import type { KeyRecord, KeyStore } from "../../src/keys/store.ts";
import { GRANT_TTL_MS, SlotAllocator, SlotShares, TAKEOVER_QUIET_MS, type Tenure } from "./capacity.ts";

function keyRecord(concurrencyMax: number): KeyRecord {
  const now = new Date();
  return { id: "key_cap", accountId: "acc", name: "k", display: "sk-…", concurrencyMax, rpm: null, tpm: null, monthlySpendCapMicro: null,
  residency: null, createdAt: now, revokedAt: null, updatedAt: now };
}

function setup(concurrencyMax: number, acquiredAtMs = -TAKEOVER_QUIET_MS) {
  let nowMs = 0;
  const key = keyRecord(concurrencyMax);
  const keys = { get: async () => key } as unknown as KeyStore;
  let tenure: Tenure | null = { fenceToken: 42n, acquiredAtMs };
  const allocator = new SlotAllocator(keys, () => tenure, () => nowMs);
  const node = (name: string) =>
    new SlotShares({ node: name, ask: (req) => allocator.grant(req), ownsPartition: () => name === "a", nowMs: () => nowMs });
  return {
    key,
    allocator,
    node,
    advance: (ms: number) => (nowMs += ms),
    takeover: (fenceToken: bigint) => (tenure = { fenceToken, acquiredAtMs: nowMs }),
  };
}

async function takeUpTo(shares: SlotShares, key: KeyRecord, n: number): Promise<number> {
  let taken = 0;
  for (let i = 0; i < n; i++) if ((await shares.take(key)) === null) taken++;
  return taken;
}

test("three nodes never hold more than concurrency_max slots between them, and each admits from its share", async () => {
  const s = setup(6);
  const [a, b, c] = [s.node("a"), s.node("b"), s.node("c")];
  const taken = [await takeUpTo(a, s.key, 10), await takeUpTo(b, s.key, 10), await takeUpTo(c, s.key, 10)];
  expect(taken.reduce((x, y) => x + y, 0)).toBe(6);
  expect(s.allocator.granted(s.key.id)).toBeLessThanOrEqual(6);
  // Once a's requests settle and it reports, its slots move to the nodes that want them.
  for (let i = 0; i < taken[0]!; i++) a.give(s.key.id);
  s.advance(31_000); // a is idle long enough to give its share back
  await Promise.all(a.renew());
  const more = (await takeUpTo(b, s.key, 10)) + (await takeUpTo(c, s.key, 10));
  expect(taken[1]! + taken[2]! + more).toBe(6);
  expect(b.admissions.local + c.admissions.local).toBeGreaterThan(0);
  expect(a.admissions.owner_local).toBeGreaterThan(0); // a owns the partition: no broker hop
  expect(b.admissions.owner_remote).toBeGreaterThan(0);
});

test("a shrunk share still counts at the owner until its node reports again", async () => {
  const s = setup(4);
  const [a, b] = [s.node("a"), s.node("b")];
  expect(await takeUpTo(a, s.key, 4)).toBe(4);
  // a's requests end; its renewal asks for less, but a request it admitted meanwhile may run:
  for (let i = 0; i < 4; i++) a.give(s.key.id);
  await Promise.all(a.renew({ force: true })); // reports the peak of 4 it just had
  await Promise.all(a.renew({ force: true })); // use 0: asks for 2 and is granted 2
  // the owner keeps counting a's previous grant, so b gets nothing yet
  expect(await takeUpTo(b, s.key, 1)).toBe(0);
  await Promise.all(a.renew({ force: true })); // a's next report frees the slots
  expect(await takeUpTo(b, s.key, 2)).toBe(2);
});

test("after a takeover the new owner confirms held shares and grows none until the quiet period ends", async () => {
  const s = setup(6);
  const [a, b] = [s.node("a"), s.node("b")];
  expect(await takeUpTo(a, s.key, 3)).toBe(3);
  expect(await takeUpTo(b, s.key, 3)).toBe(3);
  const heldBefore = [s.allocator.granted(s.key.id)];
  // The partition moves: the new owner starts with no claims.
  const tenure: Tenure = { fenceToken: 50n, acquiredAtMs: 0 };
  const fresh = new SlotAllocator({ get: async () => s.key } as unknown as KeyStore, () => tenure, () => 0);
  const reply = await fresh.grant({ keyId: s.key.id, node: "b", want: 3, held: 3, inUse: 3 });
  expect(reply).toMatchObject({ ok: true, slots: 3, fenceToken: 50n });
  const reA = await fresh.grant({ keyId: s.key.id, node: "a", want: 3, held: 3, inUse: 3 });
  expect(reA).toMatchObject({ ok: true, slots: 3 });
  // A third node asking for more during the quiet period waits, then finds nothing free.
  const startedMs = performance.now();
  const reC = await fresh.grant({ keyId: s.key.id, node: "c", want: 3, held: 0, inUse: 0 });
  expect(performance.now() - startedMs).toBeGreaterThanOrEqual(TAKEOVER_QUIET_MS - 50);
  expect(reC).toMatchObject({ ok: true, slots: 0 });
  expect(heldBefore[0]).toBe(6);
});
