/**
 * Keeps the account area's tables bounded: sign-in codes are needed for a day (the daily send
 * limits look back 24 hours) and kept two; ended sessions are kept 30 days (for an
 * operator looking into a customer's question), then deleted; the SMS budget's days (one row a
 * day) are kept about a year. Runs every
 * CONSOLE_SWEEP_INTERVAL_MS on each node; deleting twice is harmless.
 */
import { sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";

export const CONSOLE_SWEEP_INTERVAL_MS = 3_600_000;
export const OTP_ROWS_KEEP_MS = 2 * 24 * 3_600_000;
export const ENDED_SESSIONS_KEEP_MS = 30 * 24 * 3_600_000;
export const SMS_DAYS_KEEP_MS = 400 * 24 * 3_600_000;

export async function sweepConsole(db: Db, nowMs: number = Date.now()): Promise<{ codes: number; sessions: number }> {
  const codesBefore = new Date(nowMs - OTP_ROWS_KEEP_MS).toISOString();
  const sessionsBefore = new Date(nowMs - ENDED_SESSIONS_KEEP_MS).toISOString();
  const codes = await db.rows(sql`DELETE FROM otp_codes WHERE created_at < ${codesBefore}::timestamptz RETURNING id`);
  const sessions = await db.rows(sql`
    DELETE FROM console_sessions
    WHERE coalesce(revoked_at, expires_at) < ${sessionsBefore}::timestamptz OR last_used_at < ${sessionsBefore}::timestamptz
    RETURNING id`);
  await db.rows(sql`DELETE FROM sms_days WHERE day < ${new Date(nowMs - SMS_DAYS_KEEP_MS).toISOString().slice(0, 10)}::date RETURNING day`);
  return { codes: codes.length, sessions: sessions.length };
}
