/**
 * `bun run bench/db-stall.ts`: how long the embedded database's writes stop the request thread.
 * Posts usage batches (the group commit's work) to PGlite on the request thread (as before it
 * moved to a worker) and to PGlite in its worker, while a 1 ms timer records how late it fires:
 * the longest lateness is the longest stall any request would have waited. Each engine is run
 * ROUNDS times, interleaved; figures go to bench/RESULTS.md by hand with the command and load.
 */
import { loadavg } from "node:os";
import { drizzle } from "drizzle-orm/pglite";
import { usageRecord } from "../test/usageRecords.ts";
import { loadCatalog } from "../src/catalog/catalog.ts";
import { normaliseRows, openPglite, type Db, type Drizzle } from "../src/db/client.ts";
import * as schema from "../src/db/schema.ts";
import { migrate } from "../src/db/migrate.ts";
import { openHold } from "../src/ledger/holds.ts";
import { postUsageBatch } from "../src/ledger/usage.ts";
import { createAccount, topUp } from "../src/ledger/wallets.ts";
import { percentile } from "./measurement.ts";

const ROUNDS = 3;
const BATCHES = 20;
/** Records per batch: about what USAGE_FLUSH_MS gathers at a few thousand requests a second. */
const BATCH_RECORDS = 200;
const TICK_MS = 1;

/** PGlite called from this thread: the design before the worker, kept here as the baseline. */
async function pgliteOnThisThread(): Promise<Db> {
  const { PGlite } = await import("@electric-sql/pglite");
  const client = new PGlite();
  await client.waitReady;
  const orm = drizzle({ client, schema }) as unknown as Drizzle;
  return { orm, engine: "pglite", rows: async (q) => normaliseRows(await orm.execute(q)), close: () => client.close() };
}

interface Row {
  engine: string;
  stallMaxMs: number;
  lateP99Ms: number;
  recordsPerS: number;
}

async function measure(engine: string, open: () => Promise<Db>): Promise<Row> {
  const db = await open();
  try {
    await migrate(db);
    await loadCatalog(db);
    const account = await createAccount(db, "bench");
    await topUp(db, account.id, 10n ** 15n, `seed-${account.id}`);
    await openHold(db, {
      holdId: "h",
      accountId: account.id,
      keyId: "key_t",
      label: "bench",
      minMicro: 1n,
      desiredMicro: 10n ** 14n,
      ttlMs: 600_000,
    });
    const late: number[] = [];
    let last = performance.now();
    const timer = setInterval(() => {
      const now = performance.now();
      late.push(now - last - TICK_MS);
      last = now;
    }, TICK_MS);
    const startedMs = performance.now();
    for (let b = 0; b < BATCHES; b++) {
      const batch = Array.from({ length: BATCH_RECORDS }, (_, i) =>
        usageRecord({ requestId: `r${b}-${i}`, holdId: "h", accountId: account.id, billedMicro: 1n }),
      );
      await postUsageBatch(db, batch);
    }
    const endedMs = performance.now();
    clearInterval(timer);
    // On the request thread the timer may not fire at all until the last batch is in.
    late.push(endedMs - last - TICK_MS);
    const elapsedS = (endedMs - startedMs) / 1000;
    late.sort((a, b) => a - b);
    return { engine, stallMaxMs: late.at(-1) ?? 0, lateP99Ms: percentile(late, 0.99), recordsPerS: (BATCHES * BATCH_RECORDS) / elapsedS };
  } finally {
    await db.close();
  }
}

const rows: Row[] = [];
const loadBefore = loadavg()[0]!;
for (let round = 0; round < ROUNDS; round++) {
  rows.push(await measure("PGlite on the request thread", pgliteOnThisThread));
  rows.push(await measure("PGlite in its worker", () => openPglite(null, { thread: "worker" })));
}
console.log(
  `${BATCHES} batches of ${BATCH_RECORDS} usage records, ${ROUNDS} interleaved rounds; load average ${loadBefore.toFixed(2)} → ${loadavg()[0]!.toFixed(2)}\n`,
);
console.log("| Engine | longest stall ms (each round) | timer lateness p99 ms | records/s |");
console.log("|---|---|---|---|");
for (const engine of new Set(rows.map((r) => r.engine))) {
  const mine = rows.filter((r) => r.engine === engine);
  const list = (f: (r: Row) => number, digits: number) => mine.map((r) => f(r).toFixed(digits)).join(" / ");
  console.log(`| ${engine} | ${list((r) => r.stallMaxMs, 1)} | ${list((r) => r.lateP99Ms, 2)} | ${list((r) => r.recordsPerS, 0)} |`);
}
