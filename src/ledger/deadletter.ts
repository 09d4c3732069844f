/**
 * Poison usage records. A batch the database refuses with a data or constraint error (SQLSTATE
 * class 22 or 23: it would refuse the same batch forever) is split in halves until each refused
 * record is alone; those are dead-lettered and every other record is posted as usual.
 *
 * In full, with the reasoning: docs/internals.md#dead-letters.
 */
import { sql, type SQL } from "drizzle-orm";
import { sqlReason, sqlStateOf, txRows, type Db } from "../db/client.ts";
import { encodeJson } from "../json.ts";
import { postUsageBatch, postUsageInTx, usageRecordSchema, type BatchResult, type UsageRecord, type UsageSink } from "./usage.ts";

/** SQLSTATE classes of a refusal that no retry can change: 22 data exception, 23 integrity constraint. */
export const POISON_SQLSTATE_CLASSES = ["22", "23"] as const;
export const DEAD_LETTER_REASON_CHARS_MAX = 500;
export const DEAD_LETTERS_LISTED_MAX = 500;
const INT64_MAX = 2n ** 63n - 1n;

export type DeadLetterSource = "writer" | "consumer" | "deliveries" | "malformed";
/** Characters of a malformed message kept in its dead letter (the usage stream takes up to 1 MiB). */
export const MALFORMED_MESSAGE_CHARS_MAX = 64 * 1024;

export interface DeadLetter {
  requestId: string;
  reason: string;
  /** Null when dead-lettered for its deliveries. */
  sqlState: string | null;
  source: DeadLetterSource;
  writtenOffMicro: bigint;
  /** The record as stored (JSON text). */
  record: string;
}

/** True for a refusal of the data itself; false for connection, serialization and every other error. */
export function isPoison(error: unknown): boolean {
  const state = sqlStateOf(error);
  return state !== null && (POISON_SQLSTATE_CLASSES as readonly string[]).includes(state.slice(0, 2));
}

export interface PostOptions {
  source: DeadLetterSource;
  /** Called once per record dead-lettered by this call (metrics, the dead-letter stream). */
  onDeadLetter?: (letter: DeadLetter) => void | Promise<void>;
}

/**
 * Posts a batch; records the database refuses are found by splitting and dead-lettered. Throws
 * only errors that are not the data's (retry the whole batch then).
 * @example const { written, deadLetters } = await postOrDeadLetter(db, batch, { source: "writer" });
 */
export async function postOrDeadLetter(
  db: Db,
  batch: UsageRecord[],
  options: PostOptions,
): Promise<{ written: number; deadLetters: DeadLetter[] }> {
  const found: DeadLetter[] = [];
  let written = 0;
  const post = async (part: UsageRecord[]): Promise<void> => {
    try {
      written += (await postUsageBatch(db, part)).written;
    } catch (error) {
      if (!isPoison(error)) throw error;
      if (part.length === 1) {
        const letters = await deadLetterRecords(db, part, {
          reason: sqlReason(error),
          sqlState: sqlStateOf(error),
          source: options.source,
        });
        for (const letter of letters) await options.onDeadLetter?.(letter);
        found.push(...letters);
        return;
      }
      const half = Math.ceil(part.length / 2);
      await post(part.slice(0, half));
      await post(part.slice(half));
    }
  };
  await post(batch);
  return { written, deadLetters: found };
}

/** What the record's hold would have charged, when that is a sane amount; else nothing is written off. */
function chargeOf(record: UsageRecord): bigint {
  const billed = record.billedMicro;
  return typeof billed === "bigint" && billed > 0n && billed <= INT64_MAX ? billed : 0n;
}

/** A text column refuses NUL; the record's JSON keeps the original (escaped). */
const textSafe = (value: unknown) => String(value).replaceAll("\u0000", "\uFFFD");

/**
 * Dead-letters records as they are, without posting them (also the path of a message delivered
 * USAGE_DELIVERIES_MAX times); returns the ones newly dead-lettered.
 */
export async function deadLetterRecords(
  db: Db,
  records: UsageRecord[],
  why: { reason: string; sqlState: string | null; source: DeadLetterSource },
): Promise<DeadLetter[]> {
  const letters: DeadLetter[] = [];
  const reason = textSafe(why.reason).slice(0, DEAD_LETTER_REASON_CHARS_MAX);
  for (const record of records) {
    const requestId = textSafe(record.requestId);
    const text = encodeJson(record);
    const amount = chargeOf(record);
    const rows = await db.rows<{ request_id: string }>(sql`
      WITH d AS (
        INSERT INTO usage_dead_letters (request_id, account_id, hold_id, record, reason, sql_state, source, written_off_micro)
        SELECT ${requestId}, ${textSafe(record.accountId)}, ${textSafe(record.holdId)}, ${text}, ${reason}, ${why.sqlState}, ${why.source}, ${amount}::bigint
        WHERE NOT EXISTS (SELECT 1 FROM usage_records WHERE request_id = ${requestId})
        ON CONFLICT (request_id) DO NOTHING
        RETURNING request_id, written_off_micro, reason),
      t AS (
        INSERT INTO ledger_transfers (reference, debit_account, credit_account, amount_micro, kind, memo)
        SELECT 'deadletter:' || request_id, 'write_off', 'revenue', written_off_micro, 'dead_letter', reason FROM d WHERE written_off_micro > 0
        RETURNING id)
      SELECT request_id FROM d`);
    if (rows.length === 1)
      letters.push({ requestId, reason, sqlState: why.sqlState, source: why.source, writtenOffMicro: amount, record: text });
  }
  return letters;
}

/**
 * Dead-letters a message of the usage subject that is no batch of records (nothing to bill, no
 * account, no hold: kept for its operator, counted, listed and audited like any dead letter;
 * replay refuses it). Its request id is `malformed:<stream sequence>:<hash of the message>`, so
 * a second delivery of one message files nothing twice. Null when it was already filed.
 */
export async function deadLetterMalformed(db: Db, message: { seq: number; data: string; reason: string }): Promise<DeadLetter | null> {
  const requestId = `malformed:${message.seq}:${Bun.hash(message.data).toString(36)}`;
  const reason = textSafe(message.reason).slice(0, DEAD_LETTER_REASON_CHARS_MAX);
  const record = textSafe(message.data).slice(0, MALFORMED_MESSAGE_CHARS_MAX);
  const rows = await db.rows<{ request_id: string }>(sql`
    INSERT INTO usage_dead_letters (request_id, account_id, hold_id, record, reason, sql_state, source, written_off_micro)
    VALUES (${requestId}, '', '', ${record}, ${reason}, NULL, 'malformed', 0)
    ON CONFLICT (request_id) DO NOTHING
    RETURNING request_id`);
  return rows.length === 1 ? { requestId, reason, sqlState: null, source: "malformed", writtenOffMicro: 0n, record } : null;
}

export type ReplayResult =
  | ({ outcome: "replayed" } & BatchResult)
  | { outcome: "not_found" }
  | { outcome: "already_replayed" }
  | { outcome: "refused"; reason: string };

/**
 * Posts a dead letter's record and reverses its write-off, in one transaction. A record the
 * database still refuses stays dead (outcome `refused`, with the reason); a record whose hold
 * has closed meanwhile is written off as any late record is (usage.ts), not charged.
 */
export async function replayDeadLetter(db: Db, id: bigint): Promise<ReplayResult> {
  try {
    return await db.orm.transaction(async (tx): Promise<ReplayResult> => {
      const [row] = await txRows<{ record: string; status: string }>(
        tx,
        sql`
        SELECT record, status FROM usage_dead_letters WHERE id = ${id}::bigint FOR UPDATE`,
      );
      if (!row) return { outcome: "not_found" };
      if (row.status === "replayed") return { outcome: "already_replayed" };
      let json: unknown;
      try {
        json = JSON.parse(row.record);
      } catch {
        return { outcome: "refused", reason: "the stored record is not JSON" };
      }
      const parsed = usageRecordSchema.safeParse(json);
      if (!parsed.success) {
        const issue = parsed.error.issues[0];
        return { outcome: "refused", reason: `the stored record is not a usage record: ${issue?.path.join(".")}: ${issue?.message}` };
      }
      // Marked first: postUsageInTx skips records whose dead letter awaits replay.
      await txRows(
        tx,
        sql`
        WITH d AS (
          UPDATE usage_dead_letters SET status = 'replayed', replayed_at = now() WHERE id = ${id}::bigint
          RETURNING request_id, written_off_micro)
        INSERT INTO ledger_transfers (reference, debit_account, credit_account, amount_micro, kind, memo)
        SELECT 'deadletter-reversal:' || request_id, 'revenue', 'write_off', written_off_micro, 'dead_letter_reversal', 'replayed'
        FROM d WHERE written_off_micro > 0`,
      );
      const result = await postUsageInTx(tx, [parsed.data]);
      return { outcome: "replayed", ...result };
    });
  } catch (error) {
    if (isPoison(error)) return { outcome: "refused", reason: sqlReason(error) };
    throw error;
  }
}

export interface DeadLetterRow {
  id: string;
  request_id: string;
  account_id: string;
  hold_id: string;
  reason: string;
  sql_state: string | null;
  source: DeadLetterSource;
  written_off_micro: string;
  status: "dead" | "replayed";
  created_at: string;
  replayed_at: string | null;
  record: string;
}

const isoText = (column: SQL) => sql`to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

/** Dead letters, newest first; `status` narrows to dead (awaiting replay) or replayed ones. */
export async function listDeadLetters(db: Db, options: { status?: "dead" | "replayed"; limit?: number } = {}): Promise<DeadLetterRow[]> {
  const limit = Math.min(options.limit ?? 100, DEAD_LETTERS_LISTED_MAX);
  return db.rows<DeadLetterRow>(sql`
    SELECT id::text AS id, request_id, account_id, hold_id, reason, sql_state, source, written_off_micro::text AS written_off_micro,
      status, ${isoText(sql`created_at`)} AS created_at, ${isoText(sql`replayed_at`)} AS replayed_at, record
    FROM usage_dead_letters
    WHERE ${options.status ?? null}::text IS NULL OR status = ${options.status ?? null}::text
    ORDER BY id DESC LIMIT ${limit}`);
}

/**
 * Dead letters awaiting replay and what they wrote off, every node's (metrics and the audit);
 * `malformed`: of them, the messages that were no records at all.
 */
export async function deadLetterTotals(db: Db): Promise<{ dead: number; writtenOffMicro: bigint; malformed: number }> {
  const [row] = await db.rows<{ n: unknown; micro: unknown; malformed: unknown }>(sql`
    SELECT count(*) AS n, coalesce(sum(written_off_micro), 0) AS micro, count(*) FILTER (WHERE source = 'malformed') AS malformed
    FROM usage_dead_letters WHERE status = 'dead'`);
  return { dead: Number(row?.n ?? 0), writtenOffMicro: BigInt(String(row?.micro ?? 0)), malformed: Number(row?.malformed ?? 0) };
}

/** Records dead-lettered by this node since start, by source and SQLSTATE (`max_deliver` for deliveries, `none` for malformed messages). */
export class DeadLetterTally {
  readonly counts = new Map<string, { source: DeadLetterSource; sqlState: string; count: number }>();

  add(letter: DeadLetter): void {
    const sqlState = letter.sqlState ?? (letter.source === "malformed" ? "none" : "max_deliver");
    const key = `${letter.source}|${sqlState}`;
    const entry = this.counts.get(key) ?? { source: letter.source, sqlState, count: 0 };
    entry.count++;
    this.counts.set(key, entry);
  }
}

/**
 * The embedded and single-database sink: each batch is posted in one transaction; records the
 * database refuses are dead-lettered so that one bad record stops nobody's billing.
 */
export function ledgerSink(db: Db, options: { onDeadLetter?: (letter: DeadLetter) => void } = {}): UsageSink {
  return { write: async (batch) => void (await postOrDeadLetter(db, batch, { source: "writer", onDeadLetter: options.onDeadLetter })) };
}
