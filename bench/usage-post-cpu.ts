/**
 * CPU per usage record of the embedded ledger's batch insert (postUsageBatch on an in-memory
 * PGlite, in this process): every thread's CPU over batches of chat-like records, per record.
 * The embedded gateway does the same work on its database's thread for every request.
 *
 *   bun run bench/usage-post-cpu.ts [batches=100] [records per batch=300]
 */
import { readdirSync, readFileSync } from "node:fs";
import { migratedDb } from "../test/helpers.ts";
import { usageRecord } from "../test/usageRecords.ts";
import { openHold } from "../src/ledger/holds.ts";
import { postUsageBatch, type UsageRecord } from "../src/ledger/usage.ts";
import { createAccount, topUp } from "../src/ledger/wallets.ts";

const batches = Number(process.argv[2] ?? 100);
const size = Number(process.argv[3] ?? 300);
const WARMUP_BATCHES = 10;

/** CPU nanoseconds of this process's threads: the main one's and all of them. */
function threadsCpuNs(): { main: number; all: number } {
  let main = 0;
  let all = 0;
  for (const tid of readdirSync("/proc/self/task")) {
    const ns = Number(readFileSync(`/proc/self/task/${tid}/schedstat`, "utf8").split(" ")[0]);
    all += ns;
    if (tid === String(process.pid)) main += ns;
  }
  return { main, all };
}

const { db, close } = await migratedDb();
const account = await createAccount(db, "bench");
await topUp(db, account.id, 10n ** 15n, "seed");
const holdId = "h_bench";
await openHold(db, {
  holdId,
  accountId: account.id,
  keyId: "key_t",
  label: "lease",
  minMicro: 1n,
  desiredMicro: 10n ** 14n,
  ttlMs: 3_600_000,
});

let sequence = 0;
/** A record as a whole chat reply of the benchmarks settles it (13 prompt tokens, 16 generated). */
function chatRecord(): UsageRecord {
  sequence++;
  const billedMicro = 13n * 150_000n + 16n * 600_000n;
  return usageRecord({
    requestId: `req_${sequence}_bench`,
    accountId: account.id,
    holdId,
    keyId: "key_bench",
    usage: { input: 13n, output: 16n },
    prices: { input: 150_000n, output: 600_000n },
    meteredMicro: billedMicro,
    billedMicro,
    durationMs: 2,
    partition: null,
    fenceToken: null,
    admittedAt: new Date().toISOString(),
  });
}

for (let i = 0; i < WARMUP_BATCHES; i++) await postUsageBatch(db, Array.from({ length: size }, chatRecord));
const prepared = Array.from({ length: batches }, () => Array.from({ length: size }, chatRecord));
const before = threadsCpuNs();
for (const batch of prepared) await postUsageBatch(db, batch);
const after = threadsCpuNs();
const records = batches * size;
const perRecord = (ns: number) => (ns / 1000 / records).toFixed(1);
console.log(
  `${records} records in batches of ${size}: main thread ${perRecord(after.main - before.main)} µs per record, ` +
    `other threads ${perRecord(after.all - after.main - (before.all - before.main))} µs`,
);
await close();
