import { expect, test } from "bun:test";
import type { KeyRecord, KeyStore } from "../../src/keys/store.ts";
import { encodeJson } from "../../src/json.ts";
import { PERMITS, type PermitRequest } from "../protocol.ts";
import { partitionOf } from "../subjects.ts";
import { FakeClock } from "../../test/fakeClock.ts";
import type { Tenure } from "./grant.ts";
import { PERMIT_GRANT_FRACTION, PERMIT_TTL_MS, PermitAllocator, RATE_TAKEOVER_QUIET_MS, RatePermits } from "./permits.ts";

type Limits = Partial<Pick<KeyRecord, "rpm" | "tpm" | "monthlySpendCapMicro">>;

function keyRecord(limits: Limits): KeyRecord {
  const now = new Date();
  return {
    id: "key_rates",
    accountId: "acc",
    name: "k",
    display: "sk-…",
    concurrencyMax: 1_000,
    rpm: null,
    tpm: null,
    monthlySpendCapMicro: null,
    residency: null,
    allowedModels: null,
    allowedIps: null,
    createdAt: now,
    revokedAt: null,
    updatedAt: now,
    ...limits,
  };
}

/**
 * Three nodes (a owns the partition) over a virtual clock (a sleep moves it: nothing waits in
 * real time); every remote ask crosses the wire schemas.
 */
function setup(limits: Limits, spentMicro = 0n) {
  const fake = new FakeClock({ startMs: 1_000_000 });
  const key = keyRecord(limits);
  const keys = { get: async () => key } as unknown as KeyStore;
  let tenure: Tenure = { fenceToken: 7n, acquiredAtMs: fake.now() - RATE_TAKEOVER_QUIET_MS };
  const clock = { clock: fake, windowNowMs: () => fake.now() };
  const allocator = () => new PermitAllocator({ keys, tenure: () => tenure, monthSpent: async () => spentMicro, ...clock });
  let owner = allocator();
  const asks: PermitRequest[] = [];
  const wire = async (req: PermitRequest) => {
    asks.push(req);
    const reply = await owner.grant(PERMITS.request.parse(JSON.parse(encodeJson(req))));
    return PERMITS.reply.parse(JSON.parse(encodeJson(reply)));
  };
  const node = (name: string) =>
    new RatePermits({
      node: name,
      ask: wire,
      ownsPartition: () => name === "a",
      allocator: {
        grant: (r: PermitRequest) => owner.grant(r),
        correct: (id: string, t: number) => owner.correct(id, t),
      } as PermitAllocator,
      ...clock,
    });
  return {
    key,
    asks,
    node,
    owner: () => owner,
    clock: fake,
    advance: (ms: number) => fake.advance(ms),
    /** The partition moves: a new owner with no windows, in its quiet period. */
    takeover: () => {
      tenure = { fenceToken: 8n, acquiredAtMs: fake.now() };
      owner = allocator();
    },
  };
}

async function admitted(permits: RatePermits, key: KeyRecord, n: number, tokens = 10, micro = 0n): Promise<number> {
  let ok = 0;
  for (let i = 0; i < n; i++) if ((await permits.admit(key, tokens, micro)).ok) ok++;
  return ok;
}

test("three nodes admit exactly rpm in a minute between them, and a refusal says when to retry", async () => {
  const s = setup({ rpm: 30 });
  const nodes = [s.node("a"), s.node("b"), s.node("c")];
  let ok = 0;
  // Round robin, well above the limit, over 50 s: a node's permits are used before they expire.
  for (let i = 0; i < 100; i++) {
    if ((await nodes[i % 3]!.admit(s.key, 10, 0n)).ok) ok++;
    expect(s.owner().granted(s.key.id).requests).toBeLessThanOrEqual(30);
    s.advance(500);
  }
  expect(ok).toBe(30);
  const refused = await nodes[1]!.admit(s.key, 10, 0n);
  expect(refused).toMatchObject({ ok: false, failure: { code: "rate_limit_exceeded" }, rate: { limitRequests: 30, remainingRequests: 0 } });
  expect(!refused.ok && refused.failure.retryAfterS).toBeGreaterThanOrEqual(1);
  // No grant was larger than the per-grant fraction of the limit (3 of 30).
  for (const ask of s.asks) expect(ask.want.requests).toBeGreaterThanOrEqual(ask.need.requests);
  expect(nodes[1]!.admissions.local + nodes[2]!.admissions.local).toBeGreaterThan(0);
  expect(nodes[0]!.admissions.owner).toBeGreaterThan(0);
  expect(nodes[1]!.admissions.asked).toBeGreaterThan(0);
  // A minute later the window has room again.
  s.advance(60_000);
  expect(await admitted(nodes[2]!, s.key, 1)).toBe(1);
});

test("tokens granted in a window never exceed tpm; one request above tpm is refused for its size", async () => {
  const s = setup({ tpm: 1_000 });
  const nodes = [s.node("a"), s.node("b"), s.node("c")];
  let tokens = 0;
  for (let i = 0; i < 90; i++) {
    if ((await nodes[i % 3]!.admit(s.key, 40, 0n)).ok) tokens += 40;
    expect(s.owner().granted(s.key.id).tokens).toBeLessThanOrEqual(1_000);
    s.advance(200);
  }
  expect(tokens).toBeLessThanOrEqual(1_000);
  expect(tokens).toBeGreaterThanOrEqual(1_000 - 3 * 40 * Math.ceil(1 / PERMIT_GRANT_FRACTION)); // what expired unused is bounded
  s.advance(61_000);
  const tooBig = await nodes[2]!.admit(s.key, 1_001, 0n);
  expect(tooBig).toMatchObject({ ok: false, failure: { code: "rate_limit_exceeded", param: "max_tokens" } });
  expect(!tooBig.ok && tooBig.failure.retryAfterS).toBeUndefined();
});

test("permits expire: after PERMIT_TTL_MS a node asks again", async () => {
  const s = setup({ rpm: 100 });
  const b = s.node("b");
  expect(await admitted(b, s.key, 4)).toBe(4); // sizes its asks on its use: it now holds spare permits
  const asked = s.asks.length;
  expect(await admitted(b, s.key, 1)).toBe(1);
  expect(s.asks.length).toBe(asked); // from a spare permit, no ask
  s.advance(PERMIT_TTL_MS);
  expect(await admitted(b, s.key, 1)).toBe(1);
  expect(s.asks.length).toBe(asked + 1);
});

test("concurrent admissions on a node share one ask", async () => {
  const s = setup({ rpm: 1_000 });
  const b = s.node("b");
  const verdicts = await Promise.all(Array.from({ length: 5 }, () => b.admit(s.key, 10, 0n)));
  expect(verdicts.every((v) => v.ok)).toBe(true);
  // Each ask is sized on the use since the last one, so waiters that found the answer taken ask for more: 1, 2, then 3 permits.
  expect(s.asks.map((a) => a.want.requests)).toEqual([1, 2, 3]);
  expect(s.asks[0]!.need.requests).toBe(1);
});

test("after a takeover nodes report their last minute's grants and the new owner grants nothing until it has heard them", async () => {
  const s = setup({ rpm: 30 });
  const [a, b, c] = [s.node("a"), s.node("b"), s.node("c")];
  let ok = 0;
  for (let i = 0; i < 45; i++) if ((await [a, b, c][i % 3]!.admit(s.key, 10, 0n)).ok) ok++;
  expect(ok).toBeGreaterThanOrEqual(27);
  s.takeover();
  await Promise.all([...a.report({ takeover: true }), ...b.report({ takeover: true }), ...c.report({ takeover: true })]);
  expect(s.owner().granted(s.key.id).requests).toBeGreaterThanOrEqual(ok);
  const startedMs = s.clock.now();
  const after = await b.admit(s.key, 10, 0n);
  expect(s.clock.now() - startedMs).toBeGreaterThan(RATE_TAKEOVER_QUIET_MS);
  expect(after).toMatchObject({ ok: false, failure: { code: "rate_limit_exceeded" } });
});

test("keys without rpm, tpm or a cap never ask", async () => {
  const s = setup({});
  const b = s.node("b");
  expect(await admitted(b, s.key, 50)).toBe(50);
  expect(s.asks).toEqual([]);
  expect(b.admissions).toEqual({ local: 0, owner: 0, asked: 0 });
});

test("asks during a takeover's quiet period count what their nodes billed and hold while they wait: the permits at its end stay within the cap", async () => {
  const cap = 10_000n;
  const s = setup({ monthlySpendCapMicro: cap });
  s.takeover();
  // Each node holds 3,000 in flight from the previous owner, has billed 1,000 since, and both ask
  // at once for 2,500 more: 2,000 is left, so neither may have it.
  const ask = (node: string, micro: bigint, billedMicro: bigint): PermitRequest => ({
    keyId: s.key.id,
    node,
    need: { requests: 0, tokens: 0, micro },
    want: { requests: 0, tokens: 0, micro },
    outstandingMicro: 3_000n,
    billedMicro,
    overTokens: 0,
  });
  const replies = await Promise.all([s.owner().grant(ask("b", 2_500n, 1_000n)), s.owner().grant(ask("c", 2_500n, 1_000n))]);
  expect(s.clock.now()).toBeGreaterThanOrEqual(1_000_000 + RATE_TAKEOVER_QUIET_MS);
  const granted = replies.reduce((sum, r) => sum + (r.ok ? r.micro : 0n), 0n);
  expect(2n * (1_000n + 3_000n) + granted).toBeLessThanOrEqual(cap);
  for (const r of replies) expect(r).toMatchObject({ ok: false, failure: { code: "insufficient_quota" } });
  // What is left is granted, once: the billing reported before the wait is not counted twice.
  expect(await s.owner().grant(ask("c", 2_000n, 0n))).toMatchObject({ ok: true, micro: 2_000n });
});

test("an ask whose partition moves while it waits out the quiet period is counted whole by the next tenure, its billing included", async () => {
  const fake = new FakeClock({ startMs: 1_000_000 });
  const key = keyRecord({ monthlySpendCapMicro: 10_000n });
  let tenure: Tenure = { fenceToken: 8n, acquiredAtMs: fake.now() };
  const allocator: PermitAllocator = new PermitAllocator({
    keys: { get: async () => key } as unknown as KeyStore,
    // As the first quiet period ends the partition moves away and back: a new tenure, the old one's state forgotten.
    tenure: () => {
      if (tenure.fenceToken === 8n && fake.now() > tenure.acquiredAtMs + RATE_TAKEOVER_QUIET_MS) {
        allocator.forget(partitionOf(key.id));
        tenure = { fenceToken: 9n, acquiredAtMs: fake.now() };
      }
      return tenure;
    },
    monthSpent: async () => 0n,
    clock: fake,
    windowNowMs: () => fake.now(),
  });
  const reply = await allocator.grant({
    keyId: key.id,
    node: "b",
    need: { requests: 0, tokens: 0, micro: 100n },
    want: { requests: 0, tokens: 0, micro: 100n },
    outstandingMicro: 0n,
    billedMicro: 9_950n,
    overTokens: 0,
  });
  expect(tenure.fenceToken).toBe(9n);
  // 9,950 billed and 100 asked exceed the cap of 10,000 under the second tenure too.
  expect(reply).toMatchObject({ ok: false, failure: { code: "insufficient_quota" } });
});

test("a monthly cap holds over nodes: spent + reserves in flight everywhere never exceed it", async () => {
  const cap = 10_000n;
  const spentBefore = 2_000n;
  const s = setup({ monthlySpendCapMicro: cap }, spentBefore);
  const nodes = [s.node("a"), s.node("b"), s.node("c")];
  const inFlight: bigint[][] = [[], [], []];
  let billed = 0n;
  let seed = 42;
  const random = () => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
  let admittedCount = 0;
  let refusedCount = 0;
  for (let step = 0; step < 400; step++) {
    const i = Math.floor(random() * 3);
    const r = random();
    if (r < 0.6) {
      const reserve = BigInt(200 + Math.floor(random() * 600));
      const verdict = await nodes[i]!.admit(s.key, 0, reserve);
      if (verdict.ok) {
        inFlight[i]!.push(reserve);
        admittedCount++;
      } else {
        expect(verdict.failure.code).toBe("insufficient_quota");
        refusedCount++;
      }
    } else if (r < 0.9 && inFlight[i]!.length > 0) {
      const reserve = inFlight[i]!.shift()!;
      const charge = (reserve * BigInt(Math.floor(random() * 100))) / 100n;
      billed += charge;
      nodes[i]!.settled(s.key.id, { reserveMicro: reserve, billedMicro: charge, tokens: 0 });
    } else {
      s.advance(1_100);
      await Promise.all(nodes.flatMap((n) => n.report()));
    }
    const committed = inFlight.flat().reduce((a, b) => a + b, 0n);
    expect(spentBefore + billed + committed).toBeLessThanOrEqual(cap);
  }
  expect(admittedCount).toBeGreaterThan(20); // the cap's room was reused as requests settled
  expect(refusedCount).toBeGreaterThan(0);
});

test("a batch line's admission takes none of rpm or tpm and counts toward the monthly cap", async () => {
  const s = setup({ rpm: 1, tpm: 100, monthlySpendCapMicro: 1_000n });
  const node = s.node("b");
  for (let i = 0; i < 5; i++) expect((await node.admit(s.key, 500, 100n, true)).ok).toBe(true);
  // The minute's one request and its tokens are still the live traffic's, and then spent.
  expect((await node.admit(s.key, 50, 100n)).ok).toBe(true);
  expect(await node.admit(s.key, 50, 100n)).toMatchObject({ ok: false, failure: { code: "rate_limit_exceeded" } });
  // 600 of the cap's 1,000 are in flight: a line of 500 more does not fit.
  expect(await node.admit(s.key, 0, 500n, true)).toMatchObject({ ok: false, failure: { code: "insufficient_quota" } });
  expect((await node.admit(s.key, 0, 400n, true)).ok).toBe(true);
});
