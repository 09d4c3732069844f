/**
 * The key actor's contract, run on both buses: in-process, and over NATS from a second
 * connection (so every message crosses the broker and is validated on receipt).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ADMIT, SETTLE, type Settlement } from "../protocol.ts";
import { partitionOf, subjects as buildSubjects } from "../subjects.ts";
import { KeyActorHost } from "./host.ts";
import type { Bus } from "../../src/bus/bus.ts";
import { LocalBus } from "../../src/bus/local.ts";
import { NatsBus } from "../../src/bus/nats.ts";
import { openDb, type Db } from "../../src/db/client.ts";
import { migrate } from "../../src/db/migrate.ts";
import { randomBase62 } from "../../src/ids.ts";
import { KeyStore } from "../../src/keys/store.ts";
import { createAccount, getWallet, topUp } from "../../src/ledger/wallets.ts";
import { loadCatalog } from "../../src/catalog/catalog.ts";
import { freshDatabase, SETUP_MS_MAX } from "../../test/helpers.ts";
import { describeWith } from "../../test/services.ts";

interface Rig {
  db: Db;
  host: KeyActorHost;
  client: Bus;
  subjects: ReturnType<typeof buildSubjects>;
  keys: KeyStore;
  accountId: string;
  keyId: string;
  stop(): Promise<void>;
}

async function rig(buses: () => Promise<{ server: Bus; client: Bus }>): Promise<Rig> {
  const database = await freshDatabase();
  const db = await openDb({ databaseUrl: database?.url, dataFolder: null });
  await migrate(db);
  await loadCatalog(db);
  const keys = new KeyStore(db, { prefix: "sk-t-", pepper: randomBase62(40) });
  const account = await createAccount(db, "actor test");
  await topUp(db, account.id, 1_000_000n, "seed"); // 1 toman
  const { record } = await keys.create(account.id, "k", { concurrencyMax: 2 });
  const { server, client } = await buses();
  const subjects = buildSubjects(`t${randomBase62(8)}`);
  const host = new KeyActorHost({ db, keys, holdTtlMs: 60_000 });
  const unserve = host.serve(server, subjects);
  return {
    db,
    host,
    client,
    subjects,
    keys,
    accountId: account.id,
    keyId: record.id,
    async stop() {
      unserve();
      await client.close();
      if (server !== client) await server.close();
      await db.close();
      await database?.drop();
    },
  };
}

function settlementFor(r: Rig, holdId: string, requestId: string, outputUnits: bigint): Settlement {
  return {
    keyId: r.keyId,
    requestId,
    holdId,
    model: "gpt-4o-mini",
    operation: "chat",
    backend: "b1",
    priceVersionId: 1,
    inputUnits: 10n,
    outputUnits,
    inputPricePer1m: 13_500n,
    outputPricePer1m: 54_000n,
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

  const admit = (requestId: string, reserveMicro: bigint) =>
    r.client.request(ADMIT, r.subjects.keyAdmit(partitionOf(r.keyId)), { keyId: r.keyId, requestId, model: "gpt-4o-mini", reserveMicro });
  const settle = (s: Settlement) => r.client.request(SETTLE, r.subjects.keySettle(partitionOf(r.keyId)), s);

  it(`${name}: admit holds the reserve, settle posts the cost and releases the rest`, async () => {
    const admitted = await admit("r1", 700_000n);
    expect(admitted.ok).toBe(true);
    if (!admitted.ok) return;
    expect(await getWallet(r.db, r.accountId)).toEqual({ balanceMicro: 1_000_000n, heldMicro: 700_000n });
    // 10 × 13,500 + 20 × 54,000 = 135,000 + 1,080,000 — more than the hold: capped at 700,000.
    const settled = await settle(settlementFor(r, admitted.holdId, "r1", 20n));
    expect(settled).toEqual({ ok: true, billedMicro: 700_000n, meteredMicro: 1_215_000n });
    expect(await getWallet(r.db, r.accountId)).toEqual({ balanceMicro: 300_000n, heldMicro: 0n });
  });

  it(`${name}: a retried settle posts once`, async () => {
    const admitted = await admit("r2", 200_000n);
    if (!admitted.ok) throw new Error("not admitted");
    const s = settlementFor(r, admitted.holdId, "r2", 1n); // 135,000 + 54,000 = 189,000
    expect(await settle(s)).toEqual({ ok: true, billedMicro: 189_000n, meteredMicro: 189_000n });
    expect(await settle(s)).toEqual({ ok: true, billedMicro: 0n, meteredMicro: 189_000n });
    expect(await getWallet(r.db, r.accountId)).toEqual({ balanceMicro: 111_000n, heldMicro: 0n });
  });

  it(`${name}: a reserve above the available balance is refused with insufficient_quota`, async () => {
    const refused = await admit("r3", 111_001n);
    expect(refused.ok).toBe(false);
    if (refused.ok) return;
    expect(refused.failure.code).toBe("insufficient_quota");
    expect(refused.failure.message).toContain("0.111 toman is available");
    expect(r.host.inFlight(r.keyId)).toBe(0);
  });

  it(`${name}: the third concurrent admission over concurrency_max 2 gets 429, and slots come back`, async () => {
    const a = await admit("c1", 1n);
    const b = await admit("c2", 1n);
    const c = await admit("c3", 1n);
    expect([a.ok, b.ok, c.ok]).toEqual([true, true, false]);
    if (c.ok || !a.ok || !b.ok) return;
    expect(c.failure.code).toBe("concurrency_limit_exceeded");
    expect(c.failure.retryAfterS).toBe(1);
    await settle(settlementFor(r, a.holdId, "c1", 0n));
    await settle(settlementFor(r, b.holdId, "c2", 0n));
    expect(r.host.inFlight(r.keyId)).toBe(0);
    expect((await admit("c4", 1n)).ok).toBe(true);
  });

  it(`${name}: a revoked key is refused`, async () => {
    await r.keys.revoke(r.keyId);
    const refused = await admit("x1", 1n);
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
