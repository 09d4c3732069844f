/**
 * Two-phase holds, after TigerBeetle.
 *
 *   open:   held += amount, only WHERE balance − held covers at least `min`; the hold takes
 *           LEAST(desired, available), so a lease never asks for money that is not there.
 *   post:   (usage.ts) each usage record posts its charge from the hold once, by request id:
 *           posted += charge, balance −= charge, held −= charge.
 *   shrink: gives back unused room (amount −= x, held −= x), never below what was posted.
 *   close:  releases amount − posted; the hold is then final and can no longer be posted.
 *   expire: the sweeper closes pending holds past their deadline (a crashed node's leases).
 *
 * The database enforces, whatever the code does: balance − held ≥ 0 for every wallet, and
 * 0 ≤ posted ≤ amount for every hold (CHECKs in schema.ts); every statement here is also
 * conditional, so a refused change is a row count of zero, not an error.
 */
import { sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";

export interface OpenHold {
  holdId: string;
  accountId: string;
  keyId: string;
  /** What the hold is for: a request id, or `lease`. */
  label: string;
  /** The least that is useful: the hold is not opened for less. */
  minMicro: bigint;
  /** What the caller would like; the hold takes LEAST(desired, available). */
  desiredMicro: bigint;
  ttlMs: number;
}

export type OpenHoldResult =
  | { opened: true; amountMicro: bigint }
  | { opened: false; balanceMicro: bigint; heldMicro: bigint };

export async function openHold(db: Db, h: OpenHold): Promise<OpenHoldResult> {
  const [row] = await db.rows<{ balance_micro: unknown; held_micro: unknown; amount: unknown }>(sql`
    WITH cur AS (
      SELECT account_id, balance_micro, held_micro, LEAST(${h.desiredMicro}::bigint, balance_micro - held_micro) AS amt
      FROM wallets WHERE account_id = ${h.accountId} FOR UPDATE),
    w AS (
      UPDATE wallets SET held_micro = wallets.held_micro + cur.amt, updated_at = now()
      FROM cur WHERE wallets.account_id = cur.account_id AND cur.amt >= ${h.minMicro}::bigint
      RETURNING cur.amt),
    ins AS (
      INSERT INTO holds (id, account_id, key_id, request_id, amount_micro, status, deadline)
      SELECT ${h.holdId}, ${h.accountId}, ${h.keyId}, ${h.label}, w.amt, 'pending',
             now() + make_interval(secs => ${h.ttlMs / 1000})
      FROM w RETURNING amount_micro)
    SELECT cur.balance_micro, cur.held_micro, (SELECT amount_micro FROM ins) AS amount FROM cur`);
  if (!row) return { opened: false, balanceMicro: 0n, heldMicro: 0n };
  if (row.amount !== null && row.amount !== undefined) return { opened: true, amountMicro: BigInt(String(row.amount)) };
  return { opened: false, balanceMicro: BigInt(String(row.balance_micro)), heldMicro: BigInt(String(row.held_micro)) };
}

/** Gives `byMicro` of a pending hold back to its wallet; false when that would cut into posts. */
export async function shrinkHold(db: Db, holdId: string, byMicro: bigint): Promise<boolean> {
  if (byMicro <= 0n) return true;
  const rows = await db.rows(sql`
    WITH h AS (
      UPDATE holds SET amount_micro = amount_micro - ${byMicro}::bigint
      WHERE id = ${holdId} AND status = 'pending' AND amount_micro - ${byMicro}::bigint >= posted_micro
      RETURNING account_id)
    UPDATE wallets SET held_micro = held_micro - ${byMicro}::bigint, updated_at = now()
    FROM h WHERE wallets.account_id = h.account_id
    RETURNING wallets.account_id`);
  return rows.length === 1;
}

/** Closes a pending hold, releasing what was not posted; false if it was no longer pending. */
export async function closeHold(db: Db, holdId: string): Promise<boolean> {
  const rows = await db.rows(sql`
    WITH h AS (
      UPDATE holds SET status = CASE WHEN posted_micro > 0 THEN 'posted' ELSE 'voided' END
      WHERE id = ${holdId} AND status = 'pending'
      RETURNING account_id, amount_micro - posted_micro AS rest)
    UPDATE wallets SET held_micro = held_micro - h.rest, updated_at = now()
    FROM h WHERE wallets.account_id = h.account_id
    RETURNING wallets.account_id`);
  return rows.length === 1;
}

/** Closes pending holds past their deadline (a crashed node's), returning how many. */
export async function expireHolds(db: Db, limit = 1000): Promise<number> {
  const rows = await db.rows(sql`
    WITH h AS (
      UPDATE holds SET status = 'expired'
      WHERE id IN (SELECT id FROM holds WHERE status = 'pending' AND deadline < now() LIMIT ${limit} FOR UPDATE SKIP LOCKED)
      RETURNING account_id, amount_micro - posted_micro AS rest),
    sums AS (SELECT account_id, sum(rest) AS rest, count(*) AS n FROM h GROUP BY account_id)
    UPDATE wallets SET held_micro = held_micro - sums.rest, updated_at = now()
    FROM sums WHERE wallets.account_id = sums.account_id
    RETURNING sums.n`);
  return rows.reduce((sum: number, r) => sum + Number((r as { n: unknown }).n), 0);
}
