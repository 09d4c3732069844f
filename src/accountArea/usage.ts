/**
 * The account's usage as the console shows it: per request (newest first, filtered by key, model
 * and date, paged by id), totals over the same filter, spend per UTC day, and a CSV export.
 * Every query is scoped to one account and bounded (USAGE_PAGE_MAX rows a page,
 * USAGE_CSV_ROWS_MAX rows an export, USAGE_DAYS_MAX days a chart).
 */
import { and, count, desc, eq, gte, lt, sql, sum, type SQL } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { apiKeys, batches, usageRecords } from "../db/schema.ts";
import { microToToman } from "../catalog/prices.ts";
import { UNIT_NAMES, UNITS, unitsField, type Counts, type Unit, type UnitRow, type UnitsField } from "../units.ts";

export const USAGE_PAGE_MAX = 200;
export const USAGE_CSV_ROWS_MAX = 100_000;
export const USAGE_DAYS_MAX = 366;

/** Each unit's total over the records a query selects, by unit: fields of a select. */
export const unitSums = Object.fromEntries(UNIT_NAMES.map((unit) => [unit, sum(usageRecords[unitsField(unit)])])) as Record<
  Unit,
  SQL<string | null>
>;

/**
 * A record's units under the names replies show them: each unit's name, a unit the record names
 * (a tool's calls) under that name, and only when named.
 * @example recordUnits(row) // { input: "21", output: "7", cache_read: "3000", …, web_search_call: "2" }
 */
export function recordUnits(row: Record<UnitsField, bigint> & { hostedCallUnit: string | null }): Record<string, string> {
  const units: Record<string, string> = {};
  for (const unit of UNIT_NAMES) {
    const nameField = (UNITS[unit] as UnitRow).nameField;
    const name = nameField === undefined ? unit : row[nameField];
    if (name) units[name] = row[unitsField(unit)].toString();
  }
  return units;
}

export interface UsageFilter {
  keyId?: string;
  model?: string;
  /** Inclusive lower bound. */
  from?: Date;
  /** Exclusive upper bound. */
  to?: Date;
}

function where(accountId: string, filter: UsageFilter): SQL | undefined {
  return and(
    eq(usageRecords.accountId, accountId),
    filter.keyId ? eq(usageRecords.keyId, filter.keyId) : undefined,
    filter.model ? eq(usageRecords.model, filter.model) : undefined,
    filter.from ? gte(usageRecords.createdAt, filter.from) : undefined,
    filter.to ? lt(usageRecords.createdAt, filter.to) : undefined,
  );
}

/**
 * A batch line's request id, `req_<batch id's random part>_<line>` (src/batches/store.ts
 * lineRequestId): its two parts, read in the query (`substring(… from pattern)` is the first
 * group's match). A live request's id (`req_` and 20 base62 characters) never matches.
 */
const BATCH_LINE_ID = "^req_([0-9A-Za-z]{20})_([0-9]{1,9})$";
const batchIdOf = sql`'batch_' || substring(${usageRecords.requestId} from ${BATCH_LINE_ID})`;

export interface UsageRow {
  id: bigint;
  requestId: string;
  createdAt: Date;
  keyId: string;
  keyName: string | null;
  model: string;
  operation: string;
  inputUnits: bigint;
  outputUnits: bigint;
  billedMicro: bigint;
  status: number;
  durationMs: number;
  /** The batch whose line this request was (the account's own batch), or null for a live request. */
  batchId: string | null;
  /** Its line in the batch's input file (1-based), or null. */
  batchLine: number | null;
}

export async function usagePage(
  db: Db,
  accountId: string,
  filter: UsageFilter,
  page: { limit: number; beforeId?: bigint },
): Promise<UsageRow[]> {
  return (
    db.orm
      .select({
        id: usageRecords.id,
        requestId: usageRecords.requestId,
        createdAt: usageRecords.createdAt,
        keyId: usageRecords.keyId,
        keyName: apiKeys.name,
        model: usageRecords.model,
        operation: usageRecords.operation,
        inputUnits: usageRecords.inputUnits,
        outputUnits: usageRecords.outputUnits,
        billedMicro: usageRecords.billedMicro,
        status: usageRecords.status,
        durationMs: usageRecords.durationMs,
        batchId: batches.id,
        batchLine: sql<
          number | null
        >`CASE WHEN ${batches.id} IS NULL THEN NULL ELSE substring(${usageRecords.requestId} from '_([0-9]{1,9})$')::int END`,
      })
      .from(usageRecords)
      .leftJoin(apiKeys, eq(apiKeys.id, usageRecords.keyId))
      // A batch line is marked only when its batch is the account's own: derived, no column.
      .leftJoin(batches, and(eq(batches.id, batchIdOf), eq(batches.accountId, usageRecords.accountId)))
      .where(and(where(accountId, filter), page.beforeId !== undefined ? lt(usageRecords.id, page.beforeId) : undefined))
      .orderBy(desc(usageRecords.id))
      .limit(Math.min(page.limit, USAGE_CSV_ROWS_MAX))
  );
}

/** One request's usage record, by its id, within the account; null when none is written (yet). */
export async function usageRecordOf(db: Db, accountId: string, requestId: string) {
  const [row] = await db.orm
    .select()
    .from(usageRecords)
    .where(and(eq(usageRecords.accountId, accountId), eq(usageRecords.requestId, requestId)))
    .limit(1);
  return row ?? null;
}

export interface UsageTotals {
  requests: number;
  inputUnits: bigint;
  outputUnits: bigint;
  billedMicro: bigint;
}

export async function usageTotals(db: Db, accountId: string, filter: UsageFilter): Promise<UsageTotals> {
  const [row] = await db.orm
    .select({
      requests: count(),
      input: sum(usageRecords.inputUnits),
      output: sum(usageRecords.outputUnits),
      billed: sum(usageRecords.billedMicro),
    })
    .from(usageRecords)
    .where(where(accountId, filter));
  return {
    requests: row?.requests ?? 0,
    inputUnits: BigInt(row?.input ?? 0),
    outputUnits: BigInt(row?.output ?? 0),
    billedMicro: BigInt(row?.billed ?? 0),
  };
}

/** Spend per UTC day (`YYYY-MM-DD`), days without spend omitted. */
export async function dailySpend(
  db: Db,
  accountId: string,
  filter: UsageFilter,
): Promise<{ day: string; billedMicro: bigint; requests: number }[]> {
  const day = sql<string>`to_char(${usageRecords.createdAt} AT TIME ZONE 'UTC', 'YYYY-MM-DD')`;
  const rows = await db.orm
    .select({ day, billed: sum(usageRecords.billedMicro), requests: count() })
    .from(usageRecords)
    .where(where(accountId, filter))
    .groupBy(day)
    .orderBy(day)
    .limit(USAGE_DAYS_MAX);
  return rows.map((r) => ({ day: r.day, billedMicro: BigInt(r.billed ?? 0), requests: r.requests }));
}

/** One key's requests, spend and units over all time (GET /v1/key), each unit's total a number. */
export async function keyUsage(db: Db, keyId: string): Promise<{ requests: number; billedMicro: bigint; units: Counts }> {
  const [usage] = await db.orm
    .select({ requests: count(), billed: sum(usageRecords.billedMicro), ...unitSums })
    .from(usageRecords)
    .where(eq(usageRecords.keyId, keyId));
  const units: Counts = {};
  for (const unit of UNIT_NAMES) units[unit] = Number(usage?.[unit] ?? 0);
  return { requests: usage?.requests ?? 0, billedMicro: BigInt(usage?.billed ?? 0), units };
}

/** Spend per key over all time (the keys page's column). */
export async function spendByKey(db: Db, accountId: string): Promise<Map<string, bigint>> {
  const rows = await db.orm
    .select({ keyId: usageRecords.keyId, billed: sum(usageRecords.billedMicro) })
    .from(usageRecords)
    .where(eq(usageRecords.accountId, accountId))
    .groupBy(usageRecords.keyId);
  return new Map(rows.map((r) => [r.keyId, BigInt(r.billed ?? 0)]));
}

/** The start of the UTC day and UTC month containing `now`: the monthly spend cap runs on the UTC month. */
export function utcPeriods(now: Date): { dayStart: Date; monthStart: Date } {
  return {
    dayStart: new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate())),
    monthStart: new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1)),
  };
}

/**
 * One CSV cell. A cell a spreadsheet would read as a formula (starting with `=`, `+`, `-`, `@`,
 * tab or carriage return) gets a leading `'`; cells with a comma, quote or line break are quoted.
 */
export function csvCell(value: string): string {
  const safe = /^[=+\-@\t\r]/.test(value) ? `'${value}` : value;
  return /[",\r\n]/.test(safe) ? `"${safe.replaceAll('"', '""')}"` : safe;
}

export const USAGE_CSV_HEADER = [
  "time_utc",
  "request_id",
  "key_id",
  "key_name",
  "model",
  "operation",
  "input_units",
  "output_units",
  "cost_toman",
  "cost_micro_toman",
  "status",
  "duration_ms",
  "batch_id",
  "batch_line",
];

export function usageCsvLine(row: UsageRow): string {
  return [
    row.createdAt.toISOString(),
    row.requestId,
    row.keyId,
    row.keyName ?? "",
    row.model,
    row.operation,
    row.inputUnits.toString(),
    row.outputUnits.toString(),
    microToToman(row.billedMicro),
    row.billedMicro.toString(),
    String(row.status),
    String(row.durationMs),
    row.batchId ?? "",
    row.batchLine === null ? "" : String(row.batchLine),
  ]
    .map(csvCell)
    .join(",");
}
