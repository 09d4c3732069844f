/**
 * The reconciler: finds top-ups whose callback or verify reply was lost and settles them, and
 * closes the abandoned ones. Each run:
 *
 *   1. the provider's unverified list: every authority paid but not verified is settled, whatever
 *      state its top-up had reached (an amount that differs from our record goes to review);
 *   2. stale waiting top-ups (no news for `staleMs`, past expiry, or a verify claim that lapsed),
 *      at most RECONCILE_PER_ACCOUNT_MAX of one account's, taken in turns across accounts: an
 *      inquiry says PAID or VERIFIED → settle; REVERSED → reversed; otherwise, past expiry → expired. A lapsed claim is settled directly: verify is safe to repeat (101).
 *
 * Everything goes through `Topups.settle`, so a run racing a callback or another node's run
 * still credits once. Runs every RECONCILE_INTERVAL_MS (main.ts) and on demand (admin, CLI).
 */
import type { Logger } from "../log.ts";
import type { SettledBy, Topup, Topups } from "./topups.ts";

/** Top-ups looked at per run; the rest wait for the next one. */
export const RECONCILE_BATCH_MAX = 200;
/** Of one account's stale top-ups, at most this many a run (taken in turns across accounts). */
export const RECONCILE_PER_ACCOUNT_MAX = 5;

export interface ReconcileReport {
  unverified_listed: number;
  inquired: number;
  settled: number;
  verified: number;
  expired: number;
  reversed: number;
  needs_review: number;
  /** Provider calls that got no usable answer (tried again next run). */
  unanswered: number;
}

export interface ReconcilerOptions {
  staleMs: number;
  log: Logger;
}

/** A report with nothing counted yet. */
export function emptyReport(): ReconcileReport {
  return { unverified_listed: 0, inquired: 0, settled: 0, verified: 0, expired: 0, reversed: 0, needs_review: 0, unanswered: 0 };
}

export async function reconcile(topups: Topups, options: ReconcilerOptions): Promise<ReconcileReport> {
  const report = emptyReport();
  const count = (row: Topup | null) => {
    report.settled++;
    if (row?.state === "verified") report.verified++;
    if (row?.state === "needs_review") report.needs_review++;
  };
  await settleUnverified(topups, report, count, options.log);
  for (const row of await topups.stale(options.staleMs, RECONCILE_BATCH_MAX, RECONCILE_PER_ACCOUNT_MAX)) {
    await reconcileOne(topups, row, report, count);
  }
  if (report.settled + report.expired + report.reversed > 0) options.log("info", "topups_reconciled", { ...report });
  return report;
}

async function settleUnverified(topups: Topups, report: ReconcileReport, count: (row: Topup | null) => void, log: Logger): Promise<void> {
  const list = await topups.provider.listUnverified?.();
  if (!list) return;
  if (!list.ok) {
    report.unanswered++;
    log("warn", "topups_unverified_list_failed", { reason: list.reason });
    return;
  }
  report.unverified_listed = list.payments.length;
  for (const payment of list.payments.slice(0, RECONCILE_BATCH_MAX)) {
    const row = await topups.byAuthority(payment.authority);
    if (!row || ["verified", "needs_review", "reversed"].includes(row.state)) continue;
    if (payment.amountMicro !== row.amountMicro) {
      const reason = `unverified list: paid ${payment.amountMicro} micro-toman, recorded ${row.amountMicro}`;
      if (await topups.move(row.id, ["created", "redirected", "failed", "expired", "verifying"], { state: "needs_review", reason }))
        report.needs_review++;
      continue;
    }
    count(await topups.settle(row.id, "reconciler"));
  }
}

/**
 * Asks the provider about one waiting top-up and settles it when paid. `by`: the reconciler, or a
 * customer's "check status", whose provider calls (inquiry and verify) count against the
 * top-up's CALLBACK_ATTEMPTS_MAX like the callback's.
 */
export async function reconcileOne(
  topups: Topups,
  row: Topup,
  report: ReconcileReport,
  count: (row: Topup | null) => void,
  by: Exclude<SettledBy, "callback"> = "reconciler",
): Promise<void> {
  const expiredNow = row.expiresAt.getTime() < Date.now();
  if (row.state === "verifying") return count(await topups.settle(row.id, by));
  if (!row.authority) {
    if (expiredNow && (await topups.expire(row.id, "no payment was ever requested"))) report.expired++;
    return;
  }
  if (!topups.provider.inquiry) return count(await topups.settle(row.id, by));
  if (by === "customer" && !(await topups.countCheck(row.id))) return;
  report.inquired++;
  const answer = await topups.provider.inquiry(row.authority);
  if (answer.kind === "retry") {
    report.unanswered++;
    return;
  }
  if (answer.kind === "status" && (answer.status === "PAID" || answer.status === "VERIFIED"))
    return count(await topups.settle(row.id, by, true));
  if (answer.kind === "status" && answer.status === "REVERSED") {
    if (
      await topups.move(
        row.id,
        ["created", "redirected"],
        { state: "reversed", reason: "the provider reports the payment reversed" },
        answer.raw,
      )
    )
      report.reversed++;
    return;
  }
  if (!expiredNow) return;
  const why = answer.kind === "status" ? `inquiry: ${answer.status}` : `inquiry: ${answer.reason}`;
  if (await topups.expire(row.id, `not paid before its expiry (${why})`)) report.expired++;
}
