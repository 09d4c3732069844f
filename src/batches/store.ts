/**
 * Batches in the database: their rows, their lines, and the moves between OpenAI's states. Every
 * move is a conditional update from the states it may leave, so two nodes (or a redelivered
 * item) never move a batch twice: validating → in_progress | failed; in_progress → finalizing →
 * completed; validating | in_progress → cancelling → cancelled; validating | in_progress → expired.
 */
import { and, asc, desc, eq, inArray, isNull, lt, sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { batches, batchLines } from "../db/schema.ts";
import { costToman } from "../admission/costReply.ts";
import { newId } from "../ids.ts";
import type { BatchError } from "./lines.ts";
import type { BatchPricing, ModelEstimate } from "./pricing.ts";

export const BATCH_STATUSES = [
  "validating",
  "failed",
  "in_progress",
  "finalizing",
  "completed",
  "expired",
  "cancelling",
  "cancelled",
] as const;
export type BatchStatus = (typeof BATCH_STATUSES)[number];
/** The states in which a batch still runs or waits to: the ones cancel and expiry may end. */
export const OPEN_STATUSES: BatchStatus[] = ["validating", "in_progress"];
/** The one completion window (OpenAI's). */
export const COMPLETION_WINDOW_MS = 24 * 3_600_000;
/** Batches one list reply holds (OpenAI's bound; 20 by default). */
export const BATCHES_LIST_LIMIT_MAX = 100;
/** Metadata pairs and their sizes (OpenAI's bounds). */
export const METADATA_PAIRS_MAX = 16;
export const METADATA_KEY_CHARS_MAX = 64;
export const METADATA_VALUE_CHARS_MAX = 512;

export type BatchRow = typeof batches.$inferSelect;

/** The request id of a batch's line: the same on every run of it, so the ledger bills it once. */
export function lineRequestId(batchId: string, line: number): string {
  return `req_${batchId.slice("batch_".length)}_${line}`;
}

const seconds = (d: Date | null) => (d ? Math.floor(d.getTime() / 1000) : null);

/**
 * The gateway's own fields of a batch, on both wires: `pricing` (`batch`, `live` or `mixed`) and
 * `estimate` (its lines' models, each at the batch or the live price), decided at create, and
 * `cost_micro_toman` (and `cost_toman`), what its lines were billed so far (docs/batches.md#money).
 */
export function batchPricingFields(b: BatchRow) {
  const estimate = b.estimate as { models: ModelEstimate[] } | null;
  return {
    pricing: b.pricing as BatchPricing,
    estimate: estimate ? { models: estimate.models, currency: "toman" as const, per: 1_000_000 } : null,
    cost_toman: costToman(b.costMicro),
    cost_micro_toman: b.costMicro.toString(),
  };
}

/** A batch as OpenAI's wire shows it, with the gateway's own fields (batchPricingFields). */
export function batchObject(b: BatchRow) {
  return {
    id: b.id,
    object: "batch" as const,
    endpoint: b.endpoint,
    errors: b.errors ? { object: "list", data: b.errors as BatchError[] } : null,
    input_file_id: b.inputFileId,
    completion_window: b.completionWindow,
    status: b.status as BatchStatus,
    output_file_id: b.outputFileId,
    error_file_id: b.errorFileId,
    created_at: seconds(b.createdAt)!,
    in_progress_at: seconds(b.inProgressAt),
    expires_at: seconds(b.expiresAt),
    finalizing_at: seconds(b.finalizingAt),
    completed_at: seconds(b.completedAt),
    failed_at: seconds(b.failedAt),
    expired_at: seconds(b.expiredAt),
    cancelling_at: seconds(b.cancellingAt),
    cancelled_at: seconds(b.cancelledAt),
    request_counts: { total: b.total, completed: b.completed, failed: b.failed },
    metadata: (b.metadata as Record<string, string> | null) ?? null,
    ...batchPricingFields(b),
  };
}

export async function insertBatch(
  db: Db,
  b: {
    accountId: string;
    keyId: string;
    endpoint: string;
    inputFileId: string;
    metadata: Record<string, string> | null;
    residency: "in-country" | null;
    pricing: BatchPricing;
    estimate: { models: ModelEstimate[] };
  },
  nowMs: number,
): Promise<BatchRow> {
  const [row] = await db.orm
    .insert(batches)
    .values({
      id: newId("batch"),
      ...b,
      completionWindow: "24h",
      status: "validating",
      createdAt: new Date(nowMs),
      expiresAt: new Date(nowMs + COMPLETION_WINDOW_MS),
    })
    .returning();
  return row!;
}

/** A batch by id, an account's only when `accountId` is given (another's is not found). */
export async function findBatch(db: Db, id: string, accountId?: string): Promise<BatchRow | null> {
  const where = accountId ? and(eq(batches.id, id), eq(batches.accountId, accountId)) : eq(batches.id, id);
  const [row] = await db.orm.select().from(batches).where(where);
  return row ?? null;
}

/** The account's batches, newest first, after the batch `after` when given. */
export async function listBatches(db: Db, accountId: string, q: { limit: number; after?: string }) {
  const conditions = [eq(batches.accountId, accountId)];
  const cursor = q.after ? await findBatch(db, q.after, accountId) : null;
  if (cursor) {
    // The cursor's own time as the database keeps it (microseconds; a JS Date has milliseconds).
    conditions.push(sql`(${batches.createdAt}, ${batches.id}) < (SELECT created_at, id FROM batches WHERE id = ${cursor.id})`);
  }
  const rows = await db.orm
    .select()
    .from(batches)
    .where(and(...conditions))
    .orderBy(desc(batches.createdAt), desc(batches.id))
    .limit(q.limit + 1);
  return { data: rows.slice(0, q.limit), hasMore: rows.length > q.limit };
}

const stampOf: Partial<Record<BatchStatus, keyof BatchRow>> = {
  in_progress: "inProgressAt",
  finalizing: "finalizingAt",
  completed: "completedAt",
  failed: "failedAt",
  expired: "expiredAt",
  cancelling: "cancellingAt",
  cancelled: "cancelledAt",
};

type Tx = Parameters<Parameters<Db["orm"]["transaction"]>[0]>[0];

/**
 * Moves a batch from one of `from` to `to` (its time stamped), with `set` besides; the row
 * moved, or null when it was in no state of `from` (another node moved it first).
 * `unfinished`: only while no result file was written.
 */
export async function moveBatch(
  db: Db | Tx,
  id: string,
  from: BatchStatus[],
  to: BatchStatus,
  nowMs: number,
  set: Partial<BatchRow> = {},
  options: { unfinished?: boolean } = {},
): Promise<BatchRow | null> {
  const orm = "orm" in db ? db.orm : db;
  const stamp = stampOf[to];
  const conditions = [eq(batches.id, id), inArray(batches.status, from)];
  if (options.unfinished) conditions.push(isNull(batches.outputFileId), isNull(batches.errorFileId));
  const [row] = await orm
    .update(batches)
    .set({ status: to, ...(stamp ? { [stamp]: new Date(nowMs) } : {}), ...set })
    .where(and(...conditions))
    .returning();
  return row ?? null;
}

/** Open batches whose window has passed by `nowMs`. */
export async function overdueBatches(db: Db, nowMs: number): Promise<string[]> {
  const rows = await db.orm
    .select({ id: batches.id })
    .from(batches)
    .where(and(inArray(batches.status, OPEN_STATUSES), lt(batches.expiresAt, new Date(nowMs))));
  return rows.map((r) => r.id);
}

/** A batch's lines in order: their results for the output and error files. */
export async function lineResults(db: Db, batchId: string) {
  return db.orm
    .select({
      line: batchLines.line,
      customId: batchLines.customId,
      state: batchLines.state,
      result: batchLines.result,
      isError: batchLines.isError,
    })
    .from(batchLines)
    .where(eq(batchLines.batchId, batchId))
    .orderBy(asc(batchLines.line));
}

/** Lines of a batch some node runs now. */
export async function runningLines(db: Db, batchId: string): Promise<number> {
  const [row] = await db.orm
    .select({ n: sql<number>`count(*)::int` })
    .from(batchLines)
    .where(and(eq(batchLines.batchId, batchId), eq(batchLines.state, "running")));
  return row?.n ?? 0;
}

/** The batches' work in the database, every node's: what the operators' overview shows. */
export interface BatchQueueFigures {
  /** Batches validating or in progress. */
  open: number;
  /** Lines of in-progress batches waiting for a node. */
  linesQueued: number;
  /** Lines some node runs now. */
  linesRunning: number;
  /** When the oldest open batch was created, or null without one. */
  oldestOpenAt: Date | null;
}

/** Read over the open batches only (their lines by the primary key's batch prefix), not every line ever run. */
export async function batchQueueFigures(db: Db): Promise<BatchQueueFigures> {
  const [open] = await db.orm
    .select({ n: sql<number>`count(*)::int`, oldest: sql<string | null>`min(${batches.createdAt})` })
    .from(batches)
    .where(inArray(batches.status, OPEN_STATUSES));
  const [lines] = await db.orm
    .select({
      queued: sql<number>`count(*) FILTER (WHERE ${batchLines.state} = 'queued')::int`,
      running: sql<number>`count(*) FILTER (WHERE ${batchLines.state} = 'running')::int`,
    })
    .from(batchLines)
    .innerJoin(batches, eq(batches.id, batchLines.batchId))
    .where(eq(batches.status, "in_progress"));
  return {
    open: open?.n ?? 0,
    linesQueued: lines?.queued ?? 0,
    linesRunning: lines?.running ?? 0,
    oldestOpenAt: open?.oldest ? new Date(open.oldest) : null,
  };
}
