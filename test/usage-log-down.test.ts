/**
 * The usage log away: NATS killed under load and left down (or hung: SIGSTOP, its sockets open,
 * nothing acknowledged), then the gateway itself killed with -9 before NATS returns. The node
 * stops admitting at once (killed: at the disconnect; hung: USAGE_ACK_OVERDUE_MS after a publish
 * went unacknowledged), and the usage of the requests it had in flight is written straight to
 * PostgreSQL: of the requests that ended after NATS went away, the only usage missing (against
 * the simulator's own log) is that of requests that ended within the durability bound of the
 * node's kill. (What it published before is in the stream, for the consumer once NATS is back:
 * test/nats-kill.test.ts.)
 */
import { afterAll, beforeAll, expect } from "bun:test";
import { sql } from "drizzle-orm";
import { openPostgres } from "../src/db/client.ts";
import { USAGE_ACK_OVERDUE_MS } from "../src/ledger/stream.ts";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { OwnNats } from "./chaos/services.ts";
import { freshDatabase, SETUP_MS_MAX } from "./helpers.ts";
import { clusterEnv, fundedKey, spawnGateway, type GatewayProcess } from "./processes.ts";
import { describeWith } from "./services.ts";
import { until } from "./until.ts";

const USAGE_FLUSH_MS = 100;
const WORKERS = 8;
/** Scheduling slack on a busy 2-core machine between the kill and the child's last write. */
const KILL_SLACK_MS = 100;
/**
 * Requests in flight when NATS died that ended this long before the node is killed: room for the
 * database write in progress (on a busy machine it waits behind the consumer's posts for the same
 * holds), yet inside the publish timeout (5 s): their usage is on record only if the overdue mark,
 * not the timeout, sent it to PostgreSQL.
 */
const SERVED_WITHOUT_NATS_MIN = 1;
const SERVED_AGE_MS = 3_000;
/** The node notices a killed NATS from its closed socket; this is scheduling slack. */
const NOTICE_MS_MAX = 1_000;
/** A hung NATS is noticed when a batch's acknowledgement is overdue: the batch waits its flush, then the overdue mark; this is scheduling slack. */
const HUNG_NOTICE_MS_MAX = USAGE_FLUSH_MS + USAGE_ACK_OVERDUE_MS + 400;

/** How NATS goes away, how soon the node must have stopped admitting, and what a kill of the node may lose after that. */
const FAULTS = [
  { name: "killed (-9)", noticeMsMax: NOTICE_MS_MAX, lossMs: USAGE_FLUSH_MS + KILL_SLACK_MS },
  { name: "hung (SIGSTOP)", noticeMsMax: HUNG_NOTICE_MS_MAX, lossMs: USAGE_FLUSH_MS + USAGE_ACK_OVERDUE_MS + KILL_SLACK_MS },
] as const;

describeWith(["postgres"], "usage while NATS is down", (it) => {
  let sim: Simulator;
  let nats: OwnNats;
  let database: { url: string; drop: () => Promise<void> };
  let node: GatewayProcess | undefined;

  beforeAll(async () => {
    sim = await startSimulator({ itlMs: 1 });
    nats = await OwnNats.start();
    database = (await freshDatabase())!;
  }, SETUP_MS_MAX);

  afterAll(async () => {
    await node?.kill("SIGKILL");
    nats.resume();
    await sim.stop();
    await nats.stop();
    await database.drop();
  }, SETUP_MS_MAX);

  for (const fault of FAULTS) {
    it(`NATS ${fault.name}: what a node serves meanwhile is in PostgreSQL within the durability bound, whatever happens to the node`, async () => {
      await nats.kill("SIGKILL"); // the previous case's, if any
      await nats.start();
      const env = clusterEnv(database.url, sim, { NATS_URL: nats.url, USAGE_FLUSH_MS: String(USAGE_FLUSH_MS) });
      const gateway = await spawnGateway(env);
      node = gateway;
      const { key } = await fundedKey(gateway, "log-down");
      const { statuses, stop } = startLoad(gateway, key);
      await until(() => (statuses.get(200) ?? 0) > 100, 20_000);
      const faultAt = Date.now();
      if (fault.name === "hung (SIGSTOP)") nats.pause();
      else await nats.kill("SIGKILL");
      const servedWithoutNats = (endedBeforeMs = Number.POSITIVE_INFINITY) =>
        sim.log.entries().filter((e) => e.status === 200 && e.endedAt > faultAt && e.endedAt < endedBeforeMs).length;
      await until(() => servedWithoutNats(Date.now() - SERVED_AGE_MS) >= SERVED_WITHOUT_NATS_MIN, 10_000);
      const killedAt = Date.now();
      await gateway.kill("SIGKILL");
      nats.resume();
      await stop();

      const served = sim.log.entries().filter((e) => e.status === 200 && e.requestId && e.endedAt > faultAt);
      const db = await openPostgres(database.url);
      try {
        const recorded = new Set(
          (await db.rows<{ request_id: string }>(sql`SELECT request_id FROM usage_records`)).map((r) => r.request_id),
        );
        const lost = served.filter((e) => !recorded.has(e.requestId!));
        const outsideBound = lost.filter((e) => e.endedAt < killedAt - fault.lossMs);
        const lastStartMs = Math.max(0, ...served.map((e) => e.startedAt - faultAt));
        process.stdout.write(
          `NATS ${fault.name}, then the node killed: ${served.length} served after the fault, the last started ${lastStartMs} ms after it; ` +
            `${lost.length} missing, ${outsideBound.length} of them outside the bound (${fault.lossMs} ms); answers ${JSON.stringify(Object.fromEntries(statuses))}\n`,
        );
        expect(servedWithoutNats()).toBeGreaterThanOrEqual(SERVED_WITHOUT_NATS_MIN);
        expect(outsideBound.map((e) => e.requestId)).toEqual([]);
        // Admission stopped at once: nothing was started upstream once the node had noticed.
        expect(served.filter((e) => e.startedAt > faultAt + fault.noticeMsMax).map((e) => e.requestId)).toEqual([]);
        expect(statuses.get(503) ?? 0).toBeGreaterThan(0);
      } finally {
        await db.close();
      }
    }, 90_000);
  }
});

/** WORKERS clients in a loop until `stop` (or the node is gone), the answers counted by status. */
function startLoad(gateway: GatewayProcess, key: string): { statuses: Map<number, number>; stop: () => Promise<void> } {
  let stopped = false;
  const statuses = new Map<number, number>();
  const body = JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hello, world!" }], max_tokens: 10 });
  const worker = async () => {
    while (!stopped) {
      const response = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}` },
        body,
      }).catch(() => null);
      if (!response) return; // the node is gone
      await response.arrayBuffer().catch(() => {});
      statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
      if (response.status !== 200) await Bun.sleep(10); // a client backing off a little before it tries again
    }
  };
  const load = Promise.all(Array.from({ length: WORKERS }, worker));
  return {
    statuses,
    stop: async () => {
      stopped = true;
      await load;
    },
  };
}
