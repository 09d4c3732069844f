/**
 * A support operator's daily adjustment ceiling: what they adjust in one Tehran day, in absolute
 * amounts, every customer together, stays within their `adjust_daily_max_micro`. The amount is
 * taken by one conditional upsert before the adjustment runs (two at once cannot both pass) and
 * given back when the adjustment does not happen.
 */
import type { Db } from "../db/client.ts";
import { sql } from "drizzle-orm";

/** Takes `amountMicro` (≥ 0) of the day's room; false when it would pass `maxMicro`. */
export async function takeAdjustRoom(db: Db, operatorId: string, dayStart: Date, amountMicro: bigint, maxMicro: bigint): Promise<boolean> {
  const day = dayStart.toISOString();
  const rows = await db.rows<{ used_micro: string }>(sql`
    INSERT INTO operator_adjust_days (operator_id, day_start, used_micro)
    SELECT ${operatorId}, ${day}::timestamptz, ${amountMicro}::bigint WHERE ${amountMicro}::bigint <= ${maxMicro}::bigint
    ON CONFLICT (operator_id, day_start) DO UPDATE SET used_micro = operator_adjust_days.used_micro + excluded.used_micro
      WHERE operator_adjust_days.used_micro + excluded.used_micro <= ${maxMicro}::bigint
    RETURNING used_micro::text`);
  return rows.length === 1;
}

export async function giveBackAdjustRoom(db: Db, operatorId: string, dayStart: Date, amountMicro: bigint): Promise<void> {
  await db.rows(sql`
    UPDATE operator_adjust_days SET used_micro = used_micro - ${amountMicro}::bigint
    WHERE operator_id = ${operatorId} AND day_start = ${dayStart.toISOString()}::timestamptz`);
}

/** What the operator adjusted in the day that began at `dayStart`. */
export async function adjustRoomUsed(db: Db, operatorId: string, dayStart: Date): Promise<bigint> {
  const rows = await db.rows<{ used_micro: string }>(sql`
    SELECT used_micro::text FROM operator_adjust_days WHERE operator_id = ${operatorId} AND day_start = ${dayStart.toISOString()}::timestamptz`);
  return BigInt(rows[0]?.used_micro ?? "0");
}
