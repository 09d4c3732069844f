/**
 * Durable usage: every request ends in one usage record, and each record posts its charge from
 * its hold exactly once. Records are written by group commit: appended in memory, then written
 * in batches of at most `USAGE_BATCH_MAX`, at most `USAGE_FLUSH_MS_MAX` after they were
 * appended, each batch in one transaction:
 *
 *   insert the records (ON CONFLICT (request_id) DO NOTHING: a replayed record posts nothing),
 *   post the new records' charges from their holds (a hold no longer pending — expired — takes
 *   no post: those records are billed 0 and their value goes to write-off),
 *   move the posted money wallet → revenue, and metered − billed write_off → revenue.
 *
 * A crash loses at most the records of the last `USAGE_FLUSH_MS_MAX`. While the database
 * refuses writes the records stay buffered (bounded by `USAGE_BUFFER_MAX`) and retried, and
 * `accepting` turns false so that admission refuses new work instead of serving it unbilled.
 */
import { inArray, sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { usageRecords } from "../db/schema.ts";
import type { Logger } from "../log.ts";

export const USAGE_FLUSH_MS_MAX = 20;
export const USAGE_BATCH_MAX = 2_000;
export const USAGE_BUFFER_MAX = 200_000;
const RETRY_MS_FIRST = 50;
const RETRY_MS_MAX = 2_000;

export interface UsageRecord {
  requestId: string;
  accountId: string;
  keyId: string;
  holdId: string;
  model: string;
  operation: string;
  backend: string | null;
  priceVersionId: number;
  inputUnits: bigint;
  outputUnits: bigint;
  inputPricePer1m: bigint;
  outputPricePer1m: bigint;
  /** What the usage is worth at the recorded prices. */
  meteredMicro: bigint;
  /** What is charged: metered capped by the request's reserve; the rest is written off. */
  billedMicro: bigint;
  status: number;
  durationMs: number;
}

export interface BatchResult {
  written: number;
  postedMicro: bigint;
  writtenOffMicro: bigint;
}

type Tx = Parameters<Parameters<Db["orm"]["transaction"]>[0]>[0];

async function rowsOf<T>(tx: Tx, query: ReturnType<typeof sql>): Promise<T[]> {
  const result = await tx.execute(query);
  return (Array.isArray(result) ? result : (result as { rows: unknown[] }).rows) as T[];
}

function groupBy<T>(items: T[], key: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) groups.set(key(item), [...(groups.get(key(item)) ?? []), item]);
  return groups;
}

const sum = (records: UsageRecord[], pick: (r: UsageRecord) => bigint) => records.reduce((s, r) => s + pick(r), 0n);

/** Writes one batch in one transaction; idempotent by request id. */
export async function postUsageBatch(db: Db, batch: UsageRecord[]): Promise<BatchResult> {
  // A settle retried within one batch: the first record of a request id is the one.
  const unique = new Map<string, UsageRecord>();
  for (const r of batch) if (!unique.has(r.requestId)) unique.set(r.requestId, r);
  const records = [...unique.values()];
  if (records.length === 0) return { written: 0, postedMicro: 0n, writtenOffMicro: 0n };
  return db.orm.transaction(async (tx) => {
    const inserted = await tx
      .insert(usageRecords)
      .values(records)
      .onConflictDoNothing({ target: usageRecords.requestId })
      .returning({ requestId: usageRecords.requestId });
    const fresh = new Set(inserted.map((r) => r.requestId));
    const newRecords = records.filter((r) => fresh.has(r.requestId));
    let postedMicro = 0n;
    let writtenOffMicro = 0n;
    for (const [holdId, group] of groupBy(newRecords, (r) => r.holdId)) {
      const billed = sum(group, (r) => r.billedMicro);
      const [hold] = await rowsOf<{ account_id: string }>(tx, sql`
        UPDATE holds SET posted_micro = posted_micro + ${billed}::bigint
        WHERE id = ${holdId} AND status = 'pending' AND deadline > now()
        RETURNING account_id`);
      const reference = `${holdId}:${group[0]!.requestId}`;
      let writeOff = sum(group, (r) => r.meteredMicro - r.billedMicro);
      if (hold) {
        if (billed > 0n) {
          await rowsOf(tx, sql`
            UPDATE wallets SET balance_micro = balance_micro - ${billed}::bigint, held_micro = held_micro - ${billed}::bigint, updated_at = now()
            WHERE account_id = ${hold.account_id}`);
          await rowsOf(tx, sql`
            INSERT INTO ledger_transfers (reference, debit_account, credit_account, amount_micro, kind)
            VALUES (${`usage:${reference}`}, ${`wallet:${hold.account_id}`}, 'revenue', ${billed}::bigint, 'usage')`);
          postedMicro += billed;
        }
      } else {
        // The hold expired first (its node died and the sweeper closed it): nothing can be
        // charged any more; the whole metered value is written off.
        const ids = group.map((r) => r.requestId);
        await tx.update(usageRecords).set({ billedMicro: 0n }).where(inArray(usageRecords.requestId, ids));
        writeOff = sum(group, (r) => r.meteredMicro);
      }
      if (writeOff > 0n) {
        await rowsOf(tx, sql`
          INSERT INTO ledger_transfers (reference, debit_account, credit_account, amount_micro, kind)
          VALUES (${`writeoff:${reference}`}, 'write_off', 'revenue', ${writeOff}::bigint, 'write_off')`);
        writtenOffMicro += writeOff;
      }
    }
    return { written: newRecords.length, postedMicro, writtenOffMicro };
  });
}

export class UsageWriter {
  private buffer: UsageRecord[] = [];
  private timer: ReturnType<typeof setTimeout> | null = null;
  private writing: Promise<void> | null = null;
  private failing = false;
  private retryMs = RETRY_MS_FIRST;
  private stopped = false;

  constructor(
    private readonly db: Db,
    private readonly log: Logger,
  ) {}

  /** False while writes fail or the buffer is full: admit nothing new then. */
  get accepting(): boolean {
    return !this.failing && this.buffer.length < USAGE_BUFFER_MAX && !this.stopped;
  }

  get buffered(): number {
    return this.buffer.length;
  }

  append(record: UsageRecord): void {
    this.buffer.push(record);
    if (this.buffer.length >= USAGE_BATCH_MAX) void this.flush();
    else this.timer ??= setTimeout(() => void this.flush(), USAGE_FLUSH_MS_MAX);
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

  private async writeAll(): Promise<void> {
    while (this.buffer.length > 0) {
      const batch = this.buffer.slice(0, USAGE_BATCH_MAX);
      try {
        await postUsageBatch(this.db, batch);
        this.buffer.splice(0, batch.length);
        this.failing = false;
        this.retryMs = RETRY_MS_FIRST;
      } catch (error) {
        this.failing = true;
        this.log("error", "usage_write_failed", { records: this.buffer.length, error: (error as Error).message, retryMs: this.retryMs });
        if (this.stopped) return;
        await Bun.sleep(this.retryMs);
        this.retryMs = Math.min(this.retryMs * 2, RETRY_MS_MAX);
      }
    }
  }

  /** flush(), but gives up waiting after `waitMs` (the records stay buffered and are retried). */
  async flushWithin(waitMs: number): Promise<boolean> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timedOut = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), waitMs)));
    try {
      return await Promise.race([this.flush().then(() => true as const), timedOut]);
    } finally {
      clearTimeout(timer);
    }
  }

  async stop(): Promise<void> {
    await this.flush();
    this.stopped = true;
  }
}
