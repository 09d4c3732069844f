/**
 * kill -9 of a gateway under load, on PostgreSQL + NATS: after a restart and the lease deadline,
 * no hold is left pending, the audit passes, and the only usage missing (against the simulator's
 * own log) is that of requests that ended within the durability bound (USAGE_FLUSH_MS) of the kill
 * or were still in flight.
 */
import { afterAll, beforeAll, expect } from "bun:test";
import { sql } from "drizzle-orm";
import { openPostgres } from "../src/db/client.ts";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { USAGE_ACK_WAIT_MS } from "../src/ledger/stream.ts";
import { ADMIN_TOKEN, dropUsageStream, freshDatabase, SETUP_MS_MAX, until } from "./helpers.ts";
import { clusterEnv, spawnGateway, type GatewayProcess } from "./processes.ts";
import { describeWith } from "./services.ts";

const LEASE_TTL_MS = 3_000;
const USAGE_FLUSH_MS = 100;
const WORKERS = 16;
const LOAD_BEFORE_KILL_MS = 1_500;
/** Scheduling slack on a busy 2-core machine between the kill and the child's last write. */
const KILL_SLACK_MS = 50;
/**
 * Past the usage consumer's ack wait: records the killed node's consumer had pulled come back to
 * the survivor only after it, and their holds must still be pending then.
 */
const HOLD_EXPIRY_GRACE_MS = USAGE_ACK_WAIT_MS + 5_000;
/** How long the usage and the holds may take to settle after the restart. */
const SETTLE_MS_MAX = LEASE_TTL_MS + HOLD_EXPIRY_GRACE_MS + 15_000;

describeWith(["nats", "postgres"], "kill -9 under load", (it) => {
  let sim: Simulator;
  let database: { url: string; drop: () => Promise<void> };
  const nodes: GatewayProcess[] = [];
  let env: Record<string, string | undefined>;

  beforeAll(async () => {
    sim = await startSimulator({ itlMs: 1 });
    database = (await freshDatabase())!;
    env = clusterEnv(database.url, sim, {
      LEASE_TTL_MS: String(LEASE_TTL_MS),
      HOLD_SWEEP_INTERVAL_MS: "250",
      // The killed node's holds expire this long past their deadline: what this test waits for.
      HOLD_EXPIRY_GRACE_MS: String(HOLD_EXPIRY_GRACE_MS),
      USAGE_FLUSH_MS: String(USAGE_FLUSH_MS),
    });
  }, SETUP_MS_MAX);

  afterAll(async () => {
    for (const node of nodes) await node.kill("SIGKILL");
    await sim.stop();
    await database.drop();
    await dropUsageStream(env.DARVAZE_SUBJECT_PREFIX!);
  }, SETUP_MS_MAX);

  it(
    "loses only the usage within the durability bound, and leaves no hold pending",
    async () => {
      const first = await spawnGateway(env);
      nodes.push(first);
      const admin = async (method: string, path: string, body?: unknown) =>
        (
          await fetch(first.url + path, {
            method,
            headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
            body: body ? JSON.stringify(body) : undefined,
          })
        ).json() as Promise<any>;
      const account = await admin("POST", "/admin/accounts", { name: "crash" });
      await admin("POST", `/admin/accounts/${account.id}/topups`, { amount_toman: 1_000_000, reference: "seed" });
      const { key } = await admin("POST", `/admin/accounts/${account.id}/keys`, { name: "k", concurrency_max: 1000 });

      let stop = false;
      let ok = 0;
      const body = JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hello, world!" }], max_tokens: 10 });
      const worker = async () => {
        while (!stop) {
          try {
            const response = await fetch(`${first.url}/v1/chat/completions`, {
              method: "POST",
              headers: { authorization: `Bearer ${key}` },
              body,
            });
            await response.arrayBuffer();
            if (response.status === 200) ok++;
          } catch {
            return; // the node is gone
          }
        }
      };
      const load = Promise.all(Array.from({ length: WORKERS }, worker));
      await Bun.sleep(LOAD_BEFORE_KILL_MS); // load before the kill: the scenario's timeline, not a wait
      const killedAt = Date.now();
      first.process.kill("SIGKILL");
      await first.process.exited;
      stop = true;
      await load;
      expect(ok).toBeGreaterThan(100);

      const second = await spawnGateway(env);
      nodes.push(second);
      const db = await openPostgres(database.url);
      try {
        const served = sim.log.entries().filter((e) => e.status === 200 && e.requestId);
        const missing = async () => {
          const recorded = new Set(
            (await db.rows<{ request_id: string }>(sql`SELECT request_id FROM usage_records`)).map((r) => r.request_id),
          );
          return served.filter((e) => !recorded.has(e.requestId!));
        };
        const outsideBound = async () => (await missing()).filter((e) => e.endedAt < killedAt - USAGE_FLUSH_MS - KILL_SLACK_MS);
        const pending = async () =>
          Number((await db.rows<{ n: unknown }>(sql`SELECT count(*) AS n FROM holds WHERE status = 'pending'`))[0]!.n);
        // The usage the killed node's consumer had pulled comes back after the ack wait; its holds end after that.
        await until(async () => (await outsideBound()).length === 0 && (await pending()) === 0, SETTLE_MS_MAX).catch(() => {});
        const lost = await missing();
        process.stdout.write(
          `kill -9: ${served.length} requests served by the upstream, ${served.length - lost.length} usage records, ` +
            `${lost.length} lost (all within ${USAGE_FLUSH_MS} ms + ${KILL_SLACK_MS} ms of the kill or in flight)\n`,
        );
        expect(await outsideBound()).toEqual([]);
        expect(await pending()).toBe(0);
      } finally {
        await db.close();
      }
      const audit = (await (
        await fetch(`${second.url}/admin/ledger/audit`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })
      ).json()) as { ok: boolean; checks: { ok: boolean }[] };
      expect(audit.checks.filter((c) => !c.ok)).toEqual([]);
    },
    SETTLE_MS_MAX + 60_000,
  );
});
