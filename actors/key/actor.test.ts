/**
 * The key actor's contract, run on both buses: in-process, and over NATS from a second
 * connection (so every message crosses the broker and is validated on receipt).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import { ADMIT, EXTEND, SETTLE, WALLET_RECALLS, type Settlement } from "../protocol.ts";
import { partitionOf, subjects as buildSubjects } from "../subjects.ts";
import { KeyActorHost } from "./host.ts";
import { backgroundFailures } from "../../src/background.ts";
import type { Bus } from "../../src/bus/bus.ts";
import { LocalBus } from "../../src/bus/local.ts";
import { NatsBus } from "../../src/bus/nats.ts";
import { openDb, type Db } from "../../src/db/client.ts";
import { migrate } from "../../src/db/migrate.ts";
import { randomBase62 } from "../../src/ids.ts";
import { KeyStore } from "../../src/keys/store.ts";
import { createAccount, getWallet, topUp } from "../../src/ledger/wallets.ts";
import { loadCatalog } from "../../src/catalog/catalog.ts";
import { ledgerSink } from "../../src/ledger/deadletter.ts";
import { UsageWriter } from "../../src/ledger/usage.ts";
import { silentLogger } from "../../src/log.ts";
import { freshDatabase, SETUP_MS_MAX, until } from "../../test/helpers.ts";
import { describeWith } from "../../test/services.ts";

interface Rig {
  db: Db;
  host: KeyActorHost;
  server: Bus;
  client: Bus;
  subjects: ReturnType<typeof buildSubjects>;
  keys: KeyStore;
  writer: UsageWriter;
  stop(): Promise<void>;
}

/** A key of its own for one test: an account seeded with `seedMicro`, so no test reads another's leftovers. */
interface TestKey {
  accountId: string;
  keyId: string;
}

async function rig(buses: () => Promise<{ server: Bus; client: Bus }>): Promise<Rig> {
  const database = await freshDatabase();
  const db = await openDb({ databaseUrl: database?.url, dataFolder: null });
  await migrate(db);
  await loadCatalog(db);
  const keys = new KeyStore(db, { prefix: "sk-t-", pepper: randomBase62(40) });
  const { server, client } = await buses();
  const subjects = buildSubjects(`t${randomBase62(8)}`);
  const writer = new UsageWriter(ledgerSink(db), silentLogger);
  const host = new KeyActorHost({ db, keys, writer, log: silentLogger }, (recall) =>
    server.publish(WALLET_RECALLS, subjects.walletRecalls, recall),
  );
  const unserve = host.serve(server, subjects);
  await server.flush(); // the client's first request must find the subscriptions on the broker
  return {
    db,
    host,
    server,
    client,
    subjects,
    keys,
    writer,
    async stop() {
      unserve();
      await writer.stop();
      await client.close();
      if (server !== client) await server.close();
      await db.close();
      await database?.drop();
    },
  };
}

async function keyWith(r: Rig, seedMicro: bigint): Promise<TestKey> {
  const account = await createAccount(r.db, "actor test");
  // A top-up's reference is unique across the ledger: one per account, or the second seed is a no-op.
  const seeded = await topUp(r.db, account.id, seedMicro, `seed-${account.id}`);
  if (!("credited" in seeded) || !seeded.credited) throw new Error("seed not credited");
  const { record } = await r.keys.create(account.id, "k", { concurrencyMax: 2 });
  return { accountId: account.id, keyId: record.id };
}

function settlementFor(k: TestKey, holdId: string, requestId: string, outputUnits: bigint, reserveMicro = 1_000_000n): Settlement {
  return {
    keyId: k.keyId,
    requestId,
    holdId,
    reserveMicro,
    model: "gpt-4o-mini",
    operation: "chat",
    backend: "b1",
    priceVersionId: 1,
    usage: { input: 10n, output: outputUnits },
    prices: { input: 13_500n, output: 54_000n },
    status: 200,
    durationMs: 5,
  };
}

function contract(name: string, buses: () => Promise<{ server: Bus; client: Bus }>, it: (name: string, fn: () => Promise<void>) => void) {
  let r: Rig;
  beforeAll(async () => {
    r = await rig(buses);
  }, SETUP_MS_MAX);
  afterAll(async () => r.stop(), SETUP_MS_MAX);

  const admit = (k: TestKey, requestId: string, reserveMicro: bigint, exact = false) =>
    r.client.request(ADMIT, r.subjects.keyAdmit(partitionOf(k.keyId)), {
      keyId: k.keyId,
      requestId,
      model: "gpt-4o-mini",
      reserveMicro,
      reserveTokens: 100,
      exact,
    });
  const settle = (s: Settlement) => r.client.request(SETTLE, r.subjects.keySettle(partitionOf(s.keyId)), s);
  const extend = (k: TestKey, requestId: string, holdId: string, addMicro: bigint) =>
    r.client.request(EXTEND, r.subjects.keyExtend(partitionOf(k.keyId)), { keyId: k.keyId, requestId, holdId, addMicro, addTokens: 10 });
  const wallet = async (k: TestKey) => {
    await r.writer.flush();
    return getWallet(r.db, k.accountId);
  };

  it(`${name}: admit leases what the wallet has; usage beyond the reserve is charged up to the wallet, the rest written off`, async () => {
    const k = await keyWith(r, 1_000_000n); // 1 toman
    const admitted = await admit(k, "r1", 700_000n);
    expect(admitted.ok).toBe(true);
    if (!admitted.ok) return;
    // The lease wanted 1,000 toman; the wallet had 1, so the lease took all of it.
    expect(await wallet(k)).toEqual({ balanceMicro: 1_000_000n, heldMicro: 1_000_000n });
    // 10 × 13,500 + 20 × 54,000 = 1,215,000 metered, more than the 700,000 reserve: the lease's
    // other 300,000 cover part of it; the wallet has nothing more, so 215,000 are written off.
    const settled = await settle(settlementFor(k, admitted.holdId, "r1", 20n, 700_000n));
    expect(settled).toEqual({ ok: true, billedMicro: 1_000_000n, meteredMicro: 1_215_000n });
    expect(await wallet(k)).toEqual({ balanceMicro: 0n, heldMicro: 0n });
  });

  it(`${name}: a retried settle posts once`, async () => {
    const k = await keyWith(r, 300_000n);
    const admitted = await admit(k, "r2", 200_000n);
    if (!admitted.ok) throw new Error("not admitted");
    const s = settlementFor(k, admitted.holdId, "r2", 1n, 200_000n); // 135,000 + 54,000 = 189,000
    expect(await settle(s)).toEqual({ ok: true, billedMicro: 189_000n, meteredMicro: 189_000n });
    await settle(s);
    await r.host.releaseAll();
    expect(await wallet(k)).toEqual({ balanceMicro: 111_000n, heldMicro: 0n });
  });

  it(`${name}: a cheap reserve that does not fit asks for an exact count; an exact one is refused`, async () => {
    const k = await keyWith(r, 111_000n);
    const cheap = await admit(k, "r3", 111_001n);
    expect(cheap.ok ? null : [cheap.failure.code, cheap.exactNeeded]).toEqual(["insufficient_quota", true]);
    const exact = await admit(k, "r3", 111_001n, true);
    expect(exact.ok ? null : [exact.failure.code, exact.exactNeeded]).toEqual(["insufficient_quota", false]);
    if (exact.ok) return;
    expect(exact.failure.message).toContain("0.111 toman is available");
    expect(r.host.inFlight(k.keyId)).toBe(0);
  });

  it(`${name}: an exact admission waits for money held by a request in flight`, async () => {
    const k = await keyWith(r, 111_000n);
    const first = await admit(k, "w1", 111_000n); // holds the whole wallet
    if (!first.ok) throw new Error("not admitted");
    let answered = false;
    const second = admit(k, "w2", 50_000n, true).finally(() => (answered = true));
    await until(() => r.host.inFlight(k.keyId) === 2); // the second has its slot and waits for money
    expect(answered).toBe(false);
    // The first used 2 input tokens: 27,000 charged, 84,000 of its reserve comes back.
    await settle({ ...settlementFor(k, first.holdId, "w1", 0n, 111_000n), usage: { input: 2n, output: 0n } });
    const got = await second;
    expect(got.ok ? "admitted" : got.failure).toBe("admitted");
    if (!got.ok) return;
    await settle({ ...settlementFor(k, got.holdId, "w2", 0n, 50_000n), usage: { input: 0n, output: 0n } });
    await r.host.releaseAll();
    expect(await wallet(k)).toEqual({ balanceMicro: 84_000n, heldMicro: 0n });
    const broke = await admit(k, "w3", 84_001n, true);
    expect(broke.ok ? null : broke.failure.code).toBe("insufficient_quota");
  });

  it(`${name}: the third concurrent admission over concurrency_max 2 gets 429, and slots come back`, async () => {
    const k = await keyWith(r, 10_000_000n);
    const a = await admit(k, "c1", 1n);
    const b = await admit(k, "c2", 1n);
    const c = await admit(k, "c3", 1n);
    expect([a.ok, b.ok, c.ok]).toEqual([true, true, false]);
    if (c.ok || !a.ok || !b.ok) return;
    expect(c.failure.code).toBe("concurrency_limit_exceeded");
    expect(c.failure.retryAfterS).toBe(1);
    await settle(settlementFor(k, a.holdId, "c1", 0n, 1n));
    await settle(settlementFor(k, b.holdId, "c2", 0n, 1n));
    expect(r.host.inFlight(k.keyId)).toBe(0);
    expect((await admit(k, "c4", 1n)).ok).toBe(true);
  });

  it(`${name}: admissions that arrive together never pass concurrency_max, whatever the limits' checks wait for`, async () => {
    const k = await keyWith(r, 10_000_000n);
    // A monthly cap makes the limits' check read the month's spend from the database: a real wait.
    await r.keys.setLimits(k.keyId, { monthlySpendCapMicro: 1_000_000_000n });
    const replies = await Promise.all(Array.from({ length: 12 }, (_, i) => admit(k, `t${i}`, 1n)));
    expect(replies.filter((reply) => reply.ok)).toHaveLength(2);
    expect(r.host.inFlight(k.keyId)).toBe(2);
    for (const [i, reply] of replies.entries()) if (reply.ok) await settle(settlementFor(k, reply.holdId, `t${i}`, 0n, 1n));
    expect(r.host.inFlight(k.keyId)).toBe(0);
  });

  it(`${name}: a limit that cannot be checked (the database is away) refuses with 503 and gives the slot back`, async () => {
    const k = await keyWith(r, 10_000_000n);
    await r.keys.setLimits(k.keyId, { monthlySpendCapMicro: 1_000_000_000n });
    await r.keys.get(k.keyId); // cached, so that only the month's spend reads the database
    const rows = r.db.rows;
    r.db.rows = () => Promise.reject(new Error("connection refused"));
    try {
      const refused = await admit(k, "u1", 1n);
      expect(refused.ok ? null : refused.failure.code).toBe("service_unavailable");
    } finally {
      r.db.rows = rows;
    }
    expect(r.host.inFlight(k.keyId)).toBe(0);
    const [a, b] = [await admit(k, "u2", 1n), await admit(k, "u3", 1n)];
    expect([a.ok, b.ok]).toEqual([true, true]);
    if (a.ok) await settle(settlementFor(k, a.holdId, "u2", 0n, 1n));
    if (b.ok) await settle(settlementFor(k, b.holdId, "u3", 0n, 1n));
  });

  it(`${name}: an idle sweep while the database is away keeps the lease's money, and gives it back once it returns`, async () => {
    const k = await keyWith(r, 10_000_000n);
    const admitted = await admit(k, "i1", 1_000n);
    if (!admitted.ok) throw new Error("not admitted");
    await settle({ ...settlementFor(k, admitted.holdId, "i1", 0n, 1_000n), usage: { input: 0n, output: 0n } });
    const held = (await wallet(k))!.heldMicro;
    const slack = r.host.slackMicro();
    expect(held).toBeGreaterThan(0n);
    const rows = r.db.rows;
    const failedBefore = new Map(backgroundFailures());
    r.db.rows = () => Promise.reject(new Error("connect ECONNREFUSED"));
    try {
      await r.host.sweepIdle(0); // the shrink and the close both fail: neither throws
    } finally {
      r.db.rows = rows;
    }
    // Each failure is counted (darvaze_background_failures_total{task}) for an operator to see.
    const failed = new Map(backgroundFailures());
    expect(failed.get("lease_shrink") ?? 0).toBeGreaterThan(failedBefore.get("lease_shrink") ?? 0);
    // Nothing given back, so nothing forgotten: the lease still has in memory what the ledger holds.
    expect(r.host.slackMicro()).toBe(slack);
    expect((await wallet(k))!.heldMicro).toBe(held);
    await r.host.sweepIdle(0);
    expect(await wallet(k)).toEqual({ balanceMicro: 10_000_000n, heldMicro: 0n });
    expect(r.host.slackMicro()).toBeLessThanOrEqual(slack - held); // other keys of this suite went idle too
  });

  it(`${name}: an idle sweep gives an account's lease back while another account's give-back hangs`, async () => {
    const [stuck, free] = [await keyWith(r, 10_000_000n), await keyWith(r, 10_000_000n)];
    const holds: string[] = [];
    for (const [k, id] of [
      [stuck, "h1"],
      [free, "h2"],
    ] as const) {
      const admitted = await admit(k, id, 1_000n);
      if (!admitted.ok) throw new Error("not admitted");
      holds.push(admitted.holdId);
      await settle({ ...settlementFor(k, admitted.holdId, id, 0n, 1_000n), usage: { input: 0n, output: 0n } });
    }
    const rows = r.db.rows;
    const hang = Promise.withResolvers<void>();
    // The stuck account's statements wait (a connection that stopped answering); the other's run.
    r.db.rows = (async (query) => {
      if (query.queryChunks.includes(holds[0]!)) await hang.promise;
      return rows(query);
    }) as Db["rows"];
    try {
      const sweep = r.host.sweepIdle(0);
      await until(async () => (await wallet(free))!.heldMicro === 0n, 10_000);
      expect((await wallet(stuck))!.heldMicro).toBeGreaterThan(0n);
      hang.resolve();
      await sweep;
    } finally {
      r.db.rows = rows;
      hang.resolve();
    }
    await r.host.sweepIdle(0);
    expect((await wallet(stuck))!.heldMicro).toBe(0n);
  });

  it(`${name}: a drained lease whose charges are posted is closed at once, while the node's other usage is not confirmed`, async () => {
    const k = await keyWith(r, 10_000_000n);
    const admitted = await admit(k, "p1", 1_000n);
    if (!admitted.ok) throw new Error("not admitted");
    await settle(settlementFor(k, admitted.holdId, "p1", 1n, 1_000n));
    await r.writer.flush(); // its charge is in the ledger
    const posted = r.writer.posted;
    r.writer.posted = () => new Promise(() => {}); // other usage of the node never confirmed
    try {
      const sweep = r.host.sweepIdle(0);
      await until(async () => (await wallet(k))!.heldMicro === 0n, 10_000);
      await sweep;
    } finally {
      r.writer.posted = posted;
    }
  });

  it(`${name}: a request in flight is not admitted twice, and its settle frees the slot`, async () => {
    const k = await keyWith(r, 10_000_000n);
    const first = await admit(k, "d1", 1n);
    if (!first.ok) throw new Error("not admitted");
    const again = await admit(k, "d1", 1n);
    expect(again.ok ? null : again.failure.code).toBe("invalid_request");
    expect(r.host.inFlight(k.keyId)).toBe(1);
    await settle(settlementFor(k, first.holdId, "d1", 0n, 1n));
    expect(r.host.inFlight(k.keyId)).toBe(0);
  });

  it(`${name}: extend grows a reserve from the lease, then from the wallet, and refuses past it`, async () => {
    const seed = 10_000_000n;
    const k = await keyWith(r, seed);
    // The lease holds the reserve, or the whole balance (then 1,000 micro-toman stay as room).
    const admitted = await admit(k, "e1", seed - 1_000n);
    if (!admitted.ok) throw new Error("not admitted");
    expect(await extend(k, "e1", admitted.holdId, 600n)).toEqual({ ok: true, reserveMicro: seed - 400n });
    const refused = await extend(k, "e1", admitted.holdId, 2_000n);
    expect(refused.ok ? null : refused.failure.code).toBe("insufficient_quota");
    expect((await extend(k, "e1", "hold_other", 1n)).ok).toBe(false);
    await topUp(r.db, k.accountId, 5_000n, `extend-${k.accountId}`);
    expect(await extend(k, "e1", admitted.holdId, 2_000n)).toEqual({ ok: true, reserveMicro: seed + 1_600n });
    const held = (await wallet(k))!.heldMicro;
    expect(held >= seed + 1_600n && held <= seed + 2_000n).toBe(true);
    // A cut stream bills at most what it delivered: the rest is written off.
    const settled = await settle({ ...settlementFor(k, admitted.holdId, "e1", 1_000n, seed + 1_600n), billedMicroMax: 7_000n });
    expect(settled).toEqual({ ok: true, billedMicro: 7_000n, meteredMicro: 54_135_000n });
    await r.host.releaseAll();
    expect(await wallet(k)).toEqual({ balanceMicro: seed + 5_000n - 7_000n, heldMicro: 0n });
  });

  it(`${name}: usage beyond the reserve and the lease's room grows the hold from the wallet`, async () => {
    const seed = 3_000_000_000n; // 3,000 toman: more than one lease
    const k = await keyWith(r, seed);
    const admitted = await admit(k, "o1", 1_000_000n);
    if (!admitted.ok) throw new Error("not admitted");
    // The lease holds at most 1,000 toman (the minimum lease): 30,000 output tokens × 54,000 +
    // 135,000 is past all of it.
    expect((await wallet(k))!.heldMicro).toBeLessThanOrEqual(1_000_000_000n);
    const s = settlementFor(k, admitted.holdId, "o1", 30_000n, 1_000_000n);
    expect(await settle(s)).toEqual({ ok: true, billedMicro: 1_620_135_000n, meteredMicro: 1_620_135_000n });
    await r.host.releaseAll();
    expect(await wallet(k)).toEqual({ balanceMicro: seed - 1_620_135_000n, heldMicro: 0n });
  });

  it(`${name}: opening the next lease does not wait for the last one's charges to be posted`, async () => {
    const k = await keyWith(r, 3_000_000_000n); // 3,000 toman: room for a second lease
    const first = await admit(k, "n1", 1_000_000n); // a lease of 1,000 toman
    if (!first.ok) throw new Error("not admitted");
    await settle(settlementFor(k, first.holdId, "n1", 0n, 1_000_000n));
    // The usage writer is slow to post: closing the drained lease waits for it.
    const posted = r.writer.posted.bind(r.writer);
    const flushed = Promise.withResolvers<void>();
    r.writer.posted = () => flushed.promise.then(posted);
    try {
      // More than the lease has left: the actor retires it and opens the next one. The 2 s bound
      // makes an admission that waits for the held flush fail here rather than hang the test.
      const second = await Promise.race([admit(k, "n2", 1_500_000_000n), Bun.sleep(2_000).then(() => null)]);
      expect(second?.ok).toBe(true);
      if (!second?.ok) return;
      expect(second.holdId).not.toBe(first.holdId);
      flushed.resolve();
      await settle(settlementFor(k, second.holdId, "n2", 0n, 1_500_000_000n));
    } finally {
      flushed.resolve();
      r.writer.posted = posted;
    }
    await r.host.releaseAll();
    expect(await wallet(k)).toEqual({ balanceMicro: 3_000_000_000n - 270_000n, heldMicro: 0n });
  });

  it(`${name}: the next lease is opened ahead, so the request that finds the current one spent writes no hold`, async () => {
    const k = await keyWith(r, 100_000_000_000n); // 100,000 toman: every lease filled whole
    const holdsOf = async () =>
      (await r.db.rows<{ id: string }>(sql`SELECT id FROM holds WHERE account_id = ${k.accountId} ORDER BY created_at`)).map((h) => h.id);
    const first = await admit(k, "a1", 1_000_000n); // a lease of 1,000 toman (the minimum)
    if (!first.ok) throw new Error("not admitted");
    // 760 toman more leaves the lease less than a quarter of its room: the next opens behind it.
    const second = await admit(k, "a2", 760_000_000n);
    if (!second.ok) throw new Error("not admitted");
    expect(second.holdId).toBe(first.holdId);
    await until(async () => (await holdsOf()).length === 2);
    const [, ahead] = await holdsOf();
    // More than the first lease has left (another key of the account: this one has two in flight):
    // taken from the one opened ahead, no third hold written.
    const { record } = await r.keys.create(k.accountId, "second", { concurrencyMax: 2 });
    const k2: TestKey = { accountId: k.accountId, keyId: record.id };
    const third = await admit(k2, "a3", 300_000_000n);
    if (!third.ok) throw new Error("not admitted");
    expect(third.holdId).toBe(ahead!);
    expect((await holdsOf()).length).toBe(2);
    await settle(settlementFor(k, first.holdId, "a1", 0n, 1_000_000n));
    await settle(settlementFor(k, second.holdId, "a2", 0n, 760_000_000n));
    await settle(settlementFor(k2, third.holdId, "a3", 0n, 300_000_000n));
    await r.host.releaseAll();
    // The spent lease closes once its charges are posted, in the background.
    await until(async () => (await wallet(k))?.heldMicro === 0n);
    expect(await wallet(k)).toEqual({ balanceMicro: 100_000_000_000n - 3n * 135_000n, heldMicro: 0n });
  });

  it(`${name}: no lease is opened ahead that the wallet cannot fill whole`, async () => {
    const k = await keyWith(r, 1_500_000_000n); // 1,500 toman: one lease of 1,000, not a second
    const { record } = await r.keys.create(k.accountId, "second", { concurrencyMax: 2 });
    const k2: TestKey = { accountId: k.accountId, keyId: record.id };
    const drawn = [
      [k, "b1", 1_000_000n],
      [k, "b2", 500_000_000n],
      // The lease's room falls below a quarter (239 toman): a lease sized for this reserve would
      // want 4,160 toman, and the wallet has 500 besides the lease.
      [k2, "b3", 260_000_000n],
    ] as const;
    const holdIds: string[] = [];
    for (const [key, requestId, reserve] of drawn) {
      const got = await admit(key, requestId, reserve);
      if (!got.ok) throw new Error("not admitted");
      holdIds.push(got.holdId);
    }
    // More than the lease has left: it is retired (its 239 toman of room back to the wallet) and the
    // next opened with what the wallet has, 739 toman; a lease opened ahead would have held the 500.
    const fourth = await admit(k2, "b4", 300_000_000n);
    if (!fourth.ok) throw new Error("not admitted");
    const holds = await r.db.rows<{ id: string; amount_micro: unknown }>(
      sql`SELECT id, amount_micro FROM holds WHERE account_id = ${k.accountId} ORDER BY created_at`,
    );
    expect(holds.map((h) => [h.id === fourth.holdId, BigInt(String(h.amount_micro))])).toEqual([
      [false, 761_000_000n],
      [true, 739_000_000n],
    ]);
    for (const [i, [key, requestId, reserve]] of drawn.entries()) await settle(settlementFor(key, holdIds[i]!, requestId, 0n, reserve));
    await settle(settlementFor(k2, fourth.holdId, "b4", 0n, 300_000_000n));
    await r.host.releaseAll();
    // The retired lease closes once its charges are posted, in the background.
    await until(async () => (await wallet(k))?.heldMicro === 0n);
    expect(await wallet(k)).toEqual({ balanceMicro: 1_500_000_000n - 4n * 135_000n, heldMicro: 0n });
  });

  it(`${name}: keys of one account share this node's lease: another key's first request touches no database`, async () => {
    const k = await keyWith(r, 10_000_000_000n);
    const first = await admit(k, "p1", 1_000n);
    if (!first.ok) throw new Error("not admitted");
    const { record } = await r.keys.create(k.accountId, "second", { concurrencyMax: 2 });
    const k2: TestKey = { accountId: k.accountId, keyId: record.id };
    await r.keys.get(k2.keyId); // cached, as the edge's authentication leaves it
    const rows = r.db.rows;
    r.db.rows = () => Promise.reject(new Error("connection refused"));
    let second: Awaited<ReturnType<typeof admit>>;
    try {
      second = await admit(k2, "p2", 1_000n);
    } finally {
      r.db.rows = rows;
    }
    expect(second.ok ? second.holdId : second.failure.code).toBe(first.holdId);
    if (!second.ok) return;
    await settle({ ...settlementFor(k, first.holdId, "p1", 0n, 1_000n), usage: { input: 0n, output: 0n } });
    await settle({ ...settlementFor(k2, second.holdId, "p2", 0n, 1_000n), usage: { input: 0n, output: 0n } });
    await r.host.releaseAll();
    expect(await wallet(k)).toEqual({ balanceMicro: 10_000_000_000n, heldMicro: 0n });
  });

  it(`${name}: a node short of money has another node's lease of the account recalled, and waits for it`, async () => {
    const k = await keyWith(r, 1_500_000_000n); // 1,500 toman: another node leases 1,000 of it
    const other = new KeyActorHost({ db: r.db, keys: r.keys, writer: r.writer, log: silentLogger }, (recall) =>
      r.server.publish(WALLET_RECALLS, r.subjects.walletRecalls, recall),
    );
    const unserve = other.serve(r.server, r.subjects, []); // recalls only: every admission here goes to r.host
    await r.server.flush();
    try {
      const { record } = await r.keys.create(k.accountId, "elsewhere", { concurrencyMax: 2 });
      const k2: TestKey = { accountId: k.accountId, keyId: record.id };
      const there = await other.admit({
        keyId: k2.keyId,
        requestId: "q1",
        model: "gpt-4o-mini",
        reserveMicro: 1_000n,
        reserveTokens: 10,
        exact: false,
      });
      if (!there.ok) throw new Error("not admitted on the other node");
      expect((await wallet(k))!.heldMicro).toBe(1_000_000_000n);
      // 800 toman, exact: 500 are free, so this node has the other's slack recalled and waits for it.
      const here = await admit(k, "q2", 800_000_000n, true);
      expect(here.ok ? here.holdId : here.failure.code).not.toBe(there.holdId);
      expect(other.slackMicro()).toBe(0n);
      // The wait left nothing behind in the purse (each retry's wait removes itself once woken or timed out).
      const purses = (r.host as unknown as { purses: Map<string, { waiting: Set<unknown> }> }).purses;
      expect(purses.get(k.accountId)?.waiting.size).toBe(0);
      if (!here.ok) return;
      await other.settle({ ...settlementFor(k2, there.holdId, "q1", 0n, 1_000n), usage: { input: 0n, output: 0n } });
      await settle({ ...settlementFor(k, here.holdId, "q2", 0n, 800_000_000n), usage: { input: 0n, output: 0n } });
      await other.releaseAll();
      await r.host.releaseAll();
      expect(await wallet(k)).toEqual({ balanceMicro: 1_500_000_000n, heldMicro: 0n });
    } finally {
      unserve();
    }
  });

  it(`${name}: a node does not answer its own recall; one from a node of the previous release (no fromHost) is answered`, async () => {
    const [mine, theirs] = [await keyWith(r, 10_000_000_000n), await keyWith(r, 10_000_000_000n)];
    for (const [k, id] of [
      [mine, "m1"],
      [theirs, "m2"],
    ] as const) {
      const a = await admit(k, id, 1_000n);
      if (!a.ok) throw new Error("not admitted");
      await settle({ ...settlementFor(k, a.holdId, id, 0n, 1_000n), usage: { input: 0n, output: 0n } });
    }
    const heldBefore = (await wallet(mine))!.heldMicro;
    expect(heldBefore).toBeGreaterThan(0n);
    r.server.publish(WALLET_RECALLS, r.subjects.walletRecalls, {
      accountId: mine.accountId,
      fromKeyId: mine.keyId,
      fromHost: r.host.hostId,
    });
    r.server.publish(WALLET_RECALLS, r.subjects.walletRecalls, { accountId: theirs.accountId, fromKeyId: "key_elsewhere" });
    // Recalls are handled in order: once the second is answered, the first was seen (and left alone).
    await until(async () => (await wallet(theirs))!.heldMicro === 0n);
    expect((await wallet(mine))!.heldMicro).toBe(heldBefore);
    await r.host.releaseAll();
  });

  it(`${name}: a revoked key is refused, also after the actor has served it`, async () => {
    const k = await keyWith(r, 1_000_000n);
    const served = await admit(k, "x0", 1n);
    if (!served.ok) throw new Error("not admitted");
    await settle(settlementFor(k, served.holdId, "x0", 0n, 1n));
    await r.keys.revoke(k.keyId);
    const refused = await admit(k, "x1", 1n);
    expect(refused.ok ? null : refused.failure.code).toBe("invalid_api_key");
  });
}

describe("key actor on the in-process bus", () => {
  contract(
    "local",
    async () => {
      const bus = new LocalBus();
      return { server: bus, client: bus };
    },
    (name, fn) => test(name, fn),
  );
});

describeWith(["nats"], "key actor over NATS", (it) => {
  contract(
    "nats",
    async () => ({
      server: await NatsBus.connect(process.env.NATS_URL!, "actor-test-server"),
      client: await NatsBus.connect(process.env.NATS_URL!, "actor-test-client"),
    }),
    it,
  );
});
