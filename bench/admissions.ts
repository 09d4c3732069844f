/**
 * `bun run bench:admissions`: admissions per second through the key actor (admit + settle, the
 * whole money path of a request without HTTP or an upstream), for one hot key and for 1,000
 * keys, in-process and over NATS (the client on a second connection, so every message crosses
 * the broker). Usage records are written as in production (group commit). Appends a table to
 * bench/RESULTS.md.
 *
 *   bun run bench:admissions [-- --seconds 5] [--concurrency 64]
 */
import { appendFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { KeyActorHost } from "../actors/key/host.ts";
import { ADMIT, SETTLE, WALLET_RECALLS } from "../actors/protocol.ts";
import { partitionOf, subjects as buildSubjects } from "../actors/subjects.ts";
import type { Bus } from "../src/bus/bus.ts";
import { LocalBus } from "../src/bus/local.ts";
import { NatsBus } from "../src/bus/nats.ts";
import { loadCatalog } from "../src/catalog/catalog.ts";
import { openDb, openPostgres, type Db } from "../src/db/client.ts";
import { migrate } from "../src/db/migrate.ts";
import { randomBase62 } from "../src/ids.ts";
import { KeyStore } from "../src/keys/store.ts";
import { UsageWriter } from "../src/ledger/usage.ts";
import { ledgerSink } from "../src/ledger/deadletter.ts";
import { createAccount, topUp } from "../src/ledger/wallets.ts";
import { silentLogger } from "../src/log.ts";
import { ACCOUNT_CONCURRENCY_MAX_LIMIT } from "../src/keys/accountLimits.ts";
import postgres from "postgres";

const { values } = parseArgs({ options: { seconds: { type: "string", default: "5" }, concurrency: { type: "string", default: "64" } } });
const SECONDS = Math.min(60, Math.max(1, Number(values.seconds)));
const CONCURRENCY = Math.min(1024, Math.max(1, Number(values.concurrency)));
const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const WARMUP_S = 2;

interface Result {
  mode: string;
  keys: number;
  admissionsPerS: number;
  p50Us: number;
  p99Us: number;
  refused: number;
}

async function freshPostgres(): Promise<{ db: Db; drop: () => Promise<void> } | null> {
  try {
    const name = `darvaze_bench_${randomBase62(10).toLowerCase()}`;
    const admin = postgres(DATABASE_URL, { max: 1, onnotice: () => {}, connect_timeout: 3 });
    await admin.unsafe(`CREATE DATABASE ${name}`);
    await admin.end();
    const url = new URL(DATABASE_URL);
    url.pathname = `/${name}`;
    const db = await openPostgres(url.toString());
    return {
      db,
      drop: async () => {
        await db.close();
        const again = postgres(DATABASE_URL, { max: 1, onnotice: () => {} });
        await again.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
        await again.end();
      },
    };
  } catch (error) {
    console.error(`PostgreSQL unreachable (${(error as Error).message}); the NATS runs are skipped`);
    return null;
  }
}

async function measure(mode: string, db: Db, server: Bus, client: Bus, keyCount: number): Promise<Result> {
  await migrate(db);
  await loadCatalog(db);
  const keys = new KeyStore(db, { prefix: "sk-b-", pepper: randomBase62(40) });
  const writer = new UsageWriter(ledgerSink(db), silentLogger);
  const subjects = buildSubjects(`b${randomBase62(8)}`);
  const host = new KeyActorHost({ db, keys, writer, log: silentLogger }, (recall) =>
    server.publish(WALLET_RECALLS, subjects.walletRecalls, recall),
  );
  const unserve = host.serve(server, subjects);
  // Each key on a wallet of its own, as customers' keys are.
  const keyIds: string[] = [];
  for (let i = 0; i < keyCount; i++) {
    const account = await createAccount(db, `bench ${i}`);
    await topUp(db, account.id, 10n ** 15n, `bench-${i}`);
    // Up to 1,024 callers on one key: above the account's default concurrency.
    await keys.setAccountLimits(account.id, { concurrencyMax: ACCOUNT_CONCURRENCY_MAX_LIMIT });
    keyIds.push((await keys.create(account.id, `k${i}`, { concurrencyMax: 10_000 })).record.id);
  }

  let done = 0;
  let refused = 0;
  let latencies: number[] = [];
  let deadline = performance.now() + WARMUP_S * 1000;
  let seq = 0;
  const loop = async () => {
    while (performance.now() < deadline) {
      const keyId = keyIds[seq % keyIds.length]!;
      const requestId = `r${seq++}`;
      const started = performance.now();
      const partition = partitionOf(keyId);
      const admitted = await client.request(ADMIT, subjects.keyAdmit(partition), {
        keyId,
        requestId,
        model: "gpt-4o-mini",
        reserveMicro: 1_000_000n,
        reserveTokens: 26,
        exact: false,
      });
      if (!admitted.ok) {
        refused++;
        continue;
      }
      await client.request(SETTLE, subjects.keySettle(partition), {
        keyId,
        requestId,
        holdId: admitted.holdId,
        reserveMicro: 1_000_000n,
        model: "gpt-4o-mini",
        operation: "chat",
        backend: "bench",
        priceVersionId: 1,
        usage: { input: 10n, output: 16n },
        prices: { input: 13_500n, output: 54_000n },
        status: 200,
        durationMs: 1,
      });
      if (latencies.length < 1_000_000) latencies.push(performance.now() - started);
      done++;
    }
  };
  // Warm-up: every key's first lease, key lookups, JIT; then the measurement.
  await Promise.all(Array.from({ length: CONCURRENCY }, loop));
  done = 0;
  refused = 0;
  latencies = [];
  deadline = performance.now() + SECONDS * 1000;
  const startedAt = performance.now();
  await Promise.all(Array.from({ length: CONCURRENCY }, loop));
  const elapsedS = (performance.now() - startedAt) / 1000;
  unserve();
  await host.releaseAll();
  await writer.stop();
  latencies.sort((a, b) => a - b);
  const at = (q: number) => Math.round((latencies[Math.floor(q * (latencies.length - 1))] ?? 0) * 1000);
  return { mode, keys: keyCount, admissionsPerS: done / elapsedS, p50Us: at(0.5), p99Us: at(0.99), refused };
}

const results: Result[] = [];
for (const keyCount of [1, 1000]) {
  const local = new LocalBus();
  const db = await openDb({ dataFolder: null });
  results.push(await measure("in-process bus, PGlite", db, local, local, keyCount));
  await db.close();
  await local.close();

  const pg = await freshPostgres();
  if (pg) {
    try {
      const server = await NatsBus.connect(NATS_URL, "bench-server");
      const client = await NatsBus.connect(NATS_URL, "bench-client");
      results.push(await measure("over NATS, PostgreSQL", pg.db, server, client, keyCount));
      await client.close();
      await server.close();
    } catch (error) {
      console.error(`NATS run skipped: ${(error as Error).message}`);
    } finally {
      await pg.drop();
    }
  }
}

let commit = "uncommitted";
try {
  commit = Bun.spawnSync(["git", "rev-parse", "--short", "HEAD"]).stdout.toString().trim() || commit;
} catch {}
const lines = [
  `\n## Key actor admissions, ${new Date().toISOString()} (${commit})`,
  "",
  `Command: \`bun run bench:admissions -- --seconds ${SECONDS} --concurrency ${CONCURRENCY}\`; admit + settle per request, ${CONCURRENCY} callers, after a ${WARMUP_S} s warm-up, each key on its own wallet, unpinned, one process. Goal (DESIGN.md §6): ≥ 20,000/s for one hot key.`,
  "",
  "| Bus and database | Keys | Admissions/s | p50 µs | p99 µs | Refused |",
  "|---|---:|---:|---:|---:|---:|",
  ...results.map(
    (r) => `| ${r.mode} | ${r.keys} | ${Math.round(r.admissionsPerS).toLocaleString("en-US")} | ${r.p50Us} | ${r.p99Us} | ${r.refused} |`,
  ),
  "",
];
const text = lines.join("\n");
console.log(text);
appendFileSync(join(import.meta.dir, "RESULTS.md"), text);
process.exit(0);
