/**
 * kill -9 of NATS under load, then a restart on the same port and store: every request the
 * simulator served is in PostgreSQL. JetStream may lose the messages it had acknowledged but
 * not yet written out, and may hand their sequences to new messages; the nodes keep each record
 * until the ledger has it by request id and publish it again (src/ledger/confirm.ts).
 */
import { afterAll, beforeAll, expect } from "bun:test";
import { sql } from "drizzle-orm";
import { openPostgres } from "../src/db/client.ts";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { ADMIN_TOKEN, freshDatabase, SETUP_MS_MAX } from "./helpers.ts";
import { OwnNats } from "./chaos/services.ts";
import { clusterEnv, spawnGateway, type GatewayProcess } from "./processes.ts";
import { describeWith } from "./services.ts";
import { untilValue } from "./until.ts";

const NODES = 2;
const WORKERS = 16;
const LOAD_BEFORE_KILL_MS = 2_000;
const NATS_DOWN_MS = 1_000;
const LOAD_AFTER_RESTART_MS = 2_000;
/** Kills, each under load: one loss needs the kill to land while the server holds unwritten messages. */
const KILLS = 3;
/** Republishing waits USAGE_REPUBLISH_AFTER_MS (5 s) and the consumer its redelivery; bounded here. */
const CONVERGE_MS_MAX = 40_000;

describeWith(["postgres"], "kill -9 of NATS under load", (it) => {
  let sim: Simulator;
  let nats: OwnNats;
  let database: { url: string; drop: () => Promise<void> };
  const nodes: GatewayProcess[] = [];

  beforeAll(async () => {
    sim = await startSimulator({ itlMs: 1 });
    nats = await OwnNats.start();
    database = (await freshDatabase())!;
  }, SETUP_MS_MAX);

  afterAll(async () => {
    for (const node of nodes) await node.kill("SIGKILL");
    await sim.stop();
    await nats.stop();
    await database.drop();
  }, SETUP_MS_MAX);

  it("loses no usage record: every request the simulator served is in PostgreSQL", async () => {
    // A flush every millisecond: many small messages, so a kill is likelier to land on some not yet written out.
    const env = clusterEnv(database.url, sim, { NATS_URL: nats.url, HOLD_SWEEP_INTERVAL_MS: "250", USAGE_FLUSH_MS: "1" });
    for (let i = 0; i < NODES; i++) nodes.push(await spawnGateway(env));
    const admin = async (method: string, path: string, body?: unknown) =>
      (
        await fetch(nodes[0]!.url + path, {
          method,
          headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
          body: body ? JSON.stringify(body) : undefined,
        })
      ).json() as Promise<any>;
    const account = await admin("POST", "/admin/accounts", { name: "nats-kill" });
    await admin("POST", `/admin/accounts/${account.id}/topups`, { amount_toman: 1_000_000, reference: "seed" });
    const { key } = await admin("POST", `/admin/accounts/${account.id}/keys`, { name: "k", concurrency_max: 1000 });

    let stop = false;
    const statuses = new Map<number, number>();
    const body = JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hello, world!" }], max_tokens: 10 });
    const worker = async (i: number) => {
      while (!stop) {
        const node = nodes[i % NODES]!;
        const response = await fetch(`${node.url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}` },
          body,
        }).catch(() => null);
        await response?.arrayBuffer();
        const status = response?.status ?? 0;
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
        if (status !== 200) await Bun.sleep(20); // a client backing off a little before it tries again
      }
    };
    const load = Promise.all(Array.from({ length: WORKERS }, (_, i) => worker(i)));
    // The scenario's timeline, not waits for a condition: load, then each kill, the time NATS is
    // away, and load again after it is back.
    await Bun.sleep(LOAD_BEFORE_KILL_MS);
    for (let kill = 0; kill < KILLS; kill++) {
      await nats.kill("SIGKILL");
      await Bun.sleep(NATS_DOWN_MS);
      await nats.start();
      await Bun.sleep(LOAD_AFTER_RESTART_MS);
    }
    stop = true;
    await load;
    // Only answers the gateway documents: 200, or 503 while NATS was away.
    expect([...statuses.keys()].filter((s) => s !== 200 && s !== 503)).toEqual([]);
    expect(statuses.get(200) ?? 0).toBeGreaterThan(200);

    const served = sim.log.entries().filter((e) => e.status === 200 && e.requestId);
    const db = await openPostgres(database.url);
    let lost: string[] = [];
    try {
      const missing = async () => {
        const recorded = new Set(
          (await db.rows<{ request_id: string }>(sql`SELECT request_id FROM usage_records`)).map((r) => r.request_id),
        );
        return served.filter((e) => !recorded.has(e.requestId!)).map((e) => e.requestId!);
      };
      const converged = {
        accept: (l: string[]) => l.length === 0,
        msMax: CONVERGE_MS_MAX,
        what: "every served request recorded",
        pollMs: 500,
      };
      // What is still missing at the bound is reported below and fails the test there.
      lost = await untilValue(missing, converged).catch(missing);
      const dead = await db.rows<{ n: unknown }>(sql`SELECT count(*) AS n FROM usage_dead_letters`);
      process.stdout.write(
        `NATS kill -9: ${served.length} requests served, ${lost.length} missing from usage_records, ${Number(dead[0]!.n)} dead-lettered; answers ${JSON.stringify(Object.fromEntries(statuses))}\n`,
      );
      expect(Number(dead[0]!.n)).toBe(0);
    } finally {
      await db.close();
    }
    expect(lost).toEqual([]);
    const audit = (await admin("GET", "/admin/ledger/audit")) as { ok: boolean; checks: { name: string; ok: boolean }[] };
    expect(audit.checks.filter((c) => !c.ok)).toEqual([]);
  }, 120_000);
});
