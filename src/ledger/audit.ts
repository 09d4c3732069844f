/**
 * The ledger audit: every invariant of the money, checked from the database alone.
 *
 * In full, with the reasoning: docs/internals.md#the-ledger-audit.
 */
import { sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { usageRecords } from "../db/schema.ts";
import { priceField, UNIT_NAMES, unitsField } from "../units.ts";
import { deadLetterTotals } from "./deadletter.ts";
import { HOLD_EXPIRY_GRACE_MS } from "./holds.ts";

/** A pending hold this long past its deadline and its expiry grace is a violation (the sweeper runs every 10 s). */
export const AUDIT_DEADLINE_GRACE_S = 30;

export const AUDIT_VIOLATIONS_SHOWN_MAX = 20;

/** A usage record's worth from its columns: Σ units × price over every unit's pair. */
const pricedSql = sql.raw(
  UNIT_NAMES.map((unit) => `${usageRecords[unitsField(unit)].name}::numeric * ${usageRecords[priceField(unit)].name}`).join(" + "),
);

export interface AuditCheck {
  name: string;
  ok: boolean;
  violations: Record<string, unknown>[];
}

/** Rows of the audit's upstream anomalies (backend, model, anomaly), the most frequent first. */
export const AUDIT_ANOMALY_ROWS_MAX = 50;

/** Usage reports of one backend and model outside the request's bounds: `<part>_over` clamped, `<part>_under` raised. */
export interface UpstreamAnomaly {
  backend: string | null;
  model: string;
  anomaly: string;
  requests: number;
}

/** Keys listed in the audit's write-offs, the largest first. */
export const AUDIT_WRITE_OFF_KEYS_MAX = 20;

export interface KeyWriteOff {
  key_id: string;
  requests: number;
  write_off_micro: string;
}

export interface AuditReport {
  ok: boolean;
  checks: AuditCheck[];
  write_offs_by_key: KeyWriteOff[];
  /** Upstream anomalies by backend: not a violation (never charged beyond the bounds), a backend to look at. */
  upstream_anomalies: UpstreamAnomaly[];
  /** Usage records dead-lettered and not replayed yet: not a violation, work for an operator. */
  /** `malformed`: of those awaiting, messages on the usage subject that were no records (nothing to replay). */
  dead_letters: { awaiting_replay: number; written_off_micro: string; malformed: number };
}

const CHECKS: { name: string; query: ReturnType<typeof sql> }[] = [
  {
    name: "every transfer is positive and between two accounts",
    query: sql`SELECT reference, debit_account, credit_account, amount_micro::text AS amount
               FROM ledger_transfers WHERE amount_micro <= 0 OR debit_account = credit_account`,
  },
  {
    name: "every wallet's balance equals its transfers",
    query: sql`
      WITH flows AS (
        SELECT substr(credit_account, 8) AS account_id, amount_micro AS amount FROM ledger_transfers WHERE credit_account LIKE 'wallet:%'
        UNION ALL
        SELECT substr(debit_account, 8), -amount_micro FROM ledger_transfers WHERE debit_account LIKE 'wallet:%'),
      sums AS (SELECT account_id, sum(amount) AS total FROM flows GROUP BY account_id)
      SELECT w.account_id, w.balance_micro::text AS balance, coalesce(s.total, 0)::text AS transfers
      FROM wallets w LEFT JOIN sums s ON s.account_id = w.account_id
      WHERE w.balance_micro <> coalesce(s.total, 0)`,
  },
  {
    name: "every wallet's held equals its pending holds",
    query: sql`
      WITH pending AS (SELECT account_id, sum(amount_micro - posted_micro) AS total FROM holds WHERE status = 'pending' GROUP BY account_id)
      SELECT w.account_id, w.held_micro::text AS held, coalesce(p.total, 0)::text AS pending
      FROM wallets w LEFT JOIN pending p ON p.account_id = w.account_id
      WHERE w.held_micro <> coalesce(p.total, 0)`,
  },
  {
    name: "no wallet's available balance is negative",
    query: sql`SELECT account_id, balance_micro::text AS balance, held_micro::text AS held FROM wallets WHERE balance_micro - held_micro < 0 OR held_micro < 0`,
  },
  {
    name: "no hold posted more than it held",
    query: sql`SELECT id, amount_micro::text AS amount, posted_micro::text AS posted FROM holds WHERE posted_micro > amount_micro OR posted_micro < 0`,
  },
  {
    name: "every hold's posts equal its usage records' charges",
    query: sql`
      WITH billed AS (SELECT hold_id, sum(billed_micro) AS total FROM usage_records GROUP BY hold_id)
      SELECT h.id, h.posted_micro::text AS posted, coalesce(b.total, 0)::text AS billed
      FROM holds h LEFT JOIN billed b ON b.hold_id = h.id
      WHERE h.posted_micro <> coalesce(b.total, 0)`,
  },
  {
    name: "every usage record is metered at its units × its prices",
    query: sql`
      SELECT request_id, metered_micro::text AS metered, p.priced::text AS priced FROM usage_records,
        LATERAL (SELECT ${pricedSql} AS priced) p
      WHERE metered_micro <> p.priced`,
  },
  {
    name: "usage charges equal the posted usage transfers",
    query: sql`
      SELECT u.total::text AS usage_billed, t.total::text AS usage_transfers FROM
        (SELECT coalesce(sum(billed_micro), 0) AS total FROM usage_records) u,
        (SELECT coalesce(sum(amount_micro), 0) AS total FROM ledger_transfers WHERE kind = 'usage') t
      WHERE u.total <> t.total`,
  },
  {
    name: "unbilled usage equals the write-offs",
    query: sql`
      SELECT u.total::text AS unbilled, t.total::text AS write_offs FROM
        (SELECT coalesce(sum(metered_micro - billed_micro), 0) AS total FROM usage_records) u,
        (SELECT coalesce(sum(amount_micro), 0) AS total FROM ledger_transfers WHERE kind = 'write_off') t
      WHERE u.total <> t.total`,
  },
  {
    name: "every verified top-up is credited once, for its amount, and nothing else is",
    query: sql`
      WITH credits AS (SELECT reference, amount_micro, credit_account FROM ledger_transfers WHERE reference LIKE 'topup:pay:%')
      SELECT coalesce(t.id, substr(c.reference, 11)) AS topup, t.state, t.amount_micro::text AS amount, c.amount_micro::text AS credited, c.credit_account
      FROM topups t FULL OUTER JOIN credits c ON c.reference = 'topup:pay:' || t.id
      WHERE t.id IS NULL
         OR (t.state = 'verified') <> (c.reference IS NOT NULL)
         OR (c.reference IS NOT NULL AND (c.amount_micro <> t.amount_micro OR c.credit_account <> 'wallet:' || t.account_id))`,
  },
  {
    name: "dead letters' write-offs equal their transfers",
    query: sql`
      SELECT d.total::text AS dead_written_off, t.total::text AS dead_letter_transfers FROM
        (SELECT coalesce(sum(written_off_micro), 0) AS total FROM usage_dead_letters WHERE status = 'dead') d,
        (SELECT coalesce(sum(CASE kind WHEN 'dead_letter' THEN amount_micro ELSE -amount_micro END), 0) AS total
         FROM ledger_transfers WHERE kind IN ('dead_letter', 'dead_letter_reversal')) t
      WHERE d.total <> t.total`,
  },
  {
    name: "no dead letter awaiting replay is billed too (replay it: that reverses its write-off)",
    query: sql`SELECT d.id::text AS id, d.request_id FROM usage_dead_letters d JOIN usage_records u ON u.request_id = d.request_id WHERE d.status = 'dead'`,
  },
];

/** `holdExpiryGraceMs`: the nodes' HOLD_EXPIRY_GRACE_MS (a hold stays pending that long past its deadline). */
export async function auditLedger(db: Db, options: { holdExpiryGraceMs?: number } = {}): Promise<AuditReport> {
  const lateS = (options.holdExpiryGraceMs ?? HOLD_EXPIRY_GRACE_MS) / 1000 + AUDIT_DEADLINE_GRACE_S;
  const late = {
    name: "no hold is pending past its deadline",
    query: sql`SELECT id, account_id, deadline FROM holds WHERE status = 'pending' AND deadline < now() - make_interval(secs => ${lateS})`,
  };
  const checks: AuditCheck[] = [];
  for (const check of [...CHECKS, late]) {
    const rows = await db.rows<Record<string, unknown>>(check.query);
    checks.push({ name: check.name, ok: rows.length === 0, violations: rows.slice(0, AUDIT_VIOLATIONS_SHOWN_MAX) });
  }
  const writeOffs = await db.rows<{ key_id: string; requests: unknown; write_off_micro: unknown }>(sql`
    SELECT key_id, count(*) AS requests, sum(metered_micro - billed_micro) AS write_off_micro FROM usage_records
    WHERE metered_micro > billed_micro GROUP BY key_id ORDER BY sum(metered_micro - billed_micro) DESC LIMIT ${AUDIT_WRITE_OFF_KEYS_MAX}`);
  const byKey = writeOffs.map((r) => ({ key_id: r.key_id, requests: Number(r.requests), write_off_micro: String(r.write_off_micro) }));
  const anomalies = await db.rows<{ backend: string | null; model: string; anomaly: string; requests: unknown }>(sql`
    SELECT backend, model, a.anomaly, count(*) AS requests
    FROM usage_records, unnest(string_to_array(anomalies, ',')) AS a(anomaly)
    WHERE anomalies IS NOT NULL GROUP BY backend, model, a.anomaly ORDER BY count(*) DESC, backend, model, a.anomaly
    LIMIT ${AUDIT_ANOMALY_ROWS_MAX}`);
  const dead = await deadLetterTotals(db);
  return {
    ok: checks.every((c) => c.ok),
    checks,
    write_offs_by_key: byKey,
    upstream_anomalies: anomalies.map((r) => ({ backend: r.backend, model: r.model, anomaly: r.anomaly, requests: Number(r.requests) })),
    dead_letters: { awaiting_replay: dead.dead, written_off_micro: dead.writtenOffMicro.toString(), malformed: dead.malformed },
  };
}
