/**
 * What one poisoned record costs the usage writer: posting a batch of USAGE_BATCH_MAX records
 * clean, against the same batch with one record the database refuses (split until it is alone,
 * dead-lettered). PGlite in memory, and PostgreSQL when DATABASE_URL is set.
 *
 *   bun run bench/poison.ts            # PGlite
 *   DATABASE_URL=postgres://… bun run bench/poison.ts
 */
import { migratedDb } from "../test/helpers.ts";
import { usageRecord } from "../test/usageRecords.ts";
import type { Db } from "../src/db/client.ts";
import { postOrDeadLetter } from "../src/ledger/deadletter.ts";
import { openHold } from "../src/ledger/holds.ts";
import { USAGE_BATCH_MAX, type UsageRecord } from "../src/ledger/usage.ts";
import { createAccount, topUp } from "../src/ledger/wallets.ts";

const ROUNDS = 5;

async function batch(db: Db, poisoned: boolean): Promise<UsageRecord[]> {
  const account = await createAccount(db, "bench");
  await topUp(db, account.id, 10n ** 12n, `seed-${account.id}`);
  const holdId = `h_${account.id}`;
  await openHold(db, {
    holdId,
    accountId: account.id,
    keyId: "key_b",
    label: "lease",
    minMicro: 1n,
    desiredMicro: 10n ** 9n,
    ttlMs: 600_000,
  });
  return Array.from({ length: USAGE_BATCH_MAX }, (_, i) =>
    usageRecord({
      requestId: `req_${account.id}_${i}`,
      accountId: account.id,
      holdId,
      meteredMicro: 10n,
      billedMicro: poisoned && i === 1_234 ? 20n : 10n,
    }),
  );
}

/** Counts the transactions a call opens. */
function counting(db: Db): { db: Db; transactions: () => number } {
  let n = 0;
  const orm = new Proxy(db.orm, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver);
      if (property !== "transaction") return value;
      return (...args: unknown[]) => (n++, (value as (...a: unknown[]) => unknown).apply(target, args));
    },
  });
  return { db: { ...db, orm }, transactions: () => n };
}

const { db, close } = await migratedDb();
const engine = db.engine;
const rows: string[] = [];
for (const poisoned of [false, true]) {
  const timesMs: number[] = [];
  let transactions = 0;
  for (let round = 0; round < ROUNDS; round++) {
    const records = await batch(db, poisoned);
    const counted = counting(db);
    const startedMs = performance.now();
    const result = await postOrDeadLetter(counted.db, records, { source: "writer" });
    timesMs.push(performance.now() - startedMs);
    transactions = counted.transactions();
    if (result.written !== (poisoned ? USAGE_BATCH_MAX - 1 : USAGE_BATCH_MAX)) throw new Error(`wrote ${result.written}`);
  }
  timesMs.sort((a, b) => a - b);
  const median = timesMs[Math.floor(ROUNDS / 2)]!;
  rows.push(
    `| ${engine} | ${poisoned ? "1 poisoned" : "clean"} | ${USAGE_BATCH_MAX} | ${transactions} | ${median.toFixed(0)} | ${timesMs[ROUNDS - 1]!.toFixed(0)} |`,
  );
}
await close();
console.log(`| Engine | Batch | Records | Transactions | Median ms | Max ms |\n|---|---|---|---|---|---|\n${rows.join("\n")}`);
