/**
 * The Zarinpal v4 provider: the transforms of wire.ts around the one I/O function below, which
 * bounds every call by a timeout and every reply by a size.
 */
import { readTextBounded } from "../../providers/upstream.ts";
import type { PaymentProvider } from "../provider.ts";
import * as wire from "./wire.ts";

/** Zarinpal's replies are a few hundred bytes; the unverified list of 100 a few KiB. */
export const REPLY_BYTES_MAX = 256 * 1024;

export interface ZarinpalOptions {
  merchantId: string;
  /** `https://payment.zarinpal.com`, `https://sandbox.zarinpal.com`, or a simulator. */
  baseUrl: string;
  timeoutMs: number;
}

/** POSTs JSON and reads the reply within the bounds; never throws. */
async function post(options: ZarinpalOptions, path: string, body: unknown): Promise<wire.Reply> {
  try {
    const response = await fetch(options.baseUrl + path, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json" },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(options.timeoutMs),
    });
    const { text, truncated } = await readTextBounded(response, REPLY_BYTES_MAX);
    if (truncated) return { failure: `reply larger than ${REPLY_BYTES_MAX} bytes` };
    try {
      return { status: response.status, body: JSON.parse(text) as unknown };
    } catch {
      return { failure: `reply is not JSON (HTTP ${response.status})` };
    }
  } catch (error) {
    const name = (error as Error).name;
    return {
      failure:
        name === "TimeoutError" || name === "AbortError"
          ? `no reply within ${options.timeoutMs} ms`
          : `network: ${(error as Error).message}`,
    };
  }
}

export function zarinpal(options: ZarinpalOptions): PaymentProvider {
  const base = options.baseUrl.replace(/\/+$/, "");
  const o = { ...options, baseUrl: base };
  return {
    name: "zarinpal",
    capabilities: { inquiry: true, unverifiedList: true, reverse: true },
    request: async (request) => wire.replyToRequestOutcome(await post(o, wire.PATHS.request, wire.requestBody(o.merchantId, request))),
    redirectUrl: (authority) => `${base}${wire.PATHS.startPay}${encodeURIComponent(authority)}`,
    parseCallback: wire.callbackParams,
    verify: async (payment) => wire.replyToVerifyOutcome(await post(o, wire.PATHS.verify, wire.verifyBody(o.merchantId, payment))),
    inquiry: async (authority) => wire.replyToInquiryOutcome(await post(o, wire.PATHS.inquiry, { merchant_id: o.merchantId, authority })),
    listUnverified: async () => wire.replyToUnverifiedOutcome(await post(o, wire.PATHS.unverified, { merchant_id: o.merchantId })),
    reverse: async (authority) => wire.replyToReverseOutcome(await post(o, wire.PATHS.reverse, { merchant_id: o.merchantId, authority })),
  };
}
