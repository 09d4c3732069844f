/**
 * kill -9 of the gateway between the provider's verify reply and the database commit
 * (DARVAZE_FAULT=topup_after_verify makes the process die exactly there). The provider has the
 * payment verified, our record does not: after a restart, the reconciler finds the lapsed claim,
 * verifies again (101) and credits the wallet exactly once; the ledger audit passes.
 */
import { afterAll, beforeAll, expect } from "bun:test";
import { sql } from "drizzle-orm";
import { openPostgres } from "../src/db/client.ts";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { startZarinpalSim, type ZarinpalSim } from "../src/sim/zarinpal/server.ts";
import { ADMIN_TOKEN, dropUsageStream, freshDatabase, SETUP_MS_MAX } from "./helpers.ts";
import { clusterEnv, spawnGateway, type GatewayProcess } from "./processes.ts";
import { describeWith } from "./services.ts";

const MERCHANT = "0b6f4e9a-3c1d-4e8f-9a2b-7c5d6e1f2a3b";
const CLAIM_MS = 1_500;

describeWith(["postgres"], "kill -9 between verify and commit", (it) => {
  let upstream: Simulator;
  let zarinpal: ZarinpalSim;
  let database: { url: string; drop: () => Promise<void> };
  let env: Record<string, string | undefined>;
  const nodes: GatewayProcess[] = [];

  beforeAll(async () => {
    upstream = await startSimulator({});
    zarinpal = await startZarinpalSim({ merchantIds: [MERCHANT] });
    database = (await freshDatabase())!;
    env = clusterEnv(database.url, upstream, {
      ZARINPAL_MERCHANT_ID: MERCHANT,
      ZARINPAL_BASE_URL: zarinpal.url,
      RECONCILE_INTERVAL_MS: "0",
      PAYMENT_TIMEOUT_MS: "1000",
      PAYMENT_VERIFY_CLAIM_MS: String(CLAIM_MS),
    });
  }, SETUP_MS_MAX);

  afterAll(async () => {
    for (const node of nodes) await node.kill("SIGKILL");
    await zarinpal.stop();
    await upstream.stop();
    await database.drop();
    await dropUsageStream(env.DARVAZE_SUBJECT_PREFIX!);
  }, SETUP_MS_MAX);

  it(
    "after a restart the top-up is credited exactly once",
    async () => {
      const admin = (node: GatewayProcess) => async (method: string, path: string, body?: unknown) => {
        const response = await fetch(node.url + path, {
          method,
          headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
          body: body === undefined ? undefined : JSON.stringify(body),
        });
        return { status: response.status, body: (await response.json()) as any };
      };
      const first = await spawnGateway({ ...env, DARVAZE_FAULT: "topup_after_verify" });
      nodes.push(first);
      const account = await admin(first)("POST", "/admin/accounts", { name: "crash" });
      const topup = await admin(first)("POST", "/admin/topups", { account_id: account.body.id, amount_toman: 40_000 });
      expect(topup.status).toBe(201);
      const callback = zarinpal.pay(topup.body.authority, "pay")!;
      // The callback's settle verifies, then the process dies before its commit.
      const reply = await fetch(callback, { redirect: "manual" }).then(
        () => "answered",
        () => "connection lost",
      );
      expect(reply).toBe("connection lost");
      expect(await first.process.exited).not.toBe(0);
      expect(zarinpal.status(topup.body.authority)).toBe("VERIFIED");

      const db = await openPostgres(database.url);
      try {
        const [before] = await db.rows<{ state: string }>(sql`SELECT state FROM topups WHERE id = ${topup.body.id}`);
        expect(before!.state).toBe("verifying");
        const none = await db.rows(sql`SELECT 1 FROM ledger_transfers WHERE reference = ${`topup:pay:${topup.body.id}`}`);
        expect(none).toHaveLength(0);

        const second = await spawnGateway(env);
        nodes.push(second);
        await Bun.sleep(CLAIM_MS + 200); // lets the dead node's claim on the verify lapse: the window under test
        const report = await admin(second)("POST", "/admin/topups/reconcile");
        expect(report.body.verified).toBe(1);
        await admin(second)("POST", "/admin/topups/reconcile");

        const shown = await admin(second)("GET", `/admin/topups/${topup.body.id}`);
        expect(shown.body.state).toBe("verified");
        expect(shown.body.reason).toContain("101");
        const credits = await db.rows<{ amount_micro: string }>(
          sql`SELECT amount_micro::text FROM ledger_transfers WHERE reference = ${`topup:pay:${topup.body.id}`}`,
        );
        expect(credits.map((c) => c.amount_micro)).toEqual(["40000000000"]);
        const wallet = await admin(second)("GET", `/admin/accounts/${account.body.id}`);
        expect(wallet.body.balance_micro_toman).toBe("40000000000");
        const audit = await admin(second)("GET", "/admin/ledger/audit");
        expect(audit.body.ok).toBe(true);
      } finally {
        await db.close();
      }
    },
    SETUP_MS_MAX,
  );
});
