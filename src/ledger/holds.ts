/**
 * Per-request holds: reserve → settle.
 *
 *   place:  wallets.held += reserve   only WHERE balance − held ≥ reserve   (one statement)
 *   settle: post min(metered, reserve) from the wallet to revenue, release the whole hold,
 *           write the usage record, all in one transaction; the remainder of `metered` above
 *           the hold goes to the write-off account.
 *
 * Invariants, enforced by the database (CHECKs in schema.ts) whatever the code does:
 * balance − held ≥ 0 and 0 ≤ posted ≤ amount for every hold. A settle is idempotent by hold:
 * a hold that is no longer pending is not posted again.
 */
import { sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";

export interface PlaceHold {
  holdId: string;
  accountId: string;
  keyId: string;
  requestId: string;
  amountMicro: bigint;
  /** After this the hold may be voided by a sweeper and can no longer be posted. */
  ttlMs: number;
}

/** Places the hold; false when the wallet's available balance does not cover it. */
export async function placeHold(db: Db, hold: PlaceHold): Promise<boolean> {
  const rows = await db.rows(sql`
    WITH w AS (
      UPDATE wallets SET held_micro = held_micro + ${hold.amountMicro}, updated_at = now()
      WHERE account_id = ${hold.accountId} AND balance_micro - held_micro >= ${hold.amountMicro}
      RETURNING account_id)
    INSERT INTO holds (id, account_id, key_id, request_id, amount_micro, status, deadline)
    SELECT ${hold.holdId}, account_id, ${hold.keyId}, ${hold.requestId}, ${hold.amountMicro}, 'pending',
           now() + make_interval(secs => ${hold.ttlMs / 1000})
    FROM w
    RETURNING id`);
  return rows.length === 1;
}

export interface SettleHold {
  holdId: string;
  requestId: string;
  keyId: string;
  model: string;
  operation: string;
  backend: string | null;
  priceVersionId: number;
  inputUnits: bigint;
  outputUnits: bigint;
  inputPricePer1m: bigint;
  outputPricePer1m: bigint;
  status: number;
  durationMs: number;
}

export interface Settled {
  meteredMicro: bigint;
  billedMicro: bigint;
  /** False when the hold had already been settled or voided (a retried settle). */
  posted: boolean;
}

export async function settleHold(db: Db, s: SettleHold): Promise<Settled> {
  const meteredMicro = s.inputUnits * s.inputPricePer1m + s.outputUnits * s.outputPricePer1m;
  return db.orm.transaction(async (tx) => {
    const run = async <T>(query: ReturnType<typeof sql>) => {
      const result = await tx.execute(query);
      return (Array.isArray(result) ? result : (result as { rows: unknown[] }).rows) as T[];
    };
    const [hold] = await run<{ account_id: string; amount_micro: string | bigint }>(sql`
      SELECT account_id, amount_micro FROM holds WHERE id = ${s.holdId} AND status = 'pending' FOR UPDATE`);
    if (!hold) return { meteredMicro, billedMicro: 0n, posted: false };
    const amount = BigInt(hold.amount_micro);
    const billed = meteredMicro < amount ? meteredMicro : amount;
    await run(sql`UPDATE holds SET status = 'posted', posted_micro = ${billed} WHERE id = ${s.holdId}`);
    await run(sql`
      UPDATE wallets SET balance_micro = balance_micro - ${billed}, held_micro = held_micro - ${amount}, updated_at = now()
      WHERE account_id = ${hold.account_id}`);
    if (billed > 0n) {
      await run(sql`
        INSERT INTO ledger_transfers (reference, debit_account, credit_account, amount_micro, kind)
        VALUES (${`usage:${s.requestId}`}, ${`wallet:${hold.account_id}`}, 'revenue', ${billed}, 'usage')`);
    }
    if (meteredMicro > billed) {
      await run(sql`
        INSERT INTO ledger_transfers (reference, debit_account, credit_account, amount_micro, kind)
        VALUES (${`writeoff:${s.requestId}`}, 'write_off', 'revenue', ${meteredMicro - billed}, 'write_off')`);
    }
    await run(sql`
      INSERT INTO usage_records (request_id, account_id, key_id, model, operation, backend, price_version_id,
        input_units, output_units, input_price_per_1m, output_price_per_1m, metered_micro, billed_micro, status, duration_ms)
      VALUES (${s.requestId}, ${hold.account_id}, ${s.keyId}, ${s.model}, ${s.operation}, ${s.backend}, ${s.priceVersionId},
        ${s.inputUnits}, ${s.outputUnits}, ${s.inputPricePer1m}, ${s.outputPricePer1m}, ${meteredMicro}, ${billed},
        ${s.status}, ${s.durationMs})`);
    return { meteredMicro, billedMicro: billed, posted: true };
  });
}

/** Releases a hold without posting (the request was refused or failed before any usage). */
export async function voidHold(db: Db, holdId: string): Promise<boolean> {
  const rows = await db.rows(sql`
    WITH h AS (
      UPDATE holds SET status = 'voided' WHERE id = ${holdId} AND status = 'pending'
      RETURNING account_id, amount_micro)
    UPDATE wallets SET held_micro = held_micro - h.amount_micro, updated_at = now()
    FROM h WHERE wallets.account_id = h.account_id
    RETURNING wallets.account_id`);
  return rows.length === 1;
}

/** Voids pending holds past their deadline (a crashed node's), returning how many. */
export async function expireHolds(db: Db, limit = 1000): Promise<number> {
  const rows = await db.rows(sql`
    WITH h AS (
      UPDATE holds SET status = 'expired'
      WHERE id IN (SELECT id FROM holds WHERE status = 'pending' AND deadline < now() LIMIT ${limit} FOR UPDATE SKIP LOCKED)
      RETURNING account_id, amount_micro),
    sums AS (SELECT account_id, sum(amount_micro) AS amount FROM h GROUP BY account_id)
    UPDATE wallets SET held_micro = held_micro - sums.amount, updated_at = now()
    FROM sums WHERE wallets.account_id = sums.account_id
    RETURNING wallets.account_id`);
  return rows.length;
}
