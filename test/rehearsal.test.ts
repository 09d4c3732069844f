/**
 * The start-up rehearsal (src/rehearsal.ts): before its port opens, a node serves itself a whole
 * chat and a stream on an account and a model of its own, at zero cost. What it leaves must be
 * nothing a customer or an operator's figures can see, and a rehearsal that fails must not stop
 * the start.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sql } from "drizzle-orm";
import { openPostgres } from "../src/db/client.ts";
import { auditLedger } from "../src/ledger/audit.ts";
import { ensureRehearsalAccount, REHEARSAL_ACCOUNT_ID } from "../src/ledger/wallets.ts";
import type { Logger } from "../src/log.ts";
import { REHEARSAL_MODEL_ID, rehearse } from "../src/rehearsal.ts";
import { startSimulator } from "../src/sim/server.ts";
import { ADMIN_TOKEN, dropUsageStream, freshDatabase, migratedDb, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { clusterEnv, spawnGateway } from "./processes.ts";
import { describeWith } from "./services.ts";
import { until } from "./until.ts";

type Line = { level: string; event: string } & Record<string, unknown>;

function collecting(): { lines: Line[]; log: Logger } {
  const lines: Line[] = [];
  return { lines, log: (level, event, fields) => lines.push({ ...fields, level, event }) };
}

interface RehearsalRow {
  model: string;
  operation: string;
  status: number;
  billed_micro: unknown;
  metered_micro: unknown;
  anomalies: string | null;
}

const rehearsalRows = (t: TestGateway) =>
  t.gw.deps.db.rows<RehearsalRow>(
    sql`SELECT model, operation, status, billed_micro, metered_micro, anomalies FROM usage_records WHERE account_id = ${REHEARSAL_ACCOUNT_ID}`,
  );

describe("a node that rehearses at start", () => {
  let t: TestGateway;
  const { lines, log } = collecting();
  beforeAll(async () => {
    t = await startTestGateway({ START_REHEARSAL: "true" }, { log });
  }, SETUP_MS_MAX);
  afterAll(async () => t?.stop(), SETUP_MS_MAX);

  test("served itself a whole chat and a stream before it listened, at zero cost, and kept no key", async () => {
    const rehearsed = lines.findIndex((l) => l.event === "rehearsed");
    expect(lines[rehearsed]).toMatchObject({ level: "info", statuses: [200, 200] });
    expect(rehearsed).toBeLessThan(lines.findIndex((l) => l.event === "listening"));
    expect(lines.filter((l) => l.event === "rehearsal_failed")).toEqual([]);
    await until(async () => (await rehearsalRows(t)).length === 2);
    for (const row of await rehearsalRows(t)) {
      expect({ ...row, billed_micro: Number(row.billed_micro), metered_micro: Number(row.metered_micro) }).toEqual({
        model: REHEARSAL_MODEL_ID,
        operation: "chat",
        status: 200,
        billed_micro: 0,
        metered_micro: 0,
        anomalies: null,
      });
    }
    const { db } = t.gw.deps;
    expect(await db.rows(sql`SELECT id FROM api_keys WHERE account_id = ${REHEARSAL_ACCOUNT_ID}`)).toEqual([]);
    const [wallet] = await db.rows<{ balance: unknown; held: unknown }>(
      sql`SELECT balance_micro AS balance, held_micro AS held FROM wallets WHERE account_id = ${REHEARSAL_ACCOUNT_ID}`,
    );
    expect([Number(wallet!.balance), Number(wallet!.held)]).toEqual([0, 0]);
    expect((await auditLedger(db)).checks.filter((c) => !c.ok)).toEqual([]);
  });

  test("no customer can list or call its model; the operator's revenue, anomalies and metrics leave it out", async () => {
    await until(async () => (await rehearsalRows(t)).length === 2);
    // Before any customer's request: the revenue is the rehearsal's alone, and shows nothing.
    const revenue = await t.admin("GET", "/admin/revenue?from=2000-01-01T00:00:00Z");
    expect([revenue.body.requests, revenue.body.revenue_micro_toman, revenue.body.by_model]).toEqual([0, "0", []]);
    expect((await t.admin("GET", "/admin/anomalies?from=2000-01-01T00:00:00Z")).body.data).toEqual([]);

    const { key } = await t.fundedKey(1_000);
    const headers = { authorization: `Bearer ${key}`, "content-type": "application/json" };
    const models = (await (await fetch(`${t.url}/v1/models`, { headers })).json()) as { data: { id: string }[] };
    expect(models.data.length).toBeGreaterThan(0);
    expect(models.data.map((m) => m.id)).not.toContain(REHEARSAL_MODEL_ID);
    const named = await fetch(`${t.url}/v1/chat/completions`, {
      method: "POST",
      headers,
      body: JSON.stringify({ model: REHEARSAL_MODEL_ID, messages: [{ role: "user", content: "hi" }] }),
    });
    expect(named.status).toBe(404);
    expect(((await named.json()) as { error: { code: string } }).error.code).toBe("model_not_found");

    const metrics = await (await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).text();
    expect(metrics).not.toContain(REHEARSAL_MODEL_ID);
    // Its requests wrote no access line either.
    expect(lines.filter((l) => JSON.stringify(l).includes(REHEARSAL_MODEL_ID))).toEqual([]);
  });

  test("a catalog without a chat model has nothing to rehearse: skipped, said so", async () => {
    const skipping = collecting();
    const catalog = Object.create(t.gw.deps.catalog, { list: { value: () => [] } });
    expect(await rehearse({ ...t.gw.deps, catalog, log: skipping.log })).toBeNull();
    expect(skipping.lines).toEqual([expect.objectContaining({ level: "info", event: "rehearsal_skipped" })]);
  });

  test("a rehearsal that fails is logged and returns; the node goes on", async () => {
    const failing = collecting();
    const keys = Object.create(t.gw.deps.keys, { create: { value: () => Promise.reject(new Error("database away")) } });
    expect(await rehearse({ ...t.gw.deps, keys, log: failing.log })).toBeNull();
    expect(failing.lines).toEqual([expect.objectContaining({ level: "warn", event: "rehearsal_failed", error: "database away" })]);
  });
});

test(
  "a node started again on its data folder rehearses again, on the same account",
  async () => {
    const folder = mkdtempSync(join(tmpdir(), "darvaze-rehearsal-"));
    try {
      for (let start = 1; start <= 2; start++) {
        const { lines, log } = collecting();
        const t = await startTestGateway({ START_REHEARSAL: "true" }, { log, dataFolder: folder });
        try {
          expect(lines.find((l) => l.event === "rehearsed" || l.event === "rehearsal_failed")).toMatchObject({ event: "rehearsed" });
          await until(async () => (await rehearsalRows(t)).length === 2 * start);
          const accounts = await t.gw.deps.db.rows(sql`SELECT id FROM accounts WHERE id = ${REHEARSAL_ACCOUNT_ID}`);
          expect(accounts).toHaveLength(1);
        } finally {
          await t.stop();
        }
      }
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  },
  SETUP_MS_MAX * 2,
);

test("starts that make the rehearsal's account at once make one account and one wallet", async () => {
  const { db, close } = await migratedDb();
  try {
    await Promise.all(Array.from({ length: 4 }, () => ensureRehearsalAccount(db)));
    const [row] = await db.rows<{ accounts: unknown; wallets: unknown }>(sql`
      SELECT (SELECT count(*) FROM accounts WHERE id = ${REHEARSAL_ACCOUNT_ID}) AS accounts,
             (SELECT count(*) FROM wallets WHERE account_id = ${REHEARSAL_ACCOUNT_ID}) AS wallets`);
    expect([Number(row!.accounts), Number(row!.wallets)]).toEqual([1, 1]);
  } finally {
    await close();
  }
});

describeWith(["nats", "postgres"], "the rehearsals of a cluster's nodes", (it) => {
  it(
    "two gateway processes on one database and NATS each rehearse on the shared account, and give its lease back",
    async () => {
      const database = (await freshDatabase())!;
      const sim = await startSimulator();
      const env = clusterEnv(database.url, sim, { START_REHEARSAL: "true", LEASE_TTL_MS: "60000" });
      const nodes = [];
      try {
        for (let i = 0; i < 2; i++) nodes.push(await spawnGateway(env));
        for (const node of nodes) expect(node.startLog).toMatch(/"event":"rehearsed","statuses":\[200,200\]/);
        const db = await openPostgres(database.url);
        try {
          await until(
            async () => (await db.rows(sql`SELECT 1 FROM usage_records WHERE account_id = ${REHEARSAL_ACCOUNT_ID}`)).length === 4,
          );
          // The rehearsal's leases given back: no pending hold of its account is left.
          await until(
            async () =>
              (await db.rows(sql`SELECT 1 FROM holds WHERE account_id = ${REHEARSAL_ACCOUNT_ID} AND status = 'pending'`)).length === 0,
          );
          expect(await db.rows(sql`SELECT id FROM api_keys WHERE account_id = ${REHEARSAL_ACCOUNT_ID}`)).toEqual([]);
        } finally {
          await db.close();
        }
      } finally {
        for (const node of nodes) await node.kill();
        await sim.stop();
        await dropUsageStream(env.DARVAZE_SUBJECT_PREFIX!);
        await database.drop();
      }
    },
    SETUP_MS_MAX * 2,
  );
});
