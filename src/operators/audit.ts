/**
 * The operators' audit trail (`operator_audit`, append-only by trigger): one row per change, with
 * who (an operator or `admin_token`), their role and address, what, on which target, the state
 * before and after, and the reason and signed amount where money moves.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { and, desc, eq, gte, lt, sql } from "drizzle-orm";
import { isCatalogChange } from "../catalog/catalog.ts";
import type { Db, Drizzle, Tx } from "../db/client.ts";
import { operatorAudit } from "../db/schema.ts";
import type { Principal } from "./store.ts";

/** The audit search lists at most this many rows per reply. */
export const AUDIT_LISTED_MAX = 500;

export interface AuditEntry {
  action: string;
  target: string;
  before?: unknown;
  after?: unknown;
  reason?: string | null;
  amountMicro?: bigint | null;
}

export type AuditRow = typeof operatorAudit.$inferSelect;

/** Who a row names: an operator or token as the guard found them, or SYSTEM. */
export type Recorder = Pick<Principal, "actor" | "tokenId" | "address"> & { role: string; via: string };

/** The recorder of a change no operator made (one made outside an admin call). */
export const SYSTEM: Recorder = { actor: "system", role: "system", via: "system", tokenId: null, address: null };

/** Writes one row, in `into`: the database, or the transaction of the change it records. */
export async function writeAudit(into: Drizzle | Tx, who: Recorder, entry: AuditEntry): Promise<void> {
  await into.insert(operatorAudit).values({
    actor: who.actor,
    role: who.role,
    via: who.via,
    tokenId: who.tokenId,
    address: who.address,
    action: entry.action,
    target: entry.target,
    before: entry.before ?? null,
    after: entry.after ?? null,
    reason: entry.reason ?? null,
    amountMicro: entry.amountMicro ?? null,
  });
}

/**
 * The audit row of the change in progress, for a change made in one transaction: the change's
 * code calls `auditWithin(tx, after)` inside it, so the row commits with the change or not at
 * all. `written` tells the guard, which writes the row itself for changes that do not.
 */
export interface PendingAudit {
  who: Principal;
  write: (tx: Tx, after: unknown) => Promise<void>;
  written: boolean;
}

const pending = new AsyncLocalStorage<PendingAudit>();

/** Runs a change with its audit row pending (see PendingAudit). */
export function withPendingAudit<T>(audit: PendingAudit, change: () => Promise<T>): Promise<T> {
  return pending.run(audit, change);
}

/** Writes the pending audit row inside the change's transaction, with the change's reply as `after`; no-op outside an audited call. */
export async function auditWithin(tx: Tx, after: unknown): Promise<void> {
  const audit = pending.getStore();
  if (!audit || audit.written) return;
  await audit.write(tx, after);
  audit.written = true;
}

/**
 * Writes several rows of one change inside its transaction (an import: a row per model), each
 * naming the caller of the admin call in progress, or SYSTEM outside one; the guard then writes none.
 */
export async function auditEachWithin(tx: Tx, entries: readonly AuditEntry[]): Promise<void> {
  const audit = pending.getStore();
  for (const entry of entries) await writeAudit(tx, audit?.who ?? SYSTEM, entry);
  if (audit) audit.written = true;
}

/** The catalog's changes, newest first (catalog.ts isCatalogChange says which rows they are). */
export async function catalogHistory(db: Db, q: { model?: string; limit: number }): Promise<AuditRow[]> {
  return db.orm
    .select()
    .from(operatorAudit)
    .where(and(isCatalogChange, q.model === undefined ? undefined : eq(operatorAudit.target, q.model)))
    .orderBy(desc(operatorAudit.createdAt), desc(operatorAudit.id))
    .limit(q.limit);
}

export interface AuditQuery {
  actor?: string;
  action?: string;
  target?: string;
  from?: Date;
  to?: Date;
  limit: number;
}

/** Rows newest first; `action` matches a whole action (`wallet.adjust`) or a family (`catalog`). */
export async function searchAudit(db: Db, q: AuditQuery): Promise<AuditRow[]> {
  const action =
    q.action === undefined ? undefined : sql`(${operatorAudit.action} = ${q.action} OR ${operatorAudit.action} LIKE ${`${q.action}.%`})`;
  return db.orm
    .select()
    .from(operatorAudit)
    .where(
      and(
        q.actor === undefined ? undefined : eq(operatorAudit.actor, q.actor),
        action,
        q.target === undefined ? undefined : eq(operatorAudit.target, q.target),
        q.from === undefined ? undefined : gte(operatorAudit.createdAt, q.from),
        q.to === undefined ? undefined : lt(operatorAudit.createdAt, q.to),
      ),
    )
    .orderBy(desc(operatorAudit.id))
    .limit(q.limit);
}

export function auditObject(r: AuditRow) {
  return {
    id: r.id.toString(),
    object: "audit_entry",
    actor: r.actor,
    role: r.role,
    via: r.via,
    token_id: r.tokenId,
    address: r.address,
    action: r.action,
    target: r.target,
    before: r.before,
    after: r.after,
    reason: r.reason,
    amount_micro_toman: r.amountMicro?.toString() ?? null,
    at: r.createdAt.toISOString(),
  };
}
