/**
 * What the wallet page needs from wallet top-ups through a payment provider (src/payments):
 * start one (the customer is sent to `paymentUrl`), list the account's, show one, and ask the
 * provider again about a pending one ("check status"). Every call is scoped to the signed-in
 * account: another account's top-up id is "not found", never shown.
 *
 * `paymentTopUps` adapts src/payments (Zarinpal). Until a provider is configured, `ledgerTopUps` stands in: it lists the wallet's credits from
 * the ledger (operator top-ups) and refuses to start a payment with a 503 saying why.
 */
import { and, desc, eq } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { ledgerTransfers, TOPUP_STATES } from "../db/schema.ts";
import { fail, isFailure, type Failure } from "../errors.ts";
import { emptyReport, reconcileOne } from "../payments/reconciler.ts";
import { addressBucket } from "./address.ts";
import { CANCELLED_REASON, type Topup, type Topups } from "../payments/topups.ts";

export type TopUpState = (typeof TOPUP_STATES)[number];
/** States the customer may ask the provider about again. */
export const TOPUP_PENDING_STATES: readonly TopUpState[] = ["created", "redirected", "verifying"];
export const TOPUP_LIST_MAX = 100;

export interface TopUpView {
  id: string;
  amountMicro: bigint;
  state: TopUpState;
  /** The provider's reference of a verified payment (Zarinpal's ref_id). */
  refId: string | null;
  /** The paying card as the provider masked it (`502229******5995`), when its verify gave one. */
  cardPan: string | null;
  /** The customer left the payment page with "cancel" (the provider may still report it paid). */
  cancelled: boolean;
  reason: string | null;
  createdAt: Date;
  verifiedAt: Date | null;
}

export interface ConsoleTopUps {
  /** Whether `start` can work (a provider is configured). */
  readonly available: boolean;
  /**
   * `returnUrl`: where the customer's browser lands after the payment page, with the outcome;
   * `clientAddress`: the customer's, for the pending cap per address.
   */
  start(
    accountId: string,
    amountMicro: bigint,
    returnUrl: string,
    clientAddress: string,
  ): Promise<{ id: string; paymentUrl: string } | Failure>;
  list(accountId: string, limit: number): Promise<TopUpView[]>;
  get(accountId: string, id: string): Promise<TopUpView | null>;
  check(accountId: string, id: string): Promise<TopUpView | Failure>;
}

/** No payment provider: history from the ledger's credits, no new payments. */
export function ledgerTopUps(db: Db): ConsoleTopUps {
  const view = (row: typeof ledgerTransfers.$inferSelect): TopUpView => ({
    id: `ltr_${row.id}`,
    amountMicro: row.amountMicro,
    state: "verified",
    refId: null,
    cardPan: null,
    cancelled: false,
    reason: row.memo,
    createdAt: row.createdAt,
    verifiedAt: row.createdAt,
  });
  const credits = (accountId: string) => and(eq(ledgerTransfers.creditAccount, `wallet:${accountId}`), eq(ledgerTransfers.kind, "topup"));
  const get = async (accountId: string, id: string) => {
    const match = /^ltr_(\d{1,18})$/.exec(id);
    if (!match) return null;
    const [row] = await db.orm
      .select()
      .from(ledgerTransfers)
      .where(and(credits(accountId), eq(ledgerTransfers.id, BigInt(match[1]!))));
    return row ? view(row) : null;
  };
  return {
    available: false,
    async start() {
      return fail("service_unavailable", "Online payment is not configured on this gateway yet; ask the operator to top up your wallet.");
    },
    async list(accountId, limit) {
      const rows = await db.orm
        .select()
        .from(ledgerTransfers)
        .where(credits(accountId))
        .orderBy(desc(ledgerTransfers.id))
        .limit(Math.min(limit, TOPUP_LIST_MAX));
      return rows.map(view);
    },
    get,
    async check(accountId, id) {
      return (await get(accountId, id)) ?? fail("not_found", `No top-up ${id}.`);
    },
  };
}

function paidView(row: Topup): TopUpView {
  return {
    id: row.id,
    amountMicro: row.amountMicro,
    state: TOPUP_STATES.includes(row.state as TopUpState) ? (row.state as TopUpState) : "needs_review",
    refId: row.refId,
    cardPan: row.cardPan,
    cancelled: row.reason === CANCELLED_REASON && TOPUP_PENDING_STATES.includes(row.state as TopUpState),
    reason: row.reason,
    createdAt: row.createdAt,
    verifiedAt: row.verifiedAt,
  };
}

/**
 * Top-ups through the configured payment provider. "Check status" asks the provider the way the
 * reconciler does (an inquiry, and a settle only when it says paid), so checking a payment the
 * customer has not finished never fails it; its provider calls share the callback's
 * CALLBACK_ATTEMPTS_MAX per top-up, after which a check only shows the top-up.
 */
export function paymentTopUps(topups: Topups): ConsoleTopUps {
  const owned = async (accountId: string, id: string) => {
    const row = await topups.get(id);
    return row && row.accountId === accountId ? row : null;
  };
  return {
    available: true,
    async start(accountId, amountMicro, _returnUrl, clientAddress) {
      const started = await topups.start(accountId, amountMicro, { address: addressBucket(clientAddress) });
      if (isFailure(started)) return started;
      return { id: started.topup.id, paymentUrl: started.redirectUrl };
    },
    async list(accountId, limit) {
      return (await topups.list({ accountId, limit: Math.min(limit, TOPUP_LIST_MAX) })).map(paidView);
    },
    async get(accountId, id) {
      const row = await owned(accountId, id);
      return row ? paidView(row) : null;
    },
    async check(accountId, id) {
      const row = await owned(accountId, id);
      if (!row) return fail("not_found", `No top-up ${id}.`);
      if (TOPUP_PENDING_STATES.includes(row.state as TopUpState)) {
        await reconcileOne(topups, row, emptyReport(), () => {}, "customer");
      }
      return paidView((await topups.get(id)) ?? row);
    },
  };
}
