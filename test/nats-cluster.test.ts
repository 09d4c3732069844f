/**
 * The gateway on a NATS cluster of three servers, from the shipped docs/nats/darvaze-cluster.conf
 * (TLS, accounts, passwords as bcrypt hashes), with the usage stream, its dead letters and the KV
 * buckets kept on all three (USAGE_STREAM_REPLICAS=3, NATS_KV_REPLICAS=3). Under load, one server
 * is killed with -9 and started again; only once every stream's copies report current again is
 * another one killed (two down of three would leave no quorum, which no replication survives).
 * Nothing served is lost or billed twice, and every node is ready again within seconds of a kill.
 */
import { afterAll, beforeAll, expect } from "bun:test";
import { sql } from "drizzle-orm";
import type { NatsConnection } from "nats";
import { openPostgres } from "../src/db/client.ts";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { freshDatabase, SETUP_MS_MAX } from "./helpers.ts";
import {
  CLUSTER_SIZE,
  connectAsGateway,
  gatewayNatsEnv,
  type NatsCluster,
  pickVictim,
  startShippedNatsCluster,
  streamsReplicas,
  untilReplicasCurrent,
} from "./natsCluster.ts";
import { adminOf, clusterEnv, fundedKey, spawnGateway, type GatewayProcess } from "./processes.ts";
import { describeWith } from "./services.ts";
import { until } from "./until.ts";

const NODES = 2;
const WORKERS = 8;
/** Requests served between steps, so that each kill lands under load and serving goes on after it. */
const SERVED_BETWEEN_STEPS = 150;
const SERVED_WAIT_MS_MAX = 20_000;
/**
 * A node reconnects to another server at once, but a stream whose leader died takes no write
 * until the two servers left elect another (nats-server 2.9's election timeout is 4–9 s): the
 * usage log and the partition leases wait that long, and /ready says not ready meanwhile.
 */
const READY_AFTER_KILL_MS_MAX = 20_000;
const TEST_MS_MAX = 115_000;
/**
 * The nodes keep each record until the ledger has it, and a usage message pulled while its
 * consumer's leader moved comes again after the ack wait (30 s): the records get whatever time
 * the test has left, less this margin for the checks after.
 */
const CHECKS_MS_MAX = 8_000;

describeWith(["postgres"], "the gateway on a three-server NATS cluster", (it) => {
  let sim: Simulator;
  let cluster: NatsCluster;
  let database: { url: string; drop: () => Promise<void> };
  let watcher: NatsConnection;
  const nodes: GatewayProcess[] = [];

  beforeAll(async () => {
    sim = await startSimulator({ itlMs: 1 });
    cluster = await startShippedNatsCluster();
    database = (await freshDatabase())!;
    watcher = await connectAsGateway(cluster);
  }, SETUP_MS_MAX);

  afterAll(async () => {
    for (const node of nodes) await node.kill("SIGKILL");
    await watcher?.close();
    await sim?.stop();
    await cluster?.stop();
    await database?.drop();
  }, SETUP_MS_MAX);

  it(
    "kill -9 of one server, then of another once the copies are current: nothing lost, nothing billed twice, ready within seconds",
    async () => {
      const testStartedMs = performance.now();
      const env = clusterEnv(database.url, sim, {
        ...gatewayNatsEnv(cluster),
        HOLD_SWEEP_INTERVAL_MS: "250",
      });
      for (let i = 0; i < NODES; i++) nodes.push(await spawnGateway(env));
      const { key } = await fundedKey(nodes[0]!, "nats-cluster");

      // Every stream is on all three servers before the faults begin.
      await untilReplicasCurrent(watcher);
      const usage = (await streamsReplicas(watcher)).find((s) => s.stream.endsWith("_USAGE"));
      expect(usage?.copies.length).toBe(CLUSTER_SIZE - 1);

      let stop = false;
      let served = 0;
      const statuses = new Map<number, number>();
      const body = JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hello, world!" }], max_tokens: 10 });
      const worker = async (i: number) => {
        while (!stop) {
          const response = await fetch(`${nodes[i % NODES]!.url}/v1/chat/completions`, {
            method: "POST",
            headers: { authorization: `Bearer ${key}` },
            body,
          }).catch(() => null);
          await response?.arrayBuffer();
          const status = response?.status ?? 0;
          statuses.set(status, (statuses.get(status) ?? 0) + 1);
          if (status === 200) served++;
          else await Bun.sleep(20); // a client backing off a little before it tries again
        }
      };
      const moreServed = async () => {
        const target = served + SERVED_BETWEEN_STEPS;
        await until(() => served >= target, SERVED_WAIT_MS_MAX);
      };
      const startedMs = performance.now();
      const note = (what: string) =>
        process.stdout.write(`${new Date().toISOString()} +${Math.round(performance.now() - startedMs)} ms: ${what} (${served} served)\n`);
      const load = Promise.all(Array.from({ length: WORKERS }, (_, i) => worker(i)));
      const readyAfterKillMs: number[] = [];
      const killed: string[] = [];
      try {
        await moreServed();
        for (let step = 0; step < 2; step++) {
          const victim = await pickVictim(watcher, cluster.members, killed);
          killed.push(victim.name);
          const killedAtMs = performance.now();
          note(`kill -9 ${victim.name}`);
          await victim.kill("SIGKILL");
          // The nodes go on with the two servers left: ready again, and serving.
          await until(async () => (await Promise.all(nodes.map(isReady))).every(Boolean), READY_AFTER_KILL_MS_MAX);
          readyAfterKillMs.push(Math.round(performance.now() - killedAtMs));
          note("every node ready");
          await moreServed();
          await victim.start();
          note(`${victim.name} started again`);
          await untilReplicasCurrent(watcher);
          note("every stream's copies current");
          await moreServed();
        }
      } finally {
        stop = true;
        await load;
      }
      expect(new Set(killed).size).toBe(2);
      // Only answers the gateway documents: 200, or 503 while a node had no server.
      expect([...statuses.keys()].filter((s) => s !== 200 && s !== 503)).toEqual([]);

      const loadEndedMs = performance.now();
      const check = await usageAgainstUpstream(database.url, sim, TEST_MS_MAX - (loadEndedMs - testStartedMs) - CHECKS_MS_MAX);
      note(`usage checked ${Math.round(performance.now() - loadEndedMs)} ms after the load ended`);
      process.stdout.write(
        `NATS cluster: killed ${killed.join(", then ")}; ready again ${readyAfterKillMs.join(", ")} ms after each kill; ` +
          `${check.served} served, ${check.missing.length} missing, ${check.twice.length} recorded twice, ` +
          `${check.writtenOff} written off, money difference ${check.difference}; answers ${JSON.stringify(Object.fromEntries(statuses))}\n`,
      );
      if (check.missing.length > 0) process.stdout.write(`the usage consumer then: ${await usageConsumerState(watcher)}\n`);
      expect(check.missing).toEqual([]);
      expect(check.twice).toEqual([]);
      expect(check.deadLetters).toBe(0);
      expect(check.writtenOff).toBe(0);
      expect(check.difference).toBe(0n);
      const audit = (await adminOf(nodes[0]!)("GET", "/admin/ledger/audit")) as { checks: { name: string; ok: boolean }[] };
      expect(audit.checks.filter((c) => !c.ok)).toEqual([]);
    },
    TEST_MS_MAX,
  );
});

/** The ledger's consumer of the usage stream as JetStream sees it: what it has not delivered, not had acknowledged, and pulls waiting. */
async function usageConsumerState(nc: NatsConnection): Promise<string> {
  const usage = (await streamsReplicas(nc)).find((s) => s.stream.endsWith("_USAGE"));
  if (!usage) return "no usage stream";
  const jsm = await nc.jetstreamManager();
  const info = await jsm.consumers.info(usage.stream, "usage-ledger").catch((error: Error) => error.message);
  if (typeof info === "string") return info;
  const { num_pending, num_ack_pending, num_waiting, delivered, ack_floor, cluster } = info;
  return JSON.stringify({ num_pending, num_ack_pending, num_waiting, delivered, ack_floor, cluster });
}

async function isReady(node: GatewayProcess): Promise<boolean> {
  const reply = await fetch(`${node.url}/ready`, { signal: AbortSignal.timeout(1_000) }).catch(() => null);
  await reply?.arrayBuffer();
  return reply?.status === 200;
}

/**
 * Every request the simulator served against the ledger, once the records have arrived (or
 * `msMax` passed): those with no usage record, those with more than one, usage metered but not
 * billed, dead letters, and the wallets' spend minus what their records billed.
 */
async function usageAgainstUpstream(databaseUrl: string, sim: Simulator, msMax: number) {
  const servedIds = sim.log
    .entries()
    .filter((e) => e.status === 200 && e.requestId)
    .map((e) => e.requestId!);
  const db = await openPostgres(databaseUrl);
  try {
    let counts = new Map<string, number>();
    const missing = () => servedIds.filter((id) => !counts.has(id));
    await until(async () => {
      const rows = await db.rows<{ request_id: string; n: unknown }>(
        sql`SELECT request_id, count(*) AS n FROM usage_records GROUP BY request_id`,
      );
      counts = new Map(rows.map((r) => [r.request_id, Number(r.n)]));
      return missing().length === 0;
    }, msMax).catch(() => {});
    const [totals] = await db.rows<{ written_off: unknown; dead: unknown; difference: unknown }>(sql`
      SELECT (SELECT count(*) FROM usage_records WHERE metered_micro > billed_micro) AS written_off,
        (SELECT count(*) FROM usage_dead_letters) AS dead,
        (SELECT coalesce(sum(amount_micro), 0) FROM ledger_transfers WHERE kind = 'topup')
          - (SELECT coalesce(sum(balance_micro), 0) FROM wallets)
          - (SELECT coalesce(sum(billed_micro), 0) FROM usage_records) AS difference`);
    return {
      served: servedIds.length,
      missing: missing(),
      twice: [...counts].filter(([, n]) => n > 1).map(([id]) => id),
      writtenOff: Number(totals!.written_off),
      deadLetters: Number(totals!.dead),
      difference: BigInt(String(totals!.difference)),
    };
  } finally {
    await db.close();
  }
}
