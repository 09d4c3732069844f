/**
 * A node outlives a PostgreSQL outage longer than its idle sweep (NATS + PostgreSQL, the
 * production set-up; the database behind a fault proxy that cuts every connection and refuses new
 * ones). While it is away: a key with an open lease is served, a key not yet cached gets 503, the
 * idle sweep's lease shrinks fail without losing the lease's money, and nothing is left
 * unhandled (bun test fails on any unhandled rejection). After it: every key is served again, the
 * leases close, and the ledger audit passes.
 */
import { afterAll, beforeAll, expect } from "bun:test";
import { IDLE_SWEEP_INTERVAL_MS } from "../actors/key/host.ts";
import { getWallet } from "../src/ledger/wallets.ts";
import { FaultProxy } from "./chaos/proxy.ts";
import { freshDatabase, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { describeWith } from "./services.ts";
import { until } from "./until.ts";

/** Longer than one idle sweep: the node's own sweep runs at least once while the database is away. */
const OUTAGE_MS = IDLE_SWEEP_INTERVAL_MS + 1_000;
/** A request that needs the database waits at most one connect timeout (3 s) before its 503. */
const OUTAGE_REPLY_MS_MAX = 10_000;

describeWith(["nats", "postgres"], "PostgreSQL outage", (it) => {
  let proxy: FaultProxy;
  let database: Awaited<ReturnType<typeof freshDatabase>>;
  let t: TestGateway;

  beforeAll(async () => {
    database = await freshDatabase();
    const url = new URL(database!.url);
    proxy = FaultProxy.start(Number(url.port || 5432));
    url.host = `127.0.0.1:${proxy.port}`;
    t = await startTestGateway({ DATABASE_URL: url.toString() });
  }, SETUP_MS_MAX);
  afterAll(async () => {
    await t?.stop();
    proxy?.stop();
    await database?.drop();
  }, SETUP_MS_MAX);

  const chat = async (key: string) => {
    const response = await fetch(`${t.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }], max_tokens: 2 }),
    });
    const body = (await response.json()) as { error?: { code: string } };
    return { status: response.status, code: body.error?.code ?? null };
  };

  it("the node stays up: open leases serve, the rest is 503, an idle sweep loses nothing; all recovers and the audit passes", async () => {
    const leased = await t.fundedKey(100);
    const idle = await t.fundedKey(100);
    const uncached = await t.fundedKey(100);
    expect((await chat(leased.key)).status).toBe(200);
    expect((await chat(idle.key)).status).toBe(200);
    const { db, writer } = t.gw.deps;
    await writer.posted();
    const heldBefore = (await getWallet(db, idle.accountId))!.heldMicro;
    expect(heldBefore).toBeGreaterThan(0n);

    proxy.cut = true;
    const cutAtMs = performance.now();
    try {
      // Served from the lease it holds in memory; its usage waits in the usage log (NATS).
      expect(await chat(leased.key)).toEqual({ status: 200, code: null });
      // Its key is not cached: looking it up needs the database.
      const started = performance.now();
      expect(await chat(uncached.key)).toEqual({ status: 503, code: "service_unavailable" });
      expect(performance.now() - started).toBeLessThan(OUTAGE_REPLY_MS_MAX);
      // Every lease is idle now: giving the slack back fails, and the money stays with the lease.
      const slack = t.gw.keyHost.slackMicro();
      await t.gw.keyHost.sweepIdle(0);
      expect(t.gw.keyHost.slackMicro()).toBe(slack);
      // A retired lease admits nothing, and a new one needs the database.
      expect((await chat(leased.key)).status).toBe(503);
      await until(() => performance.now() - cutAtMs >= OUTAGE_MS, OUTAGE_MS + 1_000);
      expect((await fetch(`${t.url}/health`)).status).toBe(200);
    } finally {
      proxy.cut = false;
    }

    // Back: every key is served again (the pool reconnects within about a second).
    await until(async () => (await chat(uncached.key)).status === 200, 30_000);
    expect((await chat(leased.key)).status).toBe(200);
    expect((await chat(idle.key)).status).toBe(200);
    await t.gw.keyHost.releaseAll();
    await writer.posted();
    await until(async () => (await t.admin("GET", "/admin/ledger/audit")).body.ok === true, 30_000);
    const audit = await t.admin("GET", "/admin/ledger/audit");
    expect(audit.body.checks.filter((c: { ok: boolean }) => !c.ok)).toEqual([]);
    for (const account of [leased, idle, uncached]) expect((await getWallet(db, account.accountId))!.heldMicro).toBe(0n);
  }, 120_000);
});
