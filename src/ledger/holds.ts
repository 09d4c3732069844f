/**
 * Two-phase holds, after TigerBeetle: open (held += what the wallet has, at least `min`), post
 * (usage.ts, once per request id), shrink, close (releases amount − posted), renew, expire.
 *
 * The database enforces, whatever the code does: balance − held ≥ 0 for every wallet, and
 * 0 ≤ posted ≤ amount for every hold (CHECKs in schema.ts); every statement here is also
 * conditional, so a refused change is a row count of zero, not an error.
 *
 * In full, with the reasoning: docs/internals.md#holds.
 */
import { sql } from "drizzle-orm";
import { txRows, type Db } from "../db/client.ts";

export interface OpenHold {
  holdId: string;
  accountId: string;
  keyId: string;
  /** What the hold is for: a request id, or `lease`. */
  label: string;
  /**
   * The least that is useful: the hold is not opened for less. 0 (a request at zero prices): it
   * opens whatever the wallet has, an empty one included, since the request can cost nothing.
   */
  minMicro: bigint;
  /** What the caller would like; the hold takes LEAST(desired, available). */
  desiredMicro: bigint;
  ttlMs: number;
}

export type OpenHoldResult = { opened: true; amountMicro: bigint } | { opened: false; balanceMicro: bigint; heldMicro: bigint };

export async function openHold(db: Db, h: OpenHold): Promise<OpenHoldResult> {
  // One statement, so one round trip (the embedded database sits in a worker thread): the row
  // lock orders concurrent opens on one wallet, the UPDATE is conditional on the row as it is
  // when locked, and the CHECK backs both.
  const [row] = await db.rows<{ balance_micro: unknown; held_micro: unknown; opened_micro: unknown }>(sql`
    WITH w AS (
      SELECT account_id, balance_micro, held_micro, LEAST(balance_micro - held_micro, ${h.desiredMicro}::bigint) AS amount
      FROM wallets WHERE account_id = ${h.accountId} FOR UPDATE),
    u AS (
      UPDATE wallets SET held_micro = wallets.held_micro + w.amount, updated_at = now()
      FROM w
      WHERE wallets.account_id = w.account_id AND w.amount >= ${h.minMicro}::bigint AND (w.amount > 0 OR ${h.minMicro}::bigint = 0)
        AND wallets.balance_micro - wallets.held_micro >= w.amount
      RETURNING w.amount),
    opened AS (
      INSERT INTO holds (id, account_id, key_id, request_id, amount_micro, status, deadline)
      SELECT ${h.holdId}, ${h.accountId}, ${h.keyId}, ${h.label}, u.amount, 'pending', now() + make_interval(secs => ${h.ttlMs / 1000})
      FROM u
      RETURNING amount_micro)
    SELECT w.balance_micro, w.held_micro, (SELECT amount_micro FROM opened) AS opened_micro FROM w`);
  if (!row) return { opened: false, balanceMicro: 0n, heldMicro: 0n };
  if (row.opened_micro !== null && row.opened_micro !== undefined) return { opened: true, amountMicro: BigInt(String(row.opened_micro)) };
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

/**
 * Closes a pending hold, releasing what was not posted; false if it was no longer pending, or
 * (with `postedAtLeastMicro`) when less than that has been posted to it yet: a lease that knows
 * what it charged closes as soon as those charges are in, without waiting for anything else.
 */
export async function closeHold(db: Db, holdId: string, postedAtLeastMicro = 0n): Promise<boolean> {
  const rows = await db.rows(sql`
    WITH h AS (
      UPDATE holds SET status = CASE WHEN posted_micro > 0 THEN 'posted' ELSE 'voided' END
      WHERE id = ${holdId} AND status = 'pending' AND posted_micro >= ${postedAtLeastMicro}::bigint
      RETURNING account_id, amount_micro - posted_micro AS rest)
    UPDATE wallets SET held_micro = held_micro - h.rest, updated_at = now()
    FROM h WHERE wallets.account_id = h.account_id
    RETURNING wallets.account_id`);
  return rows.length === 1;
}

/**
 * How long past its deadline a hold stays pending: a crashed node stops renewing its leases, and
 * the records it published may wait that long in the usage stream (a message its consumer had
 * pulled is redelivered only after the consumer's ack wait, stream.ts's USAGE_ACK_WAIT_MS, then
 * posted). The default of HOLD_EXPIRY_GRACE_MS (config.ts); holds.test.ts checks both.
 */
export const HOLD_EXPIRY_GRACE_MS = 45_000;

/**
 * Pushes the deadlines of a live node's open leases to at least `ttlMs` from now (database
 * clock); returns how many were still pending.
 */
export async function renewHolds(db: Db, holdIds: string[], ttlMs: number): Promise<number> {
  if (holdIds.length === 0) return 0;
  const rows = await db.rows(sql`
    UPDATE holds SET deadline = GREATEST(deadline, now() + make_interval(secs => ${ttlMs / 1000}))
    WHERE id IN (SELECT json_array_elements_text(${JSON.stringify(holdIds)}::json)) AND status = 'pending'
    RETURNING id`);
  return rows.length;
}

/** Closes pending holds past their deadline by `graceMs` (a crashed node's), returning how many. */
export async function expireHolds(db: Db, options: { graceMs?: number; limit?: number } = {}): Promise<number> {
  const { graceMs = HOLD_EXPIRY_GRACE_MS, limit = 1000 } = options;
  const rows = await db.rows(sql`
    WITH h AS (
      UPDATE holds SET status = 'expired'
      WHERE id IN (SELECT id FROM holds WHERE status = 'pending' AND deadline < now() - make_interval(secs => ${graceMs / 1000})
                   LIMIT ${limit} FOR UPDATE SKIP LOCKED)
      RETURNING account_id, amount_micro - posted_micro AS rest),
    sums AS (SELECT account_id, sum(rest) AS rest, count(*) AS n FROM h GROUP BY account_id)
    UPDATE wallets SET held_micro = held_micro - sums.rest, updated_at = now()
    FROM sums WHERE wallets.account_id = sums.account_id
    RETURNING sums.n`);
  return rows.reduce((sum: number, r) => sum + Number((r as { n: unknown }).n), 0);
}

/** Pending holds of every wallet and what they still keep from them (metrics). */
export async function pendingHoldTotals(db: Db): Promise<{ pending: number; heldMicro: bigint }> {
  const [row] = await db.rows<{ n: unknown; held: unknown }>(sql`
    SELECT count(*) AS n, COALESCE(sum(amount_micro - posted_micro), 0) AS held FROM holds WHERE status = 'pending'`);
  return { pending: Number(row?.n ?? 0), heldMicro: BigInt(String(row?.held ?? 0)) };
}

/**
 * Grows a pending hold by `byMicro` from its wallet's available balance (a stream's reserve
 * extended past its lease's room); false when the wallet cannot cover it or the hold is no
 * longer pending. The hold's row is locked first, so it cannot close between the two updates.
 */
export async function growHold(db: Db, holdId: string, byMicro: bigint): Promise<boolean> {
  if (byMicro <= 0n) return true;
  return db.orm.transaction(async (tx) => {
    const [hold] = await txRows<{ account_id: string }>(
      tx,
      sql`
      SELECT account_id FROM holds WHERE id = ${holdId} AND status = 'pending' FOR UPDATE`,
    );
    if (!hold) return false;
    const wallet = await txRows(
      tx,
      sql`
      UPDATE wallets SET held_micro = held_micro + ${byMicro}::bigint, updated_at = now()
      WHERE account_id = ${hold.account_id} AND balance_micro - held_micro >= ${byMicro}::bigint
      RETURNING account_id`,
    );
    if (wallet.length !== 1) return false;
    await txRows(tx, sql`UPDATE holds SET amount_micro = amount_micro + ${byMicro}::bigint WHERE id = ${holdId}`);
    return true;
  });
}

/**
 * Grows a pending hold by as much of `maxMicro` as its wallet has available (usage an upstream
 * reported beyond a request's reserve); returns what it grew by, 0 when the wallet has nothing
 * or the hold is no longer pending. The hold's row is locked first, as in growHold.
 */
export async function growHoldUpTo(db: Db, holdId: string, maxMicro: bigint): Promise<bigint> {
  if (maxMicro <= 0n) return 0n;
  return db.orm.transaction(async (tx) => {
    const [hold] = await txRows<{ account_id: string }>(
      tx,
      sql`
      SELECT account_id FROM holds WHERE id = ${holdId} AND status = 'pending' FOR UPDATE`,
    );
    if (!hold) return 0n;
    const [grown] = await txRows<{ grow: unknown }>(
      tx,
      sql`
      WITH w AS (
        SELECT account_id, LEAST(${maxMicro}::bigint, balance_micro - held_micro) AS grow
        FROM wallets WHERE account_id = ${hold.account_id} FOR UPDATE)
      UPDATE wallets SET held_micro = wallets.held_micro + w.grow, updated_at = now()
      FROM w WHERE wallets.account_id = w.account_id AND w.grow > 0
      RETURNING w.grow`,
    );
    const grow = grown ? BigInt(String(grown.grow)) : 0n;
    if (grow > 0n) await txRows(tx, sql`UPDATE holds SET amount_micro = amount_micro + ${grow}::bigint WHERE id = ${holdId}`);
    return grow;
  });
}
