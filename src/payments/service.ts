/**
 * Payments as the gateway runs them: the configured provider, the top-up records, the
 * reconciler on a timer, and where customers are sent back to. Built by main.ts when a merchant
 * id is configured; absent otherwise (operators then top up by hand).
 */
import { every } from "../background.ts";
import type { Env } from "../config.ts";
import type { Db } from "../db/client.ts";
import type { Logger } from "../log.ts";
import { reconcile, type ReconcileReport } from "./reconciler.ts";
import { MICRO_PER_TOMAN, Topups } from "./topups.ts";
import { zarinpal } from "./zarinpal/index.ts";

/** What the customer is told on return, from the top-up's state after the callback. */
export type ReturnOutcome = "verified" | "pending" | "cancelled" | "failed" | "review" | "expired" | "unknown";

export const CALLBACK_PATH = "/pay/zarinpal/callback";
export const RESULT_PATH = "/pay/result";

export interface Payments {
  topups: Topups;
  /** One reconciler run; runs never overlap on a node (a second call waits for the first's report). */
  reconcile(): Promise<ReconcileReport>;
  /** Where the customer lands after the callback. */
  returnUrl(topupId: string | null, outcome: ReturnOutcome): string;
  stop(): void;
}

export function startPayments(env: Env, db: Db, log: Logger, origin: () => string): Payments | null {
  if (!env.ZARINPAL_MERCHANT_ID) return null;
  const base = () => (env.PAYMENT_CALLBACK_BASE ?? env.PUBLIC_URL ?? origin()).replace(/\/+$/, "");
  const provider = zarinpal({ merchantId: env.ZARINPAL_MERCHANT_ID, baseUrl: env.ZARINPAL_BASE_URL, timeoutMs: env.PAYMENT_TIMEOUT_MS });
  const topups = new Topups({
    db,
    provider,
    log,
    callbackUrl: () => base() + CALLBACK_PATH,
    amountMinMicro: BigInt(env.TOPUP_TOMAN_MIN) * MICRO_PER_TOMAN,
    amountMaxMicro: BigInt(env.TOPUP_TOMAN_MAX) * MICRO_PER_TOMAN,
    ttlMs: env.TOPUP_TTL_MS,
    claimMs: env.PAYMENT_VERIFY_CLAIM_MS,
    askIntervalMs: env.PAYMENT_ASK_INTERVAL_MS,
    fault: env.DARVAZE_FAULT,
  });
  let running: Promise<ReconcileReport> | null = null;
  const run = () => (running ??= reconcile(topups, { staleMs: env.PAYMENT_STALE_MS, log }).finally(() => (running = null)));
  const stopReconciling = env.RECONCILE_INTERVAL_MS > 0 ? every("topups_reconcile", env.RECONCILE_INTERVAL_MS, log, run) : null;
  return {
    topups,
    reconcile: run,
    returnUrl(topupId, outcome) {
      // A path (the account area's `/console/#/wallet`) is on the same origin as the callback.
      const url = new URL(env.PAYMENT_RETURN_URL ?? RESULT_PATH, `${base()}/`);
      if (topupId) url.searchParams.set("topup", topupId);
      url.searchParams.set("outcome", outcome);
      return url.toString();
    },
    stop: () => {
      stopReconciling?.();
    },
  };
}
