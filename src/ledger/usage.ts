/**
 * Durable usage: every request ends in one usage record, and each record posts its charge from
 * its hold exactly once. Records are written by group commit: appended in memory, then written
 * in batches of at most `USAGE_BATCH_MAX`, at most `flushMs` (USAGE_FLUSH_MS) after they were
 * appended, each batch in one transaction (postUsageInTx's steps).
 *
 * A crash loses at most the records of the last `flushMs`. While the database cannot be written
 * the records stay buffered (at most `USAGE_BUFFER_MAX`) and retried, and `accepting` turns false
 * so that admission refuses new work instead of serving it unbilled.
 *
 * In full, with the reasoning: docs/internals.md#usage-records.
 */
import { sql } from "drizzle-orm";
import { z } from "zod";
import { sqlReason, txRows, type Db, type Tx } from "../db/client.ts";
import { usageRecords } from "../db/schema.ts";
import { bigintJson, encodeJson } from "../json.ts";
import { fencedOut } from "./fence.ts";
import { priceField, UNIT_NAMES, UNITS, unitMap, unitsField, type PriceField, type UnitRow, type UnitsField } from "../units.ts";
import type { Logger } from "../log.ts";
import { TIMED_OUT, within } from "../within.ts";

/** Default of USAGE_FLUSH_MS: measured, each commit costs PGlite a file sync, so 20 ms halves throughput. */
export const USAGE_FLUSH_MS_DEFAULT = 100;
export const USAGE_BATCH_MAX = 2_000;
export const USAGE_BUFFER_MAX = 200_000;
/** Records waiting when a write ends past which the next batch is written at once, without waiting for its timer. */
export const USAGE_BATCH_EARLY_RECORDS = USAGE_BATCH_MAX / 2;
/**
 * Records waiting to be written past which a new admission waits for the writer (`room`): a node
 * never serves faster than it bills, so the buffer, and what a crash could lose, stays within one
 * batch even when the database's thread gets less of the core than the requests do.
 */
export const USAGE_BACKLOG_RECORDS_MAX = USAGE_BATCH_MAX;
/** The longest an admission waits for the writer to catch up before it is refused (503). */
export const USAGE_BACKLOG_WAIT_MS_MAX = 2_000;
const RETRY_MS_FIRST = 50;
const RETRY_MS_MAX = 2_000;

export interface BatchResult {
  written: number;
  postedMicro: bigint;
  writtenOffMicro: bigint;
}

interface HoldTotals {
  hold_id: string;
  account_id: string;
  billed: bigint;
  unbilled: bigint;
  /** A request id of the group, which makes the transfer references unique and replay-safe. */
  ref: string;
}

/**
 * Writes one batch in one transaction of three statements whatever its size; idempotent by
 * request id (a record already written is skipped, and so is its charge).
 */
export async function postUsageBatch(db: Db, batch: UsageRecord[]): Promise<BatchResult> {
  if (batch.length === 0) return { written: 0, postedMicro: 0n, writtenOffMicro: 0n };
  return db.orm.transaction((tx) => postUsageInTx(tx, batch));
}

/** postUsageBatch inside a transaction of the caller's (a dead letter's replay posts with its reversal). */
export async function postUsageInTx(tx: Tx, batch: UsageRecord[]): Promise<BatchResult> {
  // A settle retried within one batch: the first record of a request id is the one.
  const unique = new Map<string, UsageRecord>();
  for (const r of batch) if (!unique.has(r.requestId)) unique.set(r.requestId, r);
  if (unique.size === 0) return { written: 0, postedMicro: 0n, writtenOffMicro: 0n };
  const accountOf = await lockLiveHolds(tx, [...unique.values()]);
  const stale = await fencedOutRecords(tx, [...unique.values()]);
  const records = [...unique.values()].map((r) => ({
    ...r,
    billedMicro: accountOf.has(r.holdId) && !stale.has(r.requestId) ? r.billedMicro : 0n,
  }));
  const fresh = await insertRecords(tx, records);
  const groups = holdTotals(
    records.filter((r) => fresh.has(r.requestId)),
    accountOf,
  );
  if (groups.length > 0) await postGroups(tx, groups);
  return {
    written: fresh.size,
    postedMicro: groups.reduce((sum, g) => sum + g.billed, 0n),
    writtenOffMicro: groups.reduce((sum, g) => sum + g.unbilled, 0n),
  };
}

/**
 * 1. Locks the batch's holds; one no longer pending (closed, or expired: its node died) takes no
 * charge. A pending hold past its deadline still does: it ends by close or expiry only (holds.ts).
 * Returns each live hold's account.
 */
async function lockLiveHolds(tx: Tx, records: UsageRecord[]): Promise<Map<string, string>> {
  const holdIds = [...new Set(records.map((r) => r.holdId))];
  const live = await txRows<{ id: string; account_id: string }>(
    tx,
    sql`
    SELECT id, account_id FROM holds
    WHERE id IN (SELECT json_array_elements_text(${encodeJson(holdIds)}::json)) AND status = 'pending'
    FOR UPDATE`,
  );
  return new Map(live.map((h) => [h.id, h.account_id]));
}

/**
 * 1b. Fencing: the request ids refused because another node has owned their partition since the
 * record's token (fence.ts). FOR SHARE makes a new owner's raiseFence wait for this batch, so a
 * batch is judged against one fence, before or after the takeover, never half-way.
 */
async function fencedOutRecords(tx: Tx, records: UsageRecord[]): Promise<Set<string>> {
  const fenced = records.filter((r) => r.partition != null && r.fenceToken != null);
  if (fenced.length === 0) return new Set();
  const rows = await txRows<{ request_id: string }>(
    tx,
    sql`
    SELECT r."requestId" AS request_id
    FROM json_to_recordset(${encodeJson(fenced.map((r) => ({ requestId: r.requestId, partition: r.partition, fenceToken: r.fenceToken, admittedAt: r.admittedAt ?? null })))}::json)
      AS r("requestId" text, partition int, "fenceToken" bigint, "admittedAt" timestamptz)
    JOIN key_partitions kp ON kp.partition = r.partition
    WHERE ${fencedOut(sql`r."fenceToken"`, sql`r."admittedAt"`)}
    FOR SHARE OF kp`,
  );
  return new Set(rows.map((row) => row.request_id));
}

/** 2. Writes the records, skipping those already written (a replay); returns the request ids written. */
async function insertRecords(tx: Tx, records: UsageRecord[]): Promise<Set<string>> {
  const inserted = await txRows<{ request_id: string }>(
    tx,
    sql`
    INSERT INTO usage_records (${insertColumns})
    SELECT ${recordFields}
    FROM json_to_recordset(${rowsJson(records)}::json) AS r(${recordTypes})
    -- A dead-lettered record is posted by its replay only (deadletter.ts), never by a redelivery.
    WHERE NOT EXISTS (SELECT 1 FROM usage_dead_letters d WHERE d.request_id = r."requestId" AND d.status = 'dead')
    ON CONFLICT (request_id) DO NOTHING
    RETURNING request_id`,
  );
  return new Set(inserted.map((r) => r.request_id));
}

/** The records written, summed by hold: what each hold is charged and what is written off. */
function holdTotals(written: UsageRecord[], accountOf: Map<string, string>): HoldTotals[] {
  const totals = new Map<string, HoldTotals>();
  for (const r of written) {
    const t = totals.get(r.holdId) ?? {
      hold_id: r.holdId,
      account_id: accountOf.get(r.holdId) ?? r.accountId,
      billed: 0n,
      unbilled: 0n,
      ref: r.requestId,
    };
    t.billed += r.billedMicro;
    t.unbilled += r.meteredMicro - r.billedMicro;
    totals.set(r.holdId, t);
  }
  return [...totals.values()];
}

/** 3. Posts from the holds, the wallets, and the transfers that record both, in one statement. */
async function postGroups(tx: Tx, groups: HoldTotals[]): Promise<void> {
  await txRows(
    tx,
    sql`
    WITH g AS (
      SELECT * FROM json_to_recordset(${encodeJson(groups)}::json)
        AS g(hold_id text, account_id text, billed bigint, unbilled bigint, ref text)),
    h AS (
      UPDATE holds SET posted_micro = posted_micro + g.billed FROM g
      WHERE holds.id = g.hold_id AND g.billed > 0 RETURNING holds.id),
    w AS (
      UPDATE wallets SET balance_micro = balance_micro - s.billed, held_micro = held_micro - s.billed, updated_at = now()
      FROM (SELECT account_id, sum(billed) AS billed FROM g GROUP BY account_id) s
      WHERE wallets.account_id = s.account_id AND s.billed > 0
      RETURNING wallets.account_id, wallets.balance_micro, wallets.balance_micro + s.billed AS before_micro),
    -- A settlement taking the balance from at or above the account's alert threshold to below it
    -- writes one alert, in this statement: decided once whichever node posts (balanceAlerts.ts).
    alerts AS (
      INSERT INTO balance_alerts (account_id, balance_micro, threshold_micro)
      SELECT w.account_id, w.balance_micro, a.low_balance_threshold_micro FROM w JOIN accounts a ON a.id = w.account_id
      WHERE w.balance_micro < a.low_balance_threshold_micro AND w.before_micro >= a.low_balance_threshold_micro
      RETURNING id),
    usage AS (
      INSERT INTO ledger_transfers (reference, debit_account, credit_account, amount_micro, kind)
      SELECT 'usage:' || hold_id || ':' || ref, 'wallet:' || account_id, 'revenue', billed, 'usage' FROM g WHERE billed > 0
      RETURNING id),
    written_off AS (
      INSERT INTO ledger_transfers (reference, debit_account, credit_account, amount_micro, kind)
      SELECT 'writeoff:' || hold_id || ':' || ref, 'write_off', 'revenue', unbilled, 'write_off' FROM g WHERE unbilled > 0
      RETURNING id)
    SELECT (SELECT count(*) FROM h) AS holds, (SELECT count(*) FROM w) AS wallets`,
  );
}

/** Where batches go: straight into the ledger, or into a durable stream that a consumer posts. */
export interface UsageSink {
  write(batch: UsageRecord[]): Promise<void>;
  /** Resolves once everything written so far has been posted to the ledger. */
  posted?(): Promise<void>;
  /** True while the sink can keep no more unconfirmed records: admit nothing new then. */
  readonly full?: boolean;
}

/**
 * A usage record, and as it travels through a stream (bigints as strings). Its fields are
 * usage_records' columns, but for the unit maps, whose each unit has its pair of columns (UNITS).
 */
const usageRecordFields = z.object({
  requestId: z.string(),
  accountId: z.string(),
  keyId: z.string(),
  holdId: z.string(),
  model: z.string(),
  operation: z.string(),
  backend: z.string().nullable(),
  priceVersionId: z.number().int(),
  /** Units used by unit, each disjoint, and the prices (toman per 1M) they were charged at (absent: none). */
  usage: unitMap(bigintJson),
  prices: unitMap(bigintJson),
  /** The vendor-run tool's unit the `hosted_call` units count (`web_search_call`). */
  hostedCallUnit: z.string().optional(),
  /** What the usage is worth at the recorded prices. */
  meteredMicro: bigintJson,
  /** What is charged: metered capped by the request's reserve; the rest is written off. */
  billedMicro: bigintJson,
  status: z.number().int(),
  durationMs: z.number().int(),
  /** The key's partition and the owner epoch's fencing token it was settled under (cluster only). */
  partition: z.number().int().nullable().optional(),
  fenceToken: bigintJson.nullable().optional(),
  /** When the request was admitted (ISO 8601, the admitting node's clock): what the fencing rule judges; absent from older nodes' records. */
  admittedAt: z.iso.datetime({ offset: true }).nullable().optional(),
  /** Parts of the upstream's usage report outside the request's bounds (`output_over`, `input_under`), comma-separated; null: none. */
  anomalies: z.string().nullable().optional(),
  /** A request that ended early: who ended it, its metered output units and the allowance billed on top (absent: it ran to its end, or an older node's record). */
  endedBy: z.enum(["client", "upstream", "gateway"]).nullable().optional(),
  outputMeteredUnits: z.number().int().nonnegative().nullable().optional(),
  outputAllowanceUnits: z.number().int().nonnegative().nullable().optional(),
});
export type UsageRecord = z.infer<typeof usageRecordFields>;
/** A record as its usage_records row: the maps as each unit's pair of columns. */
type UsageRow = Omit<UsageRecord, "usage" | "prices"> & Record<UnitsField | PriceField, bigint>;
/** The record's fields that are columns as they are (all but the unit maps). */
const RECORD_FIELDS = usageRecordFields.keyof().options.filter((field) => field !== "usage" && field !== "prices");

/**
 * A record as it travels (recordRow): its columns, each unit's pair as flat fields. Read too: a
 * record with the `usage` and `prices` maps (a dead letter's as stored; the usage log's records
 * of the release before, which carried both), whose maps are then taken and the pairs ignored;
 * and the records of the release before that (the pairs only).
 */
const usageRowFields = usageRecordFields
  .extend({ usage: usageRecordFields.shape.usage.optional(), prices: usageRecordFields.shape.prices.optional() })
  .extend(
    Object.fromEntries(
      UNIT_NAMES.flatMap((unit) => [
        [unitsField(unit), bigintJson.optional()],
        [priceField(unit), bigintJson.optional()],
      ]),
    ) as {
      [F in UnitsField | PriceField]: z.ZodOptional<typeof bigintJson>;
    },
  );

/** A usage record from its row (a usage log message's, a dead letter's): the maps as they came, else built from the pairs (a pair that is absent, no entry). */
export const usageRecordSchema = usageRowFields.transform((row): UsageRecord => {
  const record = { usage: {}, prices: {} } as UsageRecord;
  for (const field of RECORD_FIELDS) if (row[field] !== undefined) (record as Record<string, unknown>)[field] = row[field];
  for (const unit of UNIT_NAMES) {
    const units = row.usage ? row.usage[unit] : row[unitsField(unit)];
    const price = row.prices ? row.prices[unit] : row[priceField(unit)];
    if (units !== undefined) record.usage[unit] = units;
    if (price !== undefined) record.prices[unit] = price;
  }
  return record;
});

/**
 * The insert's one column list: each row field is the usage_records column of that name in
 * src/db/schema.ts (a field without one fails the typecheck), read from JSON as its SQL type.
 */
const rowFields = [...RECORD_FIELDS, ...UNIT_NAMES.flatMap((unit) => [unitsField(unit), priceField(unit)])] as (keyof UsageRow)[];
const usageColumns = rowFields.map((field) => ({ field, column: usageRecords[field].name, type: usageRecords[field].getSQLType() }));
const insertColumns = sql.raw(usageColumns.map((c) => c.column).join(", "));
const UNIT_ROW_FIELDS: ReadonlySet<string> = new Set(UNIT_NAMES.flatMap((unit) => [unitsField(unit), priceField(unit)]));
// A unit's pair is left out of a row when zero (recordRow): read back as 0.
const recordFields = sql.raw(
  usageColumns.map((c) => (UNIT_ROW_FIELDS.has(c.field) ? `COALESCE("${c.field}", 0)` : `"${c.field}"`)).join(", "),
);
const recordTypes = sql.raw(usageColumns.map((c) => `"${c.field}" ${c.type}`).join(", "));

/**
 * A record as its usage_records row: the one JSON shape a record travels in (the usage log's
 * messages) and is inserted from. Each unit's pair of columns (`inputUnits`, `inputPricePer1m`)
 * is written when either is not zero, and input's and output's always (`recordedUnused`: a node of
 * the previous release reads the usage log and requires them); undefined fields are left out
 * (json_to_recordset reads a missing field as null); bigints are decimal strings. Read back with
 * usageRecordSchema (the pairs become the maps). Built in one pass and
 * stringified on JSON.stringify's fast path: every request writes one, and the consumer parses it.
 * @example recordRow({ requestId: "r", usage: { input: 3n, output: 0n }, prices: { input: 2n, output: 5n }, … })
 *   // { requestId: "r", …, inputUnits: "3", inputPricePer1m: "2", outputUnits: "0", outputPricePer1m: "5" }
 */
export function recordRow(record: UsageRecord): Record<string, string | number | null> {
  const row: Record<string, string | number | null> = {};
  for (const field of RECORD_FIELDS) {
    const value = record[field];
    if (value !== undefined) row[field] = typeof value === "bigint" ? value.toString() : value;
  }
  for (const unit of UNIT_NAMES) {
    const units = record.usage[unit];
    const price = record.prices[unit];
    if (!units && !price && !(UNITS[unit] as UnitRow).recordedUnused) continue;
    row[unitsField(unit)] = (units ?? 0n).toString();
    row[priceField(unit)] = (price ?? 0n).toString();
  }
  return row;
}

/** Records as the JSON rows the insert reads, and as one message of the usage log carries them (recordRow). */
export function rowsJson(records: readonly UsageRecord[]): string {
  return JSON.stringify(records.map(recordRow));
}

export class UsageWriter {
  private buffer: UsageRecord[] = [];
  /** Records appended / written since start: `written()` waits on these, not on a forced flush. */
  private appendedCount = 0;
  private writtenCount = 0;
  private waiters: { count: number; resolve: () => void }[] = [];
  /** Admissions waiting for the backlog to fall below USAGE_BACKLOG_RECORDS_MAX. */
  private roomWaiters = new Set<() => void>();
  private timer: ReturnType<typeof setTimeout> | null = null;
  private writing: Promise<void> | null = null;
  private failing = false;
  private retryMs = RETRY_MS_FIRST;
  private stopped = false;

  constructor(
    private readonly sink: UsageSink,
    private readonly log: Logger,
    private readonly flushMs: number = USAGE_FLUSH_MS_DEFAULT,
  ) {}

  /** False while writes fail or the buffer is full: admit nothing new then. */
  get accepting(): boolean {
    return !this.failing && this.buffer.length < USAGE_BUFFER_MAX && !this.stopped && !this.sink.full;
  }

  get buffered(): number {
    return this.buffer.length;
  }

  /** Fewer than USAGE_BACKLOG_RECORDS_MAX records wait to be written: `room` would answer true at once. */
  get hasRoom(): boolean {
    return this.buffer.length < USAGE_BACKLOG_RECORDS_MAX;
  }

  /**
   * Resolves true at once while fewer than USAGE_BACKLOG_RECORDS_MAX records wait to be written;
   * otherwise once a write brings the backlog below it, or false after `waitMsMax`.
   * @example if (!writer.hasRoom && !(await writer.room())) return unavailable();
   */
  room(waitMsMax = USAGE_BACKLOG_WAIT_MS_MAX): Promise<boolean> {
    if (this.buffer.length < USAGE_BACKLOG_RECORDS_MAX) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      const done = (ok: boolean) => {
        clearTimeout(timer);
        this.roomWaiters.delete(wake);
        resolve(ok);
      };
      const wake = () => done(true);
      const timer = setTimeout(() => done(false), waitMsMax);
      timer.unref?.();
      this.roomWaiters.add(wake);
    });
  }

  append(record: UsageRecord): void {
    this.buffer.push(record);
    this.appendedCount++;
    if (this.buffer.length >= USAGE_BATCH_MAX) void this.flush();
    else this.timer ??= setTimeout(() => void this.flush(), this.flushMs);
  }

  /** Resolves once every record appended before the call is written (or the writer stopped). */
  async flush(): Promise<void> {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    while (this.writing) await this.writing;
    if (this.buffer.length === 0) return;
    this.writing = this.writeAll().finally(() => {
      this.writing = null;
    });
    await this.writing;
  }

  /**
   * Writes what is buffered when it starts, a batch at a time. Records appended meanwhile wait for
   * their own timer unless half a batch of them is already waiting: a slow write then makes the
   * next batch bigger, not the commits more frequent (writing them at once made each commit
   * smaller the slower the database was, and each commit has its fixed cost, a file sync in PGlite).
   */
  private async writeAll(): Promise<void> {
    let left = this.buffer.length;
    while (left > 0 || this.buffer.length >= USAGE_BATCH_EARLY_RECORDS) {
      const batch = this.buffer.slice(0, USAGE_BATCH_MAX);
      try {
        await this.sink.write(batch);
        this.buffer.splice(0, batch.length);
        left = Math.max(0, left - batch.length);
        this.writtenCount += batch.length;
        this.wake();
        this.failing = false;
        this.retryMs = RETRY_MS_FIRST;
      } catch (error) {
        this.failing = true;
        this.log("error", "usage_write_failed", { records: this.buffer.length, error: sqlReason(error), retryMs: this.retryMs });
        if (this.stopped) return;
        await Bun.sleep(this.retryMs);
        this.retryMs = Math.min(this.retryMs * 2, RETRY_MS_MAX);
      }
    }
  }

  /**
   * Resolves once every record appended before the call is written by the ordinary group
   * commit, without forcing an early one (a lease closing waits on this: forcing a commit per
   * closing lease would undo the batching).
   */
  written(): Promise<void> {
    if (this.writtenCount >= this.appendedCount) return Promise.resolve();
    const { promise, resolve } = Promise.withResolvers<void>();
    this.waiters.push({ count: this.appendedCount, resolve });
    return promise;
  }

  /** written(), then until the sink has posted it to the ledger (a closing lease waits on this). */
  async posted(): Promise<void> {
    await this.written();
    await this.sink.posted?.();
  }

  private wake(): void {
    if (this.buffer.length < USAGE_BACKLOG_RECORDS_MAX) for (const wake of this.roomWaiters) wake();
    if (this.waiters.length === 0) return;
    const still: typeof this.waiters = [];
    for (const waiter of this.waiters) waiter.count <= this.writtenCount ? waiter.resolve() : still.push(waiter);
    this.waiters = still;
  }

  /** flush(), but gives up waiting after `waitMs` (the records stay buffered and are retried). */
  async flushWithin(waitMs: number): Promise<boolean> {
    const flushed = this.flush().then(() => this.sink.posted?.());
    return (await within(flushed, waitMs)) !== TIMED_OUT;
  }

  async stop(): Promise<void> {
    await this.flush();
    this.stopped = true;
    for (const wake of this.roomWaiters) wake();
    for (const waiter of this.waiters) waiter.resolve();
    this.waiters = [];
  }
}
