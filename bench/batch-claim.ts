/**
 * `bun run bench/batch-claim.ts`: what a batch line's claim costs now that it counts its
 * account's lines running on the cluster (src/batches/claims.ts: a transaction, the account's
 * advisory lock, the count by the partial index batch_lines_running): a claim taken, and one
 * refused because the account has BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX running, beside 100,000 lines
 * of the account (50,000 queued, 50,000 done); then the refusal again without the index. On PGlite
 * in memory, or on PostgreSQL when DATABASE_URL is set. Appends a table to bench/RESULTS.md.
 */
import { and, eq, sql } from "drizzle-orm";
import { BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX, claimLine } from "../src/batches/claims.ts";
import { insertBatch } from "../src/batches/store.ts";
import { batchLines } from "../src/db/schema.ts";
import { openBenchAccount, reportTimes } from "./db-times.ts";

const LINES = 50_000;
const CHUNK = 1_000;
const TRIES = 300;

const { db, close, accountId } = await openBenchAccount();
const batch = (state: string) =>
  insertBatch(
    db,
    {
      accountId,
      keyId: "key_bench",
      endpoint: "/v1/chat/completions",
      inputFileId: "file_bench",
      metadata: null,
      residency: null,
      pricing: "live",
      estimate: { models: [] },
    },
    Date.now(),
  ).then(async (row) => {
    for (let i = 0; i < LINES; i += CHUNK) {
      const values = Array.from({ length: CHUNK }, (_, j) => ({ batchId: row.id, line: i + j, customId: `l${i + j}`, body: "{}", state }));
      await db.orm.insert(batchLines).values(values);
    }
    return row.id;
  });
await batch("done");
const queued = await batch("queued");

/** Median and p99 of `work` over TRIES runs, in ms; the account's running lines renewed before each (untimed), so none goes stale. */
async function timed(work: (i: number) => Promise<unknown>, after?: (i: number) => Promise<unknown>): Promise<string> {
  const ms: number[] = [];
  for (let i = 0; i < TRIES; i++) {
    await db.rows(sql`UPDATE batch_lines SET claimed_at = now() WHERE state = 'running'`);
    const started = performance.now();
    await work(i);
    ms.push(performance.now() - started);
    await after?.(i);
  }
  ms.sort((a, b) => a - b);
  return `${ms[Math.floor(TRIES / 2)]!.toFixed(2)} ms / ${ms[Math.floor(TRIES * 0.99)]!.toFixed(2)} ms`;
}

const done = (line: number) =>
  db.orm
    .update(batchLines)
    .set({ state: "done" })
    .where(and(eq(batchLines.batchId, queued), eq(batchLines.line, line)));
const rows: [string, string][] = [];
// One line of the account running all along: each claim finds one place left, takes it, and the line is then done.
if (!(await claimLine(db, queued, 0, accountId))) throw new Error("the first claim was refused");
rows.push([
  "claim taken (one of the account's lines running)",
  await timed(
    async (i) => {
      if (!(await claimLine(db, queued, i + 1, accountId))) throw new Error("a claim with a place left was refused");
    },
    (i) => done(i + 1),
  ),
]);
for (let n = 1; n < BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX; n++) await claimLine(db, queued, TRIES + n, accountId);
const refused = async () => {
  if (await claimLine(db, queued, LINES - 1, accountId)) throw new Error("a claim past the account's bound was taken");
};
rows.push(["claim refused (the account's lines all running)", await timed(refused)]);
// For comparison: the line's update alone, as a claim was before it counted the account's lines (one statement, no lock).
rows.push([
  "a line's update alone (no count, no lock: the claim before this bound)",
  await timed((i) =>
    db.rows(
      sql`UPDATE batch_lines SET attempts = attempts + 1 WHERE batch_id = ${queued} AND line = ${LINES - 2 - i} AND state = 'queued'`,
    ),
  ),
]);
await db.rows(sql`DROP INDEX batch_lines_running`);
rows.push(["claim refused, without the index batch_lines_running", await timed(refused)]);
await close();

reportTimes({
  title: "a batch line's claim",
  command: "bun run bench/batch-claim.ts",
  note: `(${2 * LINES} lines of the account in batch_lines; median / p99 of ${TRIES} claims)`,
  rows,
});
