/**
 * Low-balance alerts. A customer sets a threshold (the account area or the admin API); the usage
 * post whose settlement takes the settled balance from at or above it to below it writes one
 * `balance_alerts` row in its own statement (ledger/usage.ts), so a crossing is decided once in
 * the database whichever node posts it, and never on a request's path.
 *
 * Sending is background work on every node (`sendPending`, on a timer): a run claims at most
 * `ALERT_SEND_BATCH_MAX` pending rows by a conditional update (`pending → sending`, SKIP LOCKED),
 * so two nodes never claim the same row, and ends each `sent` or `skipped`. An alert is sent at
 * most once: a node that dies mid-send leaves its row `sending`, never resent. Each SMS counts
 * against the account's `LOW_BALANCE_SMS_DAILY_MAX` and then the gateway's SMS_DAILY_BUDGET_MAX.
 * The console's banner is not a row but the balance itself: shown while it is below the threshold.
 */
import { sql } from "drizzle-orm";
import { microToToman } from "../catalog/prices.ts";
import type { Db } from "../db/client.ts";
import type { Logger } from "../log.ts";
import type { SmsSender } from "./sms.ts";

/** Low-balance SMS one account may receive in a UTC day; further crossings that day are skipped. */
export const LOW_BALANCE_SMS_DAILY_MAX = 3;
/** Alerts one run claims and sends, one after another. */
export const ALERT_SEND_BATCH_MAX = 20;
/** How often each node looks for alerts to send. */
export const ALERT_SEND_INTERVAL_MS = 1_000;
/** The highest threshold a customer may set: 1,000,000,000 toman. */
export const LOW_BALANCE_THRESHOLD_MICRO_MAX = 1_000_000_000n * 1_000_000n;

export interface BalanceAlertState {
  thresholdMicro: bigint | null;
  /** The settled balance is below the threshold: the console shows its banner. */
  below: boolean;
}

/** Sets (or with null, clears) an account's low-balance threshold; false when there is no such account. */
export async function setLowBalanceThreshold(db: Db, accountId: string, thresholdMicro: bigint | null): Promise<boolean> {
  const rows = await db.rows<{ id: string }>(sql`
    UPDATE accounts SET low_balance_threshold_micro = ${thresholdMicro} WHERE id = ${accountId} RETURNING id`);
  return rows.length === 1;
}

export async function balanceAlertState(db: Db, accountId: string): Promise<BalanceAlertState> {
  const [row] = await db.rows<{ threshold: string | null; balance: string | null }>(sql`
    SELECT a.low_balance_threshold_micro::text AS threshold, w.balance_micro::text AS balance
    FROM accounts a LEFT JOIN wallets w ON w.account_id = a.id WHERE a.id = ${accountId}`);
  const thresholdMicro = row?.threshold == null ? null : BigInt(row.threshold);
  const balance = BigInt(row?.balance ?? "0");
  return { thresholdMicro, below: thresholdMicro !== null && balance < thresholdMicro };
}

interface Claimed {
  id: string;
  account_id: string;
  phone: string | null;
  balance: string;
  sent_today: number;
}

/**
 * Claims and sends the pending alerts (at most ALERT_SEND_BATCH_MAX); returns how many were sent.
 * @example every("balance_alerts", ALERT_SEND_INTERVAL_MS, log, () => sendPendingAlerts(db, sender, log));
 */
export async function sendPendingAlerts(db: Db, sender: SmsSender, log: Logger): Promise<number> {
  const claimed = await db.rows<Claimed>(sql`
    WITH c AS (
      UPDATE balance_alerts SET status = 'sending'
      WHERE id IN (SELECT id FROM balance_alerts WHERE status = 'pending' ORDER BY id LIMIT ${ALERT_SEND_BATCH_MAX} FOR UPDATE SKIP LOCKED)
      RETURNING id, account_id, balance_micro)
    SELECT c.id::text AS id, c.account_id, a.phone, c.balance_micro::text AS balance,
      (SELECT count(*)::int FROM balance_alerts s WHERE s.account_id = c.account_id AND s.status = 'sent'
        AND s.created_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC') AS sent_today
    FROM c JOIN accounts a ON a.id = c.account_id ORDER BY c.id`);
  let sent = 0;
  const sentToday = new Map<string, number>();
  for (const alert of claimed) {
    const today = sentToday.get(alert.account_id) ?? alert.sent_today;
    const reason = await sendOne(alert, today, sender);
    if (reason === null) {
      sent++;
      sentToday.set(alert.account_id, today + 1);
    } else {
      log("info", "balance_alert_skipped", { accountId: alert.account_id, reason });
    }
    await db.rows(sql`
      UPDATE balance_alerts SET status = ${reason === null ? "sent" : "skipped"}, reason = ${reason}, ended_at = now()
      WHERE id = ${alert.id}::bigint`);
  }
  return sent;
}

/** Null when sent; otherwise why not. */
async function sendOne(alert: Claimed, sentToday: number, sender: SmsSender): Promise<string | null> {
  if (!alert.phone) return "no_phone";
  if (sentToday >= LOW_BALANCE_SMS_DAILY_MAX) return "account_daily_limit";
  const balance = BigInt(alert.balance);
  const wholeToman = microToToman(balance < 0n ? 0n : balance).split(".")[0]!;
  const failure = await sender.sendLowBalance(alert.phone, wholeToman);
  return failure === null ? null : "send_failed";
}
