/**
 * `bun run bench/holders.ts [--seconds 15]`: the fixed pieces of work that can hold one
 * connection's request, each done alone by this program (a profile is not a limit):
 *
 * 1. A lease's hold written and shrunk (`openHold`, `shrinkHold`, what a request that finds its
 *    account's lease spent would wait for), on the embedded database's worker and on this thread,
 *    each call's milliseconds;
 * 2. the worker's heap as it reports it (what the memory guard takes apart) beside the process's
 *    resident set, each second while usage batches of one connection's pace go in: the heap counts
 *    reserved memory and falls at once when the worker gives it back.
 *
 * Figures go to bench/RESULTS.md by hand, with the command and the machine's load.
 */
import { parseArgs } from "node:util";
import { loadavg } from "node:os";
import { usageRecord } from "../test/usageRecords.ts";
import { loadCatalog } from "../src/catalog/catalog.ts";
import { openPglite, type PgliteThread } from "../src/db/client.ts";
import { migrate } from "../src/db/migrate.ts";
import { openHold, shrinkHold } from "../src/ledger/holds.ts";
import { postUsageBatch } from "../src/ledger/usage.ts";
import { createAccount, topUp } from "../src/ledger/wallets.ts";
import { countFlag } from "./flags.ts";

const { values: flags } = parseArgs({ args: process.argv.slice(2), strict: true, options: { seconds: { type: "string", default: "15" } } });
const seconds = countFlag(flags.seconds, { fallback: 15, max: 120 });
const MiB = 2 ** 20;
/** Holds opened and shrunk on each engine. */
const HOLDS = 5;
/** One connection's usage: a batch of this many records every BATCH_GAP_MS (~1,000 records a second). */
const BATCH_RECORDS = 20;
const BATCH_GAP_MS = 20;

async function openedDb(thread: PgliteThread) {
  const db = await openPglite(null, { thread });
  await migrate(db);
  await loadCatalog(db);
  const account = await createAccount(db, "bench");
  await topUp(db, account.id, 10n ** 15n, `seed-${account.id}`);
  return { db, accountId: account.id };
}

async function timed(work: () => Promise<unknown>): Promise<string> {
  const startedMs = performance.now();
  await work();
  return (performance.now() - startedMs).toFixed(2);
}

async function holdsOn(thread: PgliteThread): Promise<void> {
  const { db, accountId } = await openedDb(thread);
  try {
    const opens: string[] = [];
    const shrinks: string[] = [];
    for (let i = 0; i < HOLDS; i++) {
      const hold = { holdId: `h${i}`, accountId, keyId: "key_b", label: "lease", minMicro: 1n, desiredMicro: 10n ** 9n, ttlMs: 600_000 };
      opens.push(await timed(() => openHold(db, hold)));
      shrinks.push(await timed(() => shrinkHold(db, hold.holdId, 1n)));
    }
    console.log(`| ${thread === "worker" ? "its worker" : "this thread"} | ${opens.join(", ")} | ${shrinks.join(", ")} |`);
  } finally {
    await db.close();
  }
}

async function workerHeap(): Promise<void> {
  const { db, accountId } = await openedDb("worker");
  try {
    await openHold(db, { holdId: "h", accountId, keyId: "key_b", label: "bench", minMicro: 1n, desiredMicro: 10n ** 14n, ttlMs: 600_000 });
    let batch = 0;
    let nextReadingMs = performance.now() + 1_000;
    const untilMs = performance.now() + seconds * 1_000;
    while (performance.now() < untilMs) {
      const records = Array.from({ length: BATCH_RECORDS }, (_, i) =>
        usageRecord({ requestId: `r${batch}-${i}`, holdId: "h", accountId, billedMicro: 1n }),
      );
      await postUsageBatch(db, records);
      batch++;
      await Bun.sleep(BATCH_GAP_MS);
      if (performance.now() < nextReadingMs) continue;
      nextReadingMs += 1_000;
      const rss = process.memoryUsage.rss();
      const heap = db.worker?.heapBytes ?? 0;
      console.log(
        `| ${batch * BATCH_RECORDS} | ${(rss / MiB).toFixed(0)} | ${(heap / MiB).toFixed(0)} | ${((rss - heap) / MiB).toFixed(0)} |`,
      );
    }
  } finally {
    await db.close();
  }
}

console.log(`load average at the start ${loadavg()[0]!.toFixed(2)}\n`);
console.log("| The embedded database on | openHold ms (each call) | shrinkHold ms (each call) |\n|---|---|---|");
for (const thread of ["worker", "inline", "worker", "inline"] as const) await holdsOn(thread);
console.log(`\nUsage of one connection (${BATCH_RECORDS} records every ${BATCH_GAP_MS} ms) into the worker, read each second:\n`);
console.log("| records | resident set MiB | worker's heap as reported MiB | resident set less that heap MiB |\n|---:|---:|---:|---:|");
await workerHeap();
console.log(`\nload average at the end ${loadavg()[0]!.toFixed(2)}`);
process.exit(0);
