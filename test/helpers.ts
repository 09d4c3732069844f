/**
 * Test harness: a gateway per suite on whatever the environment offers. With DATABASE_URL set,
 * each gateway gets a fresh PostgreSQL database of its own (dropped afterwards); without it,
 * PGlite in memory. With NATS_URL set, the bus is NATS under a subject prefix of its own.
 */
import { batchStreamName } from "../src/batches/queue.ts";
import { sql } from "drizzle-orm";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "nats";
import OpenAI from "openai";
import postgres from "postgres";
import { partitionBucket } from "../actors/cluster/partitions.ts";
import { quotaBucket } from "../actors/pool/quota.ts";
import { deadLetterStreamName, usageStreamName } from "../src/ledger/stream.ts";
import type { Catalog } from "../src/catalog/catalog.ts";
import { loadConfig } from "../src/config.ts";
import { openDb, type Db } from "../src/db/client.ts";
import { migrate } from "../src/db/migrate.ts";
import { randomBase62 } from "../src/ids.ts";
import { silentLogger, type Logger } from "../src/log.ts";
import { startGateway, type Gateway } from "../src/main.ts";
import { simulatorPools } from "../src/sim/pools.ts";
import { startSimulator, type Simulator, type SimOptions } from "../src/sim/server.ts";

export const ADMIN_TOKEN = "test-admin-token-0123456789";
/** Bound on a suite's set-up and tear-down: PGlite start-up alone takes seconds on a busy core. */
export const SETUP_MS_MAX = 60_000;

export const services = {
  databaseUrl: process.env.DATABASE_URL,
  natsUrl: process.env.NATS_URL,
};

/** A fresh PostgreSQL database on the server of DATABASE_URL; null on PGlite. */
export async function freshDatabase(): Promise<{ url: string; drop: () => Promise<void> } | null> {
  if (!services.databaseUrl) return null;
  const name = `darvaze_t_${randomBase62(12).toLowerCase()}`;
  const admin = postgres(services.databaseUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(services.databaseUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    drop: async () => {
      const again = postgres(services.databaseUrl!, { max: 1, onnotice: () => {} });
      await again.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await again.end();
    },
  };
}

/** A migrated database of a suite's own: a fresh PostgreSQL database on DATABASE_URL, else PGlite in memory. */
export async function migratedDb(): Promise<{ db: Db; close(): Promise<void> }> {
  const database = await freshDatabase();
  const db = await openDb({ databaseUrl: database?.url, dataFolder: null });
  await migrate(db);
  return {
    db,
    async close() {
      await db.close();
      await database?.drop();
    },
  };
}

/** Removes a test run's streams (usage, dead letters, leases, quotas, batch work) from the shared NATS server. */
export async function dropUsageStream(prefix: string): Promise<void> {
  if (!services.natsUrl) return;
  const nc = await connect({ servers: services.natsUrl });
  try {
    await (await nc.jetstreamManager()).streams.delete(usageStreamName(prefix));
  } catch {}
  try {
    await (await nc.jetstreamManager()).streams.delete(deadLetterStreamName(prefix));
  } catch {}
  try {
    // The cluster's partition leases (a KV bucket is a stream named KV_<bucket>).
    await (await nc.jetstreamManager()).streams.delete(`KV_${partitionBucket(prefix)}`);
  } catch {}
  try {
    await (await nc.jetstreamManager()).streams.delete(`KV_${quotaBucket(prefix)}`);
  } catch {}
  try {
    await (await nc.jetstreamManager()).streams.delete(batchStreamName(prefix));
  } catch {}
  await nc.close();
}

/**
 * What every test's gateway, in process or spawned, starts with: the rehearsal's account, usage
 * rows and lease would be in every count a test makes of the database and the metrics
 * (test/rehearsal.test.ts turns it on).
 */
export const WITHOUT_REHEARSAL = { START_REHEARSAL: "false" } as const;

export function testEnv(extra: Record<string, string | undefined> = {}): Record<string, string | undefined> {
  return {
    PORT: "0",
    HOST: "127.0.0.1",
    ADMIN_TOKEN,
    KEY_PEPPER: randomBase62(40),
    NATS_URL: services.natsUrl,
    DARVAZE_SUBJECT_PREFIX: `t${randomBase62(10)}`,
    // A test that leaves a connection open must not hold its gateway's stop for the default 30 s.
    SHUTDOWN_DRAIN_MS: "2000",
    LOG_LEVEL: "error",
    ...WITHOUT_REHEARSAL,
    ...extra,
  };
}

export interface TestGateway {
  gw: Gateway;
  url: string;
  /** The upstream simulator serving every model; null when the test gave a pools file (DARVAZE_CONFIG). */
  sim: Simulator | null;
  admin(method: string, path: string, body?: unknown): Promise<{ status: number; body: any; headers: Headers }>;
  /** An account topped up with `toman`, and a key for it. */
  fundedKey(toman: number | string, limits?: Record<string, unknown>): Promise<{ accountId: string; keyId: string; key: string }>;
  stop(): Promise<void>;
}

/**
 * A gateway in this process, in front of an upstream simulator of its own serving every model
 * unless `extra` names a pools file (DARVAZE_CONFIG): on a fresh PostgreSQL database when the
 * suite has one, else PGlite in memory; `dataFolder`: the embedded default as a node runs it,
 * PGlite in that folder, no NATS.
 */
export async function startTestGateway(
  extra: Record<string, string | undefined> = {},
  options: { log?: Logger; dataFolder?: string } = {},
): Promise<TestGateway> {
  const db = options.dataFolder ? null : await freshDatabase();
  const embedded = options.dataFolder ? { DATABASE_URL: undefined, NATS_URL: undefined, DARVAZE_DATA: options.dataFolder } : {};
  const env = testEnv({ DATABASE_URL: db?.url, ...embedded, ...extra });
  const sim = env.DARVAZE_CONFIG ? null : await startSimulator();
  const pools = sim ? (catalog: Catalog) => simulatorPools(catalog, sim.url) : undefined;
  let gw: Gateway;
  try {
    gw = await startGateway(loadConfig(env), { inMemory: !options.dataFolder, log: options.log ?? silentLogger, pools });
  } catch (error) {
    await sim?.stop();
    await db?.drop();
    throw error;
  }
  const admin: TestGateway["admin"] = async (method, path, body) => {
    const response = await fetch(gw.url + path, {
      // A fresh connection each time: the suite's gateways come and go on ports the system hands
      // out again, and a kept connection to a gone gateway on the same port was reset (ECONNRESET).
      keepalive: false,
      method,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : null, headers: response.headers };
  };
  return {
    gw,
    url: gw.url,
    sim,
    admin,
    async fundedKey(toman, limits = {}) {
      const account = await admin("POST", "/admin/accounts", { name: "test" });
      await admin("POST", `/admin/accounts/${account.body.id}/topups`, { amount_toman: toman, reference: `t-${randomBase62(8)}` });
      const key = await admin("POST", `/admin/accounts/${account.body.id}/keys`, { name: "test key", ...limits });
      if (key.status !== 201) throw new Error(`key creation failed: ${JSON.stringify(key.body)}`);
      return { accountId: account.body.id, keyId: key.body.id, key: key.body.key };
    },
    async stop() {
      await gw.stop();
      await sim?.stop();
      await db?.drop();
      await dropUsageStream(env.DARVAZE_SUBJECT_PREFIX!);
    },
  };
}

/** A simulator, a gateway whose pools send models to it, and the official client on a funded key. */
export interface SimGateway {
  sim: Simulator;
  t: TestGateway;
  accountId: string;
  client: OpenAI;
  stop(): Promise<void>;
}

/** Starts a simulator, then a gateway with the pools file `pools(sim)` writes, funded with `toman`. */
export async function startSimGateway(
  simOptions: Partial<SimOptions>,
  pools: (sim: Simulator) => string,
  toman = 10_000,
  env: Record<string, string> = {},
): Promise<SimGateway> {
  const sim = await startSimulator(simOptions);
  const t = await startTestGateway({ DARVAZE_CONFIG: pools(sim), ...env });
  const funded = await t.fundedKey(toman);
  const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: funded.key, maxRetries: 0 });
  return {
    sim,
    t,
    accountId: funded.accountId,
    client,
    async stop() {
      await t.stop();
      await sim.stop();
    },
  };
}

/** A migrated database of a suite's own (PGlite in memory without DATABASE_URL); `close` drops it. */
export async function openTestDb(): Promise<{ db: Db; close: () => Promise<void> }> {
  const database = await freshDatabase();
  const db = await openDb({ databaseUrl: database?.url, dataFolder: null });
  await migrate(db);
  return {
    db,
    async close() {
      await db.close();
      await database?.drop();
    },
  };
}

/** A key's wallet balance in micro-toman, as GET /v1/credits reports it. */
export async function balanceMicroOf(gatewayUrl: string, key: string): Promise<bigint> {
  const response = await fetch(`${gatewayUrl}/v1/credits`, { headers: { authorization: `Bearer ${key}` } });
  return BigInt(((await response.json()) as { balance_micro_toman: string }).balance_micro_toman);
}

/** A pools file (docs/routing.md) holding `pools`, in a folder of its own; its path, for DARVAZE_CONFIG. */
export function writePoolsFile(pools: Record<string, unknown>): string {
  const path = join(mkdtempSync(join(tmpdir(), "darvaze-pools-")), "pools.json");
  writeFileSync(path, JSON.stringify({ pools }));
  return path;
}

// The condition wait lives in a module of its own, light enough for unit tests to import.
import { until } from "./until.ts";
export { until };

/** Until `intervalMs` (PAYMENT_ASK_INTERVAL_MS) has passed since a callback or check last asked the provider about the top-up. */
export async function topupAskDue(t: TestGateway, topupId: string, intervalMs: number): Promise<void> {
  await until(
    async () => {
      const [row] = await t.gw.deps.db.rows<{ due: boolean }>(
        sql`SELECT asked_at IS NULL OR asked_at <= now() - ${intervalMs} * interval '1 millisecond' AS due FROM topups WHERE id = ${topupId}`,
      );
      return row!.due;
    },
    { msMax: 10_000, what: "the ask interval to pass", pollMs: 20 },
  );
}
