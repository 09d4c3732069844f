/**
 * A payment provider, as top-ups use it. Amounts cross this interface in micro-toman; each
 * provider converts to its own unit at its edge, in one named place. Operations a provider lacks
 * are missing keys (and `capabilities` says so), never stubs that throw.
 *
 * Flow: request → redirect the customer to `redirectUrl(authority)` → the customer comes back to
 * the callback (`parseCallback`), which proves nothing → `verify` is the only proof of payment.
 * `inquiry` and `listUnverified` let the reconciler find payments whose callback or verify reply
 * was lost; `reverse` hands a payment back.
 */

/** A provider reply as kept on the top-up record (already cut to a bounded size). */
export type RawReply = unknown;

export interface PaymentRequest {
  /** Our top-up id: sent as the order id, so the provider's records name it. */
  topupId: string;
  amountMicro: bigint;
  description: string;
  callbackUrl: string;
}

export type RequestOutcome =
  | { ok: true; authority: string; feeMicro: bigint | null; raw: RawReply }
  | { ok: false; reason: string; raw: RawReply };

/**
 * What a verify established. `paid` covers "verified now" and "already verified" alike: both
 * mean the money arrived, and the ledger reference makes either credit once.
 */
export type VerifyOutcome =
  | {
      kind: "paid";
      refId: string;
      cardPan: string | null;
      cardHash: string | null;
      feeMicro: bigint | null;
      alreadyVerified: boolean;
      raw: RawReply;
    }
  /** The provider says the customer did not pay (or not yet). */
  | { kind: "not_paid"; reason: string; raw: RawReply }
  /** The provider has the payment at another amount than our record: an operator must look. */
  | { kind: "amount_mismatch"; reason: string; raw: RawReply }
  /** The authority is not ours or not valid: it will never verify. */
  | { kind: "invalid"; reason: string; raw: RawReply }
  /** No answer we can act on (timeout, network, too many attempts, a bad reply): try again later. */
  | { kind: "retry"; reason: string; raw: RawReply };

export const PROVIDER_PAYMENT_STATUSES = ["IN_BANK", "PAID", "VERIFIED", "FAILED", "REVERSED"] as const;
export type ProviderPaymentStatus = (typeof PROVIDER_PAYMENT_STATUSES)[number];

export type InquiryOutcome =
  | { kind: "status"; status: ProviderPaymentStatus; raw: RawReply }
  | { kind: "invalid"; reason: string; raw: RawReply }
  | { kind: "retry"; reason: string; raw: RawReply };

export interface UnverifiedPayment {
  authority: string;
  amountMicro: bigint;
}

export type UnverifiedOutcome = { ok: true; payments: UnverifiedPayment[] } | { ok: false; reason: string };

export type ReverseOutcome = { ok: true; raw: RawReply } | { ok: false; reason: string; raw: RawReply };

export interface CallbackParams {
  authority: string;
  /** What the customer's browser says; never a payment by itself. */
  status: "OK" | "NOK";
}

export interface ProviderCapabilities {
  inquiry: boolean;
  unverifiedList: boolean;
  reverse: boolean;
}

export interface PaymentProvider {
  /** Stored on each top-up; `ref_id` is unique per provider. */
  readonly name: string;
  readonly capabilities: ProviderCapabilities;
  request(request: PaymentRequest): Promise<RequestOutcome>;
  redirectUrl(authority: string): string;
  /** The callback's query, or null when it does not name an authority. */
  parseCallback(query: URLSearchParams): CallbackParams | null;
  verify(payment: { authority: string; amountMicro: bigint }): Promise<VerifyOutcome>;
  inquiry?(authority: string): Promise<InquiryOutcome>;
  listUnverified?(): Promise<UnverifiedOutcome>;
  reverse?(authority: string): Promise<ReverseOutcome>;
}
