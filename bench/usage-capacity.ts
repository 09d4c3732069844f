/**
 * How many usage records per second one PostgreSQL takes: the usage writer's batch insert
 * (ledgerSink → postOrDeadLetter → postUsageBatch, the path of every record, embedded writer and
 * NATS consumer alike) driven flat out, in a database of its own on DATABASE_URL's server.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test bun run bench/usage-capacity.ts
 *   BENCH_SECONDS=5 …   (each configuration's duration; default 3)
 *
 * Configurations: batch size (USAGE_BATCH_MAX, and a small batch as one node's 100 ms flush of
 * light traffic makes), writers at once (one per node or consumer), and the records' holds
 * spread over many accounts' leases or all on one (a hot key: every batch locks the same hold
 * and wallet row). Also the table and WAL bytes per record, for the storage side.
 */
import { loadavg } from "node:os";
import { sql } from "drizzle-orm";
import { migratedDb } from "../test/helpers.ts";
import { usageRecord } from "../test/usageRecords.ts";
import type { Db } from "../src/db/client.ts";
import { ledgerSink } from "../src/ledger/deadletter.ts";
import { openHold } from "../src/ledger/holds.ts";
import { USAGE_BATCH_MAX, type UsageRecord } from "../src/ledger/usage.ts";
import { createAccount, topUp } from "../src/ledger/wallets.ts";

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ACCOUNTS = 1_000;
const SMALL_BATCH = 100;
const WRITERS = [1, 2, 4];
const LEASE_MICRO = 10n ** 12n;

if (!process.env.DATABASE_URL) throw new Error("set DATABASE_URL: this measures PostgreSQL (a database of its own is made and dropped)");

/** One funded account with one open lease per entry: the holds records are billed from. */
async function leases(db: Db, count: number): Promise<{ accountId: string; holdId: string }[]> {
  const out: { accountId: string; holdId: string }[] = [];
  for (let i = 0; i < count; i++) {
    const account = await createAccount(db, `bench-${i}`);
    await topUp(db, account.id, LEASE_MICRO * 2n, `seed-${account.id}`);
    const holdId = `h_${account.id}`;
    await openHold(db, {
      holdId,
      accountId: account.id,
      keyId: `key_${i}`,
      label: "lease",
      minMicro: 1n,
      desiredMicro: LEASE_MICRO,
      ttlMs: 3_600_000,
    });
    out.push({ accountId: account.id, holdId });
  }
  return out;
}

let sequence = 0;

function batchOf(size: number, holds: { accountId: string; holdId: string }[]): UsageRecord[] {
  return Array.from({ length: size }, () => {
    const hold = holds[sequence % holds.length]!;
    sequence++;
    return usageRecord({
      requestId: `req_${sequence}`,
      accountId: hold.accountId,
      holdId: hold.holdId,
      billedMicro: 1_500n,
      keyId: "key_b",
    });
  });
}

interface Reading {
  holds: string;
  batch: number;
  writers: number;
  records: number;
  perSecond: number;
  batchMsP50: number;
  batchMsMax: number;
}

/** `writers` loops, each writing batch after batch for SECONDS, as many nodes' writers would. */
async function measure(
  db: Db,
  holds: { accountId: string; holdId: string }[],
  label: string,
  batch: number,
  writers: number,
): Promise<Reading> {
  const sink = ledgerSink(db);
  const times: number[] = [];
  let records = 0;
  const endMs = performance.now() + SECONDS * 1_000;
  const startedMs = performance.now();
  await Promise.all(
    Array.from({ length: writers }, async () => {
      while (performance.now() < endMs) {
        const records_ = batchOf(batch, holds);
        const t0 = performance.now();
        await sink.write(records_);
        times.push(performance.now() - t0);
        records += records_.length;
      }
    }),
  );
  const elapsedS = (performance.now() - startedMs) / 1_000;
  times.sort((a, b) => a - b);
  return {
    holds: label,
    batch,
    writers,
    records,
    perSecond: Math.round(records / elapsedS),
    batchMsP50: times[Math.floor(times.length / 2)]!,
    batchMsMax: times[times.length - 1]!,
  };
}

async function storage(db: Db): Promise<{ tableBytesPerRecord: number; records: number }> {
  const [row] = await db.rows<{ n: unknown; bytes: unknown }>(sql`
    SELECT (SELECT count(*) FROM usage_records) AS n,
      pg_total_relation_size('usage_records') + pg_total_relation_size('ledger_transfers') AS bytes`);
  const records = Number(row!.n);
  return { records, tableBytesPerRecord: Math.round(Number(row!.bytes) / records) };
}

async function walLsn(db: Db): Promise<string> {
  const [row] = await db.rows<{ lsn: string }>(sql`SELECT pg_current_wal_lsn()::text AS lsn`);
  return row!.lsn;
}

const { db, close } = await migratedDb();
try {
  const loadBefore = loadavg().map((l) => l.toFixed(2));
  const spread = await leases(db, ACCOUNTS);
  const readings: Reading[] = [];
  const walStart = await walLsn(db);
  for (const [label, holds] of [
    [`${ACCOUNTS} accounts`, spread],
    ["1 account (hot)", spread.slice(0, 1)],
  ] as const) {
    for (const batch of [USAGE_BATCH_MAX, SMALL_BATCH]) {
      for (const writers of WRITERS) readings.push(await measure(db, holds, label, batch, writers));
    }
  }
  const [wal] = await db.rows<{ bytes: unknown }>(sql`SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), ${walStart}::pg_lsn) AS bytes`);
  const kept = await storage(db);
  console.log(
    `Load average before: ${loadBefore.join(" ")}; after: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(" ")}; ${SECONDS} s per row\n`,
  );
  console.log("| Holds | Batch | Writers | Records | Records/s | Batch ms p50 | Batch ms max |\n|---|---:|---:|---:|---:|---:|---:|");
  for (const r of readings) {
    console.log(
      `| ${r.holds} | ${r.batch} | ${r.writers} | ${r.records.toLocaleString("en")} | ${r.perSecond.toLocaleString("en")} | ${r.batchMsP50.toFixed(0)} | ${r.batchMsMax.toFixed(0)} |`,
    );
  }
  console.log(
    `\nKept: ${kept.records.toLocaleString("en")} records, ${kept.tableBytesPerRecord} bytes each in usage_records + ledger_transfers (indexes included); ` +
      `WAL ${Math.round(Number(wal!.bytes) / kept.records)} bytes per record.`,
  );
} finally {
  await close();
}
