import { expect, test } from "bun:test";
import type { KeyRecord, KeyStore } from "../../src/keys/store.ts";
import { FENCE_ADMISSION_SLACK_MS, FENCE_CLOCK_SKEW_MS_MAX } from "../../src/ledger/fence.ts";
import { PARTITION_OWNER_MS_MAX } from "../cluster/partitions.ts";
import type { GrantRequest } from "../protocol.ts";
import { GRANT_TTL_MS, SlotAllocator, SlotShares, TAKEOVER_QUIET_MS, type Tenure } from "./capacity.ts";
import { FakeClock } from "../../test/fakeClock.ts";
import { ASK_RETRY_MS, ASK_WAIT_MS_MAX, notOwner } from "./grant.ts";

function keyRecord(concurrencyMax: number): KeyRecord {
  const now = new Date();
  return {
    id: "key_cap",
    accountId: "acc",
    name: "k",
    display: "sk-…",
    concurrencyMax,
    rpm: null,
    tpm: null,
    monthlySpendCapMicro: null,
    residency: null,
    allowedModels: null,
    allowedIps: null,
    createdAt: now,
    revokedAt: null,
    updatedAt: now,
  };
}

/** Nodes over one owner on a virtual clock (a sleep moves it: nothing waits in real time). */
function setup(concurrencyMax: number, acquiredAtMs = -TAKEOVER_QUIET_MS) {
  const clock = new FakeClock();
  const key = keyRecord(concurrencyMax);
  const keys = { get: async () => key } as unknown as KeyStore;
  const tenure: Tenure = { fenceToken: 42n, acquiredAtMs };
  const allocator = new SlotAllocator(keys, () => tenure, clock);
  const node = (name: string) =>
    new SlotShares({ node: name, ask: (req) => allocator.grant(req), ownsPartition: () => name === "a", clock });
  return { key, allocator, node, clock };
}

async function takeUpTo(shares: SlotShares, key: KeyRecord, n: number): Promise<number> {
  let taken = 0;
  for (let i = 0; i < n; i++) if ((await shares.take(key)) === null) taken++;
  return taken;
}

test("the ledger's fencing slack covers what is admitted after a takeover: a share's grant, an owner's last act, and clock skew", () => {
  // A node admits from its share until the grant expires; the grant was made at the latest when its
  // owner last acted, which is up to PARTITION_OWNER_MS_MAX after a renewal the KV may have lost.
  expect(FENCE_ADMISSION_SLACK_MS).toBeGreaterThanOrEqual(GRANT_TTL_MS + PARTITION_OWNER_MS_MAX + FENCE_CLOCK_SKEW_MS_MAX);
});

test("three nodes never hold more than concurrency_max slots between them, and each admits from its share", async () => {
  const s = setup(6);
  const [a, b, c] = [s.node("a"), s.node("b"), s.node("c")];
  const taken = [await takeUpTo(a, s.key, 10), await takeUpTo(b, s.key, 10), await takeUpTo(c, s.key, 10)];
  expect(taken.reduce((x, y) => x + y, 0)).toBe(6);
  expect(s.allocator.granted(s.key.id)).toBeLessThanOrEqual(6);
  // Once a's requests settle and it reports, its slots move to the nodes that want them.
  for (let i = 0; i < taken[0]!; i++) a.give(s.key.id);
  s.clock.advance(31_000); // a is idle long enough to give its share back
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
  const tenure: Tenure = { fenceToken: 50n, acquiredAtMs: s.clock.now() };
  const fresh = new SlotAllocator({ get: async () => s.key } as unknown as KeyStore, () => tenure, s.clock);
  const reply = await fresh.grant({ keyId: s.key.id, node: "b", want: 3, held: 3, inUse: 3 });
  expect(reply).toMatchObject({ ok: true, slots: 3, fenceToken: 50n });
  const reA = await fresh.grant({ keyId: s.key.id, node: "a", want: 3, held: 3, inUse: 3 });
  expect(reA).toMatchObject({ ok: true, slots: 3 });
  // A third node asking for more during the quiet period waits, then finds nothing free.
  const startedMs = s.clock.now();
  const reC = await fresh.grant({ keyId: s.key.id, node: "c", want: 3, held: 0, inUse: 0 });
  expect(s.clock.now() - startedMs).toBeGreaterThan(TAKEOVER_QUIET_MS);
  expect(reC).toMatchObject({ ok: true, slots: 0 });
  expect(heldBefore[0]).toBe(6);
});

test("asks that grow during the quiet period count what their nodes hold while they wait: the grants at its end stay within the limit", async () => {
  const s = setup(6);
  const tenure: Tenure = { fenceToken: 50n, acquiredAtMs: s.clock.now() };
  const fresh = new SlotAllocator({ get: async () => s.key } as unknown as KeyStore, () => tenure, s.clock);
  // Both nodes use all 3 slots the previous owner gave each, and both ask the new owner for more at once.
  const [ra, rb] = await Promise.all([
    fresh.grant({ keyId: s.key.id, node: "a", want: 5, held: 3, inUse: 3 }),
    fresh.grant({ keyId: s.key.id, node: "b", want: 5, held: 3, inUse: 3 }),
  ]);
  expect(s.clock.now()).toBeGreaterThan(TAKEOVER_QUIET_MS);
  expect(fresh.granted(s.key.id)).toBeLessThanOrEqual(6);
  expect(ra).toMatchObject({ ok: true, slots: 3 });
  expect(rb).toMatchObject({ ok: true, slots: 3 });
});

test("a node cut off for GRANT_TTL_MS loses its claim: its slots go to others and it admits nothing new", async () => {
  const s = setup(4);
  const [a, b] = [s.node("a"), s.node("b")];
  expect(await takeUpTo(a, s.key, 4)).toBe(4);
  expect(await takeUpTo(b, s.key, 1)).toBe(0);
  // a's requests run on but it reports nothing (cut off from the owner) for a grant's life.
  s.clock.advance(GRANT_TTL_MS);
  expect(await takeUpTo(b, s.key, 4)).toBe(4);
  // Its own grant has expired too: the excess is a's last share, admitted before it went silent.
  expect(await takeUpTo(a, s.key, 1)).toBe(0);
});

/** A node whose asks find no owner until `ownerFromMs` (the partition is moving). */
function moving(s: ReturnType<typeof setup>, ownerFromMs: number) {
  let asks = 0;
  const ask = (req: GrantRequest) => {
    asks++;
    return s.clock.now() < ownerFromMs ? Promise.resolve(notOwner(0)) : s.allocator.grant(req);
  };
  return { shares: new SlotShares({ node: "b", ask, ownsPartition: () => false, clock: s.clock }), asks: () => asks };
}

test("while the partition moves an admission asks again every ASK_RETRY_MS, and is admitted by the new owner", async () => {
  const s = setup(4);
  const b = moving(s, 3 * ASK_RETRY_MS);
  expect(await b.shares.take(s.key)).toBeNull();
  expect(s.clock.now()).toBe(3 * ASK_RETRY_MS);
  expect(b.asks()).toBe(4);
  expect(b.shares.admissions.owner_remote).toBe(1);
});

test("an admission that finds no owner within ASK_WAIT_MS_MAX is refused with 503: its key's limit was not checked", async () => {
  const s = setup(4);
  const b = moving(s, Infinity);
  expect(await b.shares.take(s.key)).toMatchObject({ code: "service_unavailable", retryAfterS: 1 });
  expect(s.clock.now()).toBeGreaterThanOrEqual(ASK_WAIT_MS_MAX);
  expect(s.clock.now()).toBeLessThan(ASK_WAIT_MS_MAX + ASK_RETRY_MS);
});

test("an owner gone after an earlier answer: the next admission is a 503, not the 429 that answer would have meant", async () => {
  const s = setup(6);
  const a = s.node("a");
  expect(await takeUpTo(a, s.key, 3)).toBe(3);
  let reachable = true;
  const ask = (req: GrantRequest) => (reachable ? s.allocator.grant(req) : Promise.reject(new Error("request timed out")));
  const b = new SlotShares({ node: "b", ask, ownsPartition: () => false, clock: s.clock });
  // b wants more than the 3 left: the owner's answer covers its want, but grants only what is free.
  expect(await takeUpTo(b, s.key, 4)).toBe(3);
  for (let i = 0; i < 3; i++) a.give(s.key.id);
  reachable = false; // a's slots are free now, but b can no longer reach the owner to be granted them
  expect(await b.take(s.key)).toMatchObject({ code: "service_unavailable" });
});
