/**
 * Keeps the account area's tables bounded: sign-in codes are needed for a day (the daily cap on
 * wrong tries looks back 24 hours) and kept two; ended sessions are kept 30 days (for an
 * operator looking into a customer's question), then deleted. Runs every
 * CONSOLE_SWEEP_INTERVAL_MS on each node; deleting twice is harmless.
 */
import { sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";

export const CONSOLE_SWEEP_INTERVAL_MS = 3_600_000;
export const OTP_ROWS_KEEP_MS = 2 * 24 * 3_600_000;
export const ENDED_SESSIONS_KEEP_MS = 30 * 24 * 3_600_000;

export async function sweepConsole(db: Db, nowMs: number = Date.now()): Promise<{ codes: number; sessions: number }> {
  const codesBefore = new Date(nowMs - OTP_ROWS_KEEP_MS).toISOString();
  const sessionsBefore = new Date(nowMs - ENDED_SESSIONS_KEEP_MS).toISOString();
  const codes = await db.rows(sql`DELETE FROM otp_codes WHERE created_at < ${codesBefore}::timestamptz RETURNING id`);
  const sessions = await db.rows(sql`
    DELETE FROM console_sessions
    WHERE coalesce(revoked_at, expires_at) < ${sessionsBefore}::timestamptz OR last_used_at < ${sessionsBefore}::timestamptz
    RETURNING id`);
  return { codes: codes.length, sessions: sessions.length };
}
