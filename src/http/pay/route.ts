/**
 * The customer's return from the payment provider, with no key: `GET /pay/zarinpal/callback?
 * Authority=…&Status=OK|NOK`. A callback is never a payment: with Status=OK it asks for a
 * settle (the provider's verify is the only proof), then sends the customer on to the return URL
 * with the top-up id and outcome. Status=NOK only notes the cancellation on a waiting top-up (the
 * reconciler expires it unless the provider later reports it paid). `GET /pay/result` is the built-in landing page.
 */
import type { Payments, ReturnOutcome } from "../../payments/service.ts";
import type { Topup } from "../../payments/topups.ts";
import { fail } from "../../errors.ts";
import { failed } from "../guard.ts";

function outcomeOf(topup: Topup | null, customerStatus: "OK" | "NOK"): ReturnOutcome {
  switch (topup?.state) {
    case undefined:
      return "unknown";
    case "verified":
      return "verified";
    case "needs_review":
      return "review";
    case "failed":
    case "reversed":
      return "failed";
    case "expired":
      return "expired";
    default:
      return customerStatus === "NOK" ? "cancelled" : "pending";
  }
}

export async function paymentCallback(request: Request, payments: Payments | null, requestId: string): Promise<Response> {
  if (!payments) return failed(fail("not_found", "Payments are not enabled on this gateway."), requestId);
  const params = payments.topups.provider.parseCallback(new URL(request.url).searchParams);
  const found = params ? await payments.topups.byAuthority(params.authority) : null;
  const topup = !found
    ? null
    : params!.status === "OK"
      ? await payments.topups.settle(found.id, "callback")
      : await payments.topups.noteCancelled(found.id);
  const location = payments.returnUrl(topup?.id ?? null, outcomeOf(topup, params?.status ?? "NOK"));
  return new Response(null, { status: 303, headers: { location, "x-request-id": requestId, "cache-control": "no-store" } });
}

const MESSAGES: Record<ReturnOutcome, string> = {
  verified: "Payment received: your wallet has been credited.",
  pending: "Your payment is being confirmed with the bank. Your wallet will be credited within a few minutes if it went through.",
  cancelled: "The payment was cancelled. Nothing was charged.",
  failed: "The payment did not go through. If money left your account, the bank returns it within 72 hours.",
  review: "Your payment needs a manual check by our team; your wallet will be credited once it is confirmed.",
  expired: "This payment expired before it was completed.",
  unknown: "We could not find this payment.",
};

export function resultPage(request: Request): Response {
  const query = new URL(request.url).searchParams;
  const asked = query.get("outcome") ?? "unknown";
  const outcome: ReturnOutcome = Object.hasOwn(MESSAGES, asked) ? (asked as ReturnOutcome) : "unknown";
  const message = MESSAGES[outcome];
  const id = /^top_[0-9A-Za-z]{1,40}$/.test(query.get("topup") ?? "") ? query.get("topup")! : null;
  const html = `<!doctype html><html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width"><title>Darvaze top-up</title>
<style>body{font:16px system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem}code{background:#eee;padding:0 .3em}</style></head>
<body><h1>Wallet top-up</h1><p data-outcome="${outcome}">${message}</p>${id ? `<p>Reference: <code>${id}</code></p>` : ""}</body></html>`;
  return new Response(html, { headers: { "content-type": "text/html; charset=utf-8", "cache-control": "no-store" } });
}
