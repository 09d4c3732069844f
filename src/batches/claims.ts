/**
 * A batch line's claim in the database: which node runs it, and the bound on one account's lines
 * running at once on the whole cluster. The claim is the database's (its clock, its lock), so
 * nodes need not agree on time and two nodes cannot both take the last place of an account.
 */
import { and, eq, type SQL, sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { batchLines } from "../db/schema.ts";
import { BATCH_ACK_WAIT_MS } from "./queue.ts";

/**
 * Lines of one account running at once on the whole cluster: a line's claim counts the account's
 * fresh claims (younger than BATCH_ACK_WAIT_MS) under a per-account lock. A batch's concurrency,
 * in place of its key's `concurrency_max` (and, through the upstream's latency, its rate).
 */
export const BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX = 2;

/**
 * Takes the line to run: a line queued, or one whose claim is older than BATCH_ACK_WAIT_MS (its
 * node died) or given up, while the account has fewer than BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX
 * fresh claims on the cluster. The account's lock makes the count and the claim one step.
 * @example if (!(await claimLine(db, batchId, 3, accountId))) return "later";
 */
export function claimLine(db: Db, batchId: string, line: number, accountId: string): Promise<boolean> {
  const ackWaitS = BATCH_ACK_WAIT_MS / 1000;
  const stale = sql`${batchLines.claimedAt} < now() - make_interval(secs => ${ackWaitS})`;
  const free = sql`(${batchLines.state} = 'queued' OR (${batchLines.state} = 'running' AND (${batchLines.claimedAt} IS NULL OR ${stale})))`;
  // A dead node's claims (older than the ack wait) hold no place; the batch_lines_running index keeps the count to running lines.
  const running = sql`(SELECT count(*) FROM batch_lines AS r JOIN batches AS b ON b.id = r.batch_id
    WHERE b.account_id = ${accountId} AND r.state = 'running' AND r.claimed_at >= now() - make_interval(secs => ${ackWaitS}))`;
  return db.orm.transaction(async (tx) => {
    await tx.execute(sql`SELECT pg_advisory_xact_lock(hashtext(${`batch-account:${accountId}`}))`);
    const claimed = await tx
      .update(batchLines)
      .set({ state: "running", claimedAt: sql`now()`, attempts: sql`${batchLines.attempts} + 1` })
      .where(and(eq(batchLines.batchId, batchId), eq(batchLines.line, line), free, sql`${running} < ${BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX}`))
      .returning({ line: batchLines.line });
    return claimed.length > 0;
  });
}

/** A running line's claim renewed (`now()`, every BATCH_LINE_BEAT_MS), or given up (null) once the line was cut. */
export async function restampLine(db: Db, batchId: string, line: number, claimedAt: SQL | null): Promise<void> {
  await db.orm
    .update(batchLines)
    .set({ claimedAt })
    .where(and(eq(batchLines.batchId, batchId), eq(batchLines.line, line), eq(batchLines.state, "running")));
}
