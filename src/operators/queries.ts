/**
 * What the operators' console reads beyond one account's view: customers found by phone, name,
 * account or key; an account's wallet movements, holds and alerts; revenue over a window by model,
 * vendor and region; upstream anomalies by backend. Every amount is the ledger's, in micro-toman
 * (bigint), summed by the database; nothing here rounds. Every query is bounded by a named limit.
 *
 * Revenue is the usage records' billed amounts. A record and its usage transfer are written in one
 * transaction (src/ledger/usage.ts), so they carry the same `created_at` and any window's Σ billed
 * equals its Σ usage transfers: the reply carries both, and `reconciled` says they agree.
 */
import { sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { REHEARSAL_ACCOUNT_ID } from "../ledger/wallets.ts";
import { normalisePhone } from "../accountArea/phone.ts";
import { hashKey, looksLikeKey } from "../keys/secret.ts";

/** Customers a search lists at most. */
export const CUSTOMER_HITS_MAX = 50;
/** Wallet movements (top-ups, adjustments) an account's wallet view lists, newest first. */
export const WALLET_MOVES_MAX = 200;
/** Pending holds (leases) an account's wallet view lists. */
export const WALLET_HOLDS_MAX = 100;
/** Balance alerts an account's wallet view lists, newest first. */
export const WALLET_ALERTS_MAX = 50;
/** Groups (model × backend) a revenue window reads at most: bounded by the catalog and the pools, named anyway. */
export const REVENUE_GROUPS_MAX = 10_000;
/** Rows of anomalies by backend a window lists, the most frequent first. */
export const ANOMALY_ROWS_MAX = 200;
/** A search text longer than this is refused (no phone, name or key is longer). */
export const SEARCH_CHARS_MAX = 200;

export type MatchedBy = "phone" | "name" | "account" | "key";

export interface CustomerHit {
  accountId: string;
  name: string;
  phone: string | null;
  balanceMicro: bigint;
  heldMicro: bigint;
  createdAt: Date;
  matched: MatchedBy;
}

const likeEscaped = (text: string) => text.replace(/[\\%_]/g, (c) => `\\${c}`);

/**
 * Customers whose phone (any way it is written), account id (or its start), name (a part of it),
 * key id (or its start), key display, or whole key (found by its stored hash) matches `text`.
 * @example await searchCustomers(db, "0912 123 4567", { prefix, pepper }) // [{ accountId: "acc_…", matched: "phone", … }]
 */
export async function searchCustomers(db: Db, text: string, keys: { prefix: string; pepper: string }): Promise<CustomerHit[]> {
  const keyHash = looksLikeKey(text, keys.prefix) ? hashKey(text, keys.pepper) : null;
  const q = text.trim();
  if (q === "") return [];
  const phone = normalisePhone(q);
  const start = `${likeEscaped(q)}%`;
  const part = `%${likeEscaped(q)}%`;
  const rows = await db.rows<{
    id: string;
    name: string;
    phone: string | null;
    balance_micro: string | bigint;
    held_micro: string | bigint;
    created_at: string | Date;
    matched: MatchedBy;
  }>(sql`
    WITH hits AS (
      SELECT id AS account_id, 'phone' AS matched, 1 AS rank FROM accounts WHERE ${phone === null ? sql`false` : sql`phone = ${phone}`}
      UNION ALL SELECT id, 'account', 2 FROM accounts WHERE id LIKE ${start}
      UNION ALL SELECT account_id, 'key', 3 FROM api_keys
        WHERE ${keyHash === null ? sql`false` : sql`hash = ${keyHash}`} OR id LIKE ${start} OR display = ${q}
      UNION ALL SELECT id, 'name', 4 FROM accounts WHERE name ILIKE ${part}),
    best AS (SELECT DISTINCT ON (account_id) account_id, matched, rank FROM hits ORDER BY account_id, rank)
    SELECT a.id, a.name, a.phone, w.balance_micro, w.held_micro, a.created_at, b.matched
    FROM best b JOIN accounts a ON a.id = b.account_id JOIN wallets w ON w.account_id = a.id
    ORDER BY b.rank, a.created_at DESC, a.id LIMIT ${CUSTOMER_HITS_MAX}`);
  return rows.map((r) => ({
    accountId: r.id,
    name: r.name,
    phone: r.phone,
    balanceMicro: BigInt(r.balance_micro),
    heldMicro: BigInt(r.held_micro),
    createdAt: new Date(r.created_at),
    matched: r.matched,
  }));
}

export interface WalletMove {
  reference: string;
  kind: "topup" | "adjustment";
  /** Signed: into the wallet is positive. */
  amountMicro: bigint;
  memo: string | null;
  createdAt: Date;
}

export interface HeldLease {
  id: string;
  keyId: string;
  amountMicro: bigint;
  postedMicro: bigint;
  deadline: Date;
  createdAt: Date;
}

export interface AlertRow {
  id: string;
  balanceMicro: bigint;
  thresholdMicro: bigint;
  status: string;
  reason: string | null;
  createdAt: Date;
}

/** An account's top-ups and adjustments (with their reasons), its pending holds (leases) and its alerts. */
export async function walletDetail(db: Db, accountId: string) {
  const wallet = `wallet:${accountId}`;
  const moves = await db.rows<{ reference: string; kind: string; amount: string; memo: string | null; created_at: string | Date }>(sql`
    SELECT reference, kind, (CASE WHEN credit_account = ${wallet} THEN amount_micro ELSE -amount_micro END)::text AS amount, memo, created_at
    FROM ledger_transfers
    WHERE (credit_account = ${wallet} OR debit_account = ${wallet}) AND kind IN ('topup', 'adjustment')
    ORDER BY id DESC LIMIT ${WALLET_MOVES_MAX}`);
  const holds = await db.rows<{
    id: string;
    key_id: string;
    amount_micro: string;
    posted_micro: string;
    deadline: string | Date;
    created_at: string | Date;
  }>(sql`
    SELECT id, key_id, amount_micro::text, posted_micro::text, deadline, created_at FROM holds
    WHERE account_id = ${accountId} AND status = 'pending' ORDER BY created_at DESC LIMIT ${WALLET_HOLDS_MAX}`);
  const alerts = await db.rows<{
    id: string;
    balance_micro: string;
    threshold_micro: string;
    status: string;
    reason: string | null;
    created_at: string | Date;
  }>(sql`
    SELECT id::text, balance_micro::text, threshold_micro::text, status, reason, created_at FROM balance_alerts
    WHERE account_id = ${accountId} ORDER BY id DESC LIMIT ${WALLET_ALERTS_MAX}`);
  return {
    moves: moves.map(
      (m): WalletMove => ({
        reference: m.reference,
        kind: m.kind === "topup" ? "topup" : "adjustment",
        amountMicro: BigInt(m.amount),
        memo: m.memo,
        createdAt: new Date(m.created_at),
      }),
    ),
    holds: holds.map(
      (h): HeldLease => ({
        id: h.id,
        keyId: h.key_id,
        amountMicro: BigInt(h.amount_micro),
        postedMicro: BigInt(h.posted_micro),
        deadline: new Date(h.deadline),
        createdAt: new Date(h.created_at),
      }),
    ),
    alerts: alerts.map(
      (a): AlertRow => ({
        id: a.id,
        balanceMicro: BigInt(a.balance_micro),
        thresholdMicro: BigInt(a.threshold_micro),
        status: a.status,
        reason: a.reason,
        createdAt: new Date(a.created_at),
      }),
    ),
  };
}

export interface Window {
  /** Inclusive. */
  from: Date;
  /** Exclusive; absent: up to the newest record. */
  to?: Date;
}

/** `column` within the window, as SQL. */
function within(column: ReturnType<typeof sql.raw>, w: Window) {
  const to = w.to === undefined ? sql`` : sql` AND ${column} < ${w.to.toISOString()}::timestamptz`;
  return sql`${column} >= ${w.from.toISOString()}::timestamptz${to}`;
}

export interface RevenueGroup {
  key: string;
  requests: number;
  errors: number;
  billedMicro: bigint;
}

export interface Revenue {
  requests: number;
  /** Requests recorded with an error status (400 and above). */
  errors: number;
  billedMicro: bigint;
  /** Metered but not charged (beyond the hold, past a cut): the write-offs of the window's records. */
  writtenOffMicro: bigint;
  /** Σ of the window's usage transfers to `revenue`, read from the ledger's transfers. */
  ledgerMicro: bigint;
  byModel: RevenueGroup[];
  byVendor: RevenueGroup[];
  byRegion: RevenueGroup[];
}

function grouped(rows: { key: string; requests: number; errors: number; billedMicro: bigint }[]): RevenueGroup[] {
  const groups = new Map<string, RevenueGroup>();
  for (const r of rows) {
    const g = groups.get(r.key) ?? { key: r.key, requests: 0, errors: 0, billedMicro: 0n };
    g.requests += r.requests;
    g.errors += r.errors;
    g.billedMicro += r.billedMicro;
    groups.set(r.key, g);
  }
  return [...groups.values()].sort((a, b) =>
    b.billedMicro > a.billedMicro ? 1 : b.billedMicro < a.billedMicro ? -1 : a.key < b.key ? -1 : 1,
  );
}

/**
 * The window's revenue, by model, by vendor (the catalog's, `unknown` for a model no longer in
 * it) and by region (`regionOf`: a backend's region as the pools declare it, `unknown` for one no
 * longer configured or none recorded).
 */
export async function revenueOf(db: Db, w: Window, regionOf: (model: string, backend: string | null) => string): Promise<Revenue> {
  const rows = await db.rows<{
    model: string;
    backend: string | null;
    vendor: string | null;
    requests: unknown;
    errors: unknown;
    billed: string;
    unbilled: string;
  }>(sql`
    SELECT u.model, u.backend, m.vendor, count(*) AS requests, count(*) FILTER (WHERE u.status >= 400) AS errors,
      sum(u.billed_micro)::text AS billed, sum(u.metered_micro - u.billed_micro)::text AS unbilled
    FROM usage_records u LEFT JOIN models m ON m.id = u.model
    WHERE ${within(sql.raw("u.created_at"), w)} AND u.account_id <> ${REHEARSAL_ACCOUNT_ID}
    GROUP BY u.model, u.backend, m.vendor ORDER BY u.model, u.backend LIMIT ${REVENUE_GROUPS_MAX}`);
  const [ledger] = await db.rows<{ total: string }>(sql`
    SELECT coalesce(sum(amount_micro), 0)::text AS total FROM ledger_transfers
    WHERE kind = 'usage' AND ${within(sql.raw("created_at"), w)}`);
  const parts = rows.map((r) => ({
    model: r.model,
    vendor: r.vendor ?? "unknown",
    region: regionOf(r.model, r.backend),
    requests: Number(r.requests),
    errors: Number(r.errors),
    billedMicro: BigInt(r.billed),
    unbilledMicro: BigInt(r.unbilled),
  }));
  const total = grouped(parts.map((p) => ({ ...p, key: "all" })))[0];
  return {
    requests: total?.requests ?? 0,
    errors: total?.errors ?? 0,
    billedMicro: total?.billedMicro ?? 0n,
    writtenOffMicro: parts.reduce((sum, p) => sum + p.unbilledMicro, 0n),
    ledgerMicro: BigInt(ledger?.total ?? "0"),
    byModel: grouped(parts.map((p) => ({ ...p, key: p.model }))),
    byVendor: grouped(parts.map((p) => ({ ...p, key: p.vendor }))),
    byRegion: grouped(parts.map((p) => ({ ...p, key: p.region }))),
  };
}

export interface BackendAnomalies {
  backend: string | null;
  model: string;
  anomaly: string;
  requests: number;
  lastAt: Date;
}

/** Usage reports outside their request's bounds in the window, by backend, model and anomaly, the most frequent first. */
export async function anomaliesOf(db: Db, w: Window): Promise<BackendAnomalies[]> {
  const rows = await db.rows<{ backend: string | null; model: string; anomaly: string; requests: unknown; last_at: string | Date }>(sql`
    SELECT backend, model, a.anomaly, count(*) AS requests, max(created_at) AS last_at
    FROM usage_records, unnest(string_to_array(anomalies, ',')) AS a(anomaly)
    WHERE anomalies IS NOT NULL AND ${within(sql.raw("created_at"), w)} AND account_id <> ${REHEARSAL_ACCOUNT_ID}
    GROUP BY backend, model, a.anomaly ORDER BY count(*) DESC, backend, model, a.anomaly LIMIT ${ANOMALY_ROWS_MAX}`);
  return rows.map((r) => ({
    backend: r.backend,
    model: r.model,
    anomaly: r.anomaly,
    requests: Number(r.requests),
    lastAt: new Date(r.last_at),
  }));
}
