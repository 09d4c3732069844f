/**
 * Zarinpal v4 as pure transforms: our request → its JSON body, its reply → our outcome. No I/O,
 * no clock. A reply is `{data: {code, …}, errors: []}` on success and `{data: [], errors: {code,
 * message, validations}}` on error, sometimes with a non-2xx status; `code` comes as a number or
 * as a string ("100"), as Zarinpal's own samples send it, so both are accepted everywhere.
 */
import { z } from "zod";
import type {
  InquiryOutcome,
  PaymentRequest,
  RawReply,
  RequestOutcome,
  ReverseOutcome,
  UnverifiedOutcome,
  VerifyOutcome,
} from "../provider.ts";
import { PROVIDER_PAYMENT_STATUSES } from "../provider.ts";
import { microTomanToRial, rialToMicroToman } from "./amount.ts";

/** What the I/O module hands over: a parsed reply, or why there is none. */
export type Reply = { status: number; body: unknown } | { failure: string };

/** A provider reply is kept on the top-up; anything longer than this is cut. */
export const RAW_REPLY_CHARS_MAX = 4_096;

export const PATHS = {
  request: "/pg/v4/payment/request.json",
  verify: "/pg/v4/payment/verify.json",
  inquiry: "/pg/v4/payment/inquiry.json",
  unverified: "/pg/v4/payment/unVerified.json",
  reverse: "/pg/v4/payment/reverse.json",
  startPay: "/pg/StartPay/",
} as const;

export const CODE_SUCCESS = 100;
export const CODE_ALREADY_VERIFIED = 101;

/** Error codes and what they mean to us. */
export const ERROR_MEANINGS: Record<number, string> = {
  [-9]: "validation error",
  [-10]: "merchant id or server IP not accepted",
  [-11]: "merchant inactive",
  [-12]: "too many attempts",
  [-14]: "callback URL outside the merchant's domain",
  [-50]: "amount differs from the payment's",
  [-51]: "not paid",
  [-53]: "authority belongs to another merchant",
  [-54]: "invalid authority",
};

const code = z.union([
  z.number().int(),
  z
    .string()
    .regex(/^-?\d{1,6}$/)
    .transform(Number),
]);
const errorEnvelope = z.object({ errors: z.object({ code, message: z.string().max(2_000).optional() }) });
const authority = z.string().regex(/^[A-Za-z0-9]{1,64}$/);
const text = z.union([z.string(), z.number()]).transform(String).pipe(z.string().max(200));
const rial = z.union([
  z.number().int().nonnegative(),
  z
    .string()
    .regex(/^\d{1,15}$/)
    .transform(Number),
]);

const requestData = z.object({ code, authority, fee: rial.optional() });
const verifyData = z.object({ code, ref_id: text, card_pan: text.nullish(), card_hash: text.nullish(), fee: rial.nullish() });
const inquiryData = z.object({ code, status: z.enum(PROVIDER_PAYMENT_STATUSES) });
const unverifiedData = z.object({ code, authorities: z.array(z.object({ authority, amount: rial })).max(1_000) });
const reverseData = z.object({ code });

/** The reply as kept: its JSON, cut to RAW_REPLY_CHARS_MAX. */
export function boundedRaw(reply: Reply): RawReply {
  if ("failure" in reply) return { failure: reply.failure };
  const text = JSON.stringify(reply.body) ?? "null";
  return text.length <= RAW_REPLY_CHARS_MAX
    ? { status: reply.status, body: reply.body }
    : { status: reply.status, truncated: text.slice(0, RAW_REPLY_CHARS_MAX) };
}

type Parsed<T> = { data: T } | { errorCode: number; reason: string } | { unreadable: string };

/** Reads the envelope: the success data, the error code, or why the reply cannot be used. */
function parse<T>(reply: Reply, data: z.ZodType<T>): Parsed<T> {
  if ("failure" in reply) return { unreadable: reply.failure };
  const error = errorEnvelope.safeParse(reply.body);
  if (error.success) {
    const c = error.data.errors.code;
    return { errorCode: c, reason: `${c}: ${ERROR_MEANINGS[c] ?? error.data.errors.message ?? "unknown error"}` };
  }
  const ok = z.object({ data }).safeParse(reply.body);
  if (ok.success) return { data: ok.data.data };
  return { unreadable: `unexpected reply (HTTP ${reply.status})` };
}

export function requestBody(merchantId: string, request: PaymentRequest) {
  return {
    merchant_id: merchantId,
    amount: microTomanToRial(request.amountMicro),
    currency: "IRR",
    description: request.description,
    callback_url: request.callbackUrl,
    metadata: { order_id: request.topupId },
  };
}

export function replyToRequestOutcome(reply: Reply): RequestOutcome {
  const raw = boundedRaw(reply);
  const parsed = parse(reply, requestData);
  if ("unreadable" in parsed) return { ok: false, reason: parsed.unreadable, raw };
  if ("errorCode" in parsed) return { ok: false, reason: parsed.reason, raw };
  if (parsed.data.code !== CODE_SUCCESS) return { ok: false, reason: `request answered code ${parsed.data.code}`, raw };
  return {
    ok: true,
    authority: parsed.data.authority,
    feeMicro: parsed.data.fee === undefined ? null : rialToMicroToman(parsed.data.fee),
    raw,
  };
}

export function verifyBody(merchantId: string, payment: { authority: string; amountMicro: bigint }) {
  return { merchant_id: merchantId, amount: microTomanToRial(payment.amountMicro), authority: payment.authority };
}

export function replyToVerifyOutcome(reply: Reply): VerifyOutcome {
  const raw = boundedRaw(reply);
  const parsed = parse(reply, verifyData);
  if ("unreadable" in parsed) return { kind: "retry", reason: parsed.unreadable, raw };
  if ("errorCode" in parsed) {
    switch (parsed.errorCode) {
      case -50:
        return { kind: "amount_mismatch", reason: parsed.reason, raw };
      case -51:
        return { kind: "not_paid", reason: parsed.reason, raw };
      case -9:
      case -53:
      case -54:
        return { kind: "invalid", reason: parsed.reason, raw };
      default:
        return { kind: "retry", reason: parsed.reason, raw };
    }
  }
  const d = parsed.data;
  if (d.code !== CODE_SUCCESS && d.code !== CODE_ALREADY_VERIFIED) return { kind: "retry", reason: `verify answered code ${d.code}`, raw };
  return {
    kind: "paid",
    refId: d.ref_id,
    cardPan: d.card_pan ?? null,
    cardHash: d.card_hash ?? null,
    feeMicro: d.fee == null ? null : rialToMicroToman(d.fee),
    alreadyVerified: d.code === CODE_ALREADY_VERIFIED,
    raw,
  };
}

export function replyToInquiryOutcome(reply: Reply): InquiryOutcome {
  const raw = boundedRaw(reply);
  const parsed = parse(reply, inquiryData);
  if ("unreadable" in parsed) return { kind: "retry", reason: parsed.unreadable, raw };
  if ("errorCode" in parsed)
    return [-53, -54].includes(parsed.errorCode)
      ? { kind: "invalid", reason: parsed.reason, raw }
      : { kind: "retry", reason: parsed.reason, raw };
  return { kind: "status", status: parsed.data.status, raw };
}

export function replyToUnverifiedOutcome(reply: Reply): UnverifiedOutcome {
  const parsed = parse(reply, unverifiedData);
  if ("unreadable" in parsed) return { ok: false, reason: parsed.unreadable };
  if ("errorCode" in parsed) return { ok: false, reason: parsed.reason };
  return { ok: true, payments: parsed.data.authorities.map((a) => ({ authority: a.authority, amountMicro: rialToMicroToman(a.amount) })) };
}

export function replyToReverseOutcome(reply: Reply): ReverseOutcome {
  const raw = boundedRaw(reply);
  const parsed = parse(reply, reverseData);
  if ("unreadable" in parsed) return { ok: false, reason: parsed.unreadable, raw };
  if ("errorCode" in parsed) return { ok: false, reason: parsed.reason, raw };
  return parsed.data.code === CODE_SUCCESS ? { ok: true, raw } : { ok: false, reason: `reverse answered code ${parsed.data.code}`, raw };
}

/** The callback's `?Authority=…&Status=OK|NOK`. */
export function callbackParams(query: URLSearchParams): { authority: string; status: "OK" | "NOK" } | null {
  const a = authority.safeParse(query.get("Authority"));
  if (!a.success) return null;
  return { authority: a.data, status: query.get("Status") === "OK" ? "OK" : "NOK" };
}
