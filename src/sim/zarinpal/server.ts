/**
 * A local Zarinpal (payment gateway v4) for tests, the demo and operators. It speaks the wire as
 * the real service does, and imports nothing from the gateway, so a gateway bug in amounts or
 * codes cannot hide behind a shared helper:
 *
 *   POST /pg/v4/payment/request.json     {merchant_id, amount (rial, or toman with currency IRT), description, callback_url, metadata}
 *   GET  /pg/StartPay/{authority}        the bank page: pay, cancel, pay without redirect, delayed redirect
 *   POST /pg/v4/payment/verify.json      {merchant_id, amount, authority} → 100, then 101 with the same ref_id
 *   POST /pg/v4/payment/inquiry.json     {merchant_id, authority} → IN_BANK | PAID | VERIFIED | FAILED | REVERSED
 *   POST /pg/v4/payment/unVerified.json  {merchant_id} → paid but not verified (the newest 100)
 *   POST /pg/v4/payment/reverse.json     {merchant_id, authority} → within 30 minutes of payment
 *
 * Success is `{data: {code: 100, …}, errors: []}`; an error is `{data: [], errors: {code,
 * message, validations}}`, some with a non-2xx status. Faults are injected through `faults`
 * (in-process) or `POST /__sim/faults`; `GET /__sim/log` is the log of what it received.
 */

/** Zarinpal's own minimum: 10,000 rial. */
export const SIM_AMOUNT_RIAL_MIN = 10_000;
/** Reverse is allowed this long after payment. */
export const SIM_REVERSE_WINDOW_MS = 30 * 60_000;
/** unVerified lists at most this many (the real service says the newest 100). */
export const SIM_UNVERIFIED_MAX = 100;
/** The log keeps this many entries, the oldest dropped first. */
export const SIM_LOG_ENTRIES_MAX = 10_000;
/** Payments the simulator remembers; past this a request is refused with −12. */
export const SIM_PAYMENTS_MAX = 100_000;
/** Request bodies above this are refused (the real service's bodies are a few hundred bytes). */
export const SIM_BODY_BYTES_MAX = 64 * 1024;
/** A dropped verify reply is held this long and then the connection is closed without one. */
export const SIM_DROPPED_REPLY_HOLD_MS = 30_000;

export const SIM_ERRORS = {
  "-9": "Validation error",
  "-10": "Terminal is not valid, please check merchant_id or ip address.",
  "-11": "Terminal is not active, please contact our support team.",
  "-12": "Too many attempts, please try again later.",
  "-14": "The callback URL domain does not match the terminal's domain.",
  "-50": "Session is not valid, amounts values is not the same.",
  "-51": "Session is not valid, session is not active paid try.",
  "-53": "Session is not this merchant_id session",
  "-54": "Invalid authority.",
} as const;
export type SimErrorCode = keyof typeof SIM_ERRORS;

type PaymentStatus = "NEW" | "IN_BANK" | "PAID" | "FAILED" | "VERIFIED" | "REVERSED";

interface Payment {
  authority: string;
  merchantId: string;
  amountRial: number;
  callbackUrl: string;
  description: string;
  orderId: string | null;
  status: PaymentStatus;
  refId: number | null;
  cardPan: string | null;
  cardHash: string | null;
  feeRial: number;
  createdAt: Date;
  paidAt: Date | null;
}

export interface SimPayLogEntry {
  at: string;
  path: string;
  body: Record<string, unknown> | null;
  /** The code answered (100, 101 or an error code); null for pages. */
  code: number | null;
}

export interface SimPayFaults {
  /** The next N verifies are committed (the payment becomes VERIFIED) but their replies never arrive. */
  dropVerifyReplies: number;
  /** The next verify answers this error code instead of its real outcome (one shot). */
  verifyCode: number | null;
  /** The next request answers this error code (one shot): −10, −11, −12, −14 … */
  requestCode: number | null;
  /** The bank page's pay never sends the customer back (as if they closed the tab). */
  callbackNeverSent: boolean;
  /** Every verify waits this long before answering (to widen races). */
  verifyDelayMs: number;
  /** The next payment gets the previous payment's ref_id (one shot): a bank-side duplicate. */
  repeatRefId: boolean;
}

export interface SimPayOptions {
  port?: number;
  hostname?: string;
  /** Merchants the simulator knows; another is answered −10. Default: any UUID-shaped id. */
  merchantIds?: string[];
  /** Send `code` as a string ("100"), as some of Zarinpal's own samples do. */
  codesAsStrings?: boolean;
  /** The delayed redirect's wait on the bank page, seconds. */
  delayedRedirectS?: number;
}

export interface ZarinpalSim {
  url: string;
  port: number;
  faults: SimPayFaults;
  /** What the simulator received, oldest first. */
  log: SimPayLogEntry[];
  /** The customer pays (or cancels) on the bank page; returns the callback URL they are sent to, or null when none is sent. */
  pay(authority: string, action?: "pay" | "cancel" | "pay-silently"): string | null;
  status(authority: string): PaymentStatus | null;
  stop(): Promise<void>;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function noFaults(): SimPayFaults {
  return { dropVerifyReplies: 0, verifyCode: null, requestCode: null, callbackNeverSent: false, verifyDelayMs: 0, repeatRefId: false };
}

export async function startZarinpalSim(options: SimPayOptions = {}): Promise<ZarinpalSim> {
  const payments = new Map<string, Payment>();
  const verifying = new Set<string>();
  const log: SimPayLogEntry[] = [];
  const faults = noFaults();
  let nextRefId = 100_000_000 + Math.floor(Math.random() * 1_000_000);
  const code = (n: number) => (options.codesAsStrings ? String(n) : n);

  const record = (path: string, body: Record<string, unknown> | null, answered: number | null) => {
    log.push({ at: new Date().toISOString(), path, body, code: answered });
    if (log.length > SIM_LOG_ENTRIES_MAX) log.shift();
  };

  const ok = (path: string, body: Record<string, unknown> | null, data: Record<string, unknown>) => {
    record(path, body, Number(data.code));
    return Response.json({ data: { ...data, code: code(Number(data.code)) }, errors: [] });
  };

  const error = (path: string, body: Record<string, unknown> | null, err: number, validations: Record<string, string>[] = []) => {
    record(path, body, err);
    const message = SIM_ERRORS[String(err) as SimErrorCode] ?? "Unknown error";
    const status = err === -9 ? 422 : err === -10 || err === -11 ? 401 : err === -12 ? 429 : 200;
    return Response.json({ data: [], errors: { code: code(err), message, validations } }, { status });
  };

  const merchantError = (merchantId: unknown): number | null => {
    if (typeof merchantId !== "string" || !UUID.test(merchantId)) return -9;
    if (options.merchantIds && !options.merchantIds.includes(merchantId)) return -10;
    return null;
  };

  const readBody = async (request: Request): Promise<Record<string, unknown> | null> => {
    const text = await request.text();
    if (text.length > SIM_BODY_BYTES_MAX) return null;
    try {
      const value = JSON.parse(text) as unknown;
      return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
    } catch {
      return null;
    }
  };

  function newAuthority(): string {
    const digits = Array.from(crypto.getRandomValues(new Uint8Array(35)), (b) => String(b % 10)).join("");
    return `A${digits}`;
  }

  function paymentRequest(path: string, body: Record<string, unknown>): Response {
    const merchant = merchantError(body.merchant_id);
    if (merchant !== null)
      return error(path, body, merchant, merchant === -9 ? [{ merchant_id: "The merchant id must be 36 characters." }] : []);
    if (faults.requestCode !== null) {
      const forced = faults.requestCode;
      faults.requestCode = null;
      return error(path, body, forced);
    }
    const irt = body.currency === "IRT";
    const amount = typeof body.amount === "string" ? Number(body.amount) : body.amount;
    if (typeof amount !== "number" || !Number.isSafeInteger(amount))
      return error(path, body, -9, [{ amount: "The amount must be a whole number." }]);
    const amountRial = irt ? amount * 10 : amount;
    if (amountRial < SIM_AMOUNT_RIAL_MIN) return error(path, body, -9, [{ amount: "The amount must be at least 10000 rial." }]);
    if (typeof body.callback_url !== "string" || !/^https?:\/\//.test(body.callback_url)) {
      return error(path, body, -9, [{ callback_url: "The callback url must be an http(s) URL." }]);
    }
    if (typeof body.description !== "string" || body.description.length === 0)
      return error(path, body, -9, [{ description: "The description is required." }]);
    if (payments.size >= SIM_PAYMENTS_MAX) return error(path, body, -12);
    const metadata = (typeof body.metadata === "object" && body.metadata !== null ? body.metadata : {}) as Record<string, unknown>;
    const authority = newAuthority();
    // The merchant pays the fee: 1% up to 40,000 rial (shown, never taken from the customer's amount here).
    const feeRial = Math.min(Math.ceil(amountRial / 100), 40_000);
    payments.set(authority, {
      authority,
      merchantId: body.merchant_id as string,
      amountRial,
      callbackUrl: body.callback_url,
      description: body.description,
      orderId: typeof metadata.order_id === "string" ? metadata.order_id : null,
      status: "NEW",
      refId: null,
      cardPan: null,
      cardHash: null,
      feeRial,
      createdAt: new Date(),
      paidAt: null,
    });
    return ok(path, body, { code: 100, message: "Success", authority, fee_type: "Merchant", fee: feeRial });
  }

  /** Looks the authority up for a merchant: −54 unknown, −53 another merchant's. */
  function owned(body: Record<string, unknown>): Payment | number {
    const merchant = merchantError(body.merchant_id);
    if (merchant !== null) return merchant;
    const payment = typeof body.authority === "string" ? payments.get(body.authority) : undefined;
    if (!payment) return -54;
    if (payment.merchantId !== body.merchant_id) return -53;
    return payment;
  }

  async function verify(path: string, body: Record<string, unknown>): Promise<Response> {
    const answer = await verifyOnce(path, body);
    if (answer !== "dropped") return answer;
    // Committed, but the reply never reaches the merchant: hold the connection, then close it.
    await Bun.sleep(SIM_DROPPED_REPLY_HOLD_MS);
    return new Response(null, { status: 504 });
  }

  /** One verify, with at most one in flight per authority (the real service answers −12 to more). */
  async function verifyOnce(path: string, body: Record<string, unknown>): Promise<Response | "dropped"> {
    const payment = owned(body);
    if (typeof payment === "number") return error(path, body, payment);
    if (verifying.has(payment.authority)) return error(path, body, -12);
    verifying.add(payment.authority);
    try {
      if (faults.verifyDelayMs > 0) await Bun.sleep(faults.verifyDelayMs);
      if (faults.verifyCode !== null) {
        const forced = faults.verifyCode;
        faults.verifyCode = null;
        return error(path, body, forced);
      }
      const amount = typeof body.amount === "string" ? Number(body.amount) : body.amount;
      if (payment.status !== "PAID" && payment.status !== "VERIFIED") return error(path, body, -51);
      if (amount !== payment.amountRial) return error(path, body, -50);
      const first = payment.status === "PAID";
      payment.status = "VERIFIED";
      const data = {
        code: first ? 100 : 101,
        message: first ? "Paid" : "Verified",
        card_hash: payment.cardHash,
        card_pan: payment.cardPan,
        ref_id: payment.refId,
        fee_type: "Merchant",
        fee: payment.feeRial,
      };
      if (faults.dropVerifyReplies > 0) {
        faults.dropVerifyReplies--;
        record(path, body, data.code);
        return "dropped";
      }
      return ok(path, body, data);
    } finally {
      verifying.delete(payment.authority);
    }
  }

  function inquiry(path: string, body: Record<string, unknown>): Response {
    const payment = owned(body);
    if (typeof payment === "number") return error(path, body, payment);
    const status = payment.status === "NEW" ? "IN_BANK" : payment.status;
    return ok(path, body, { code: 100, message: "Success", status });
  }

  function unverified(path: string, body: Record<string, unknown>): Response {
    const merchant = merchantError(body.merchant_id);
    if (merchant !== null) return error(path, body, merchant);
    const authorities = [...payments.values()]
      .filter((p) => p.merchantId === body.merchant_id && p.status === "PAID")
      .slice(-SIM_UNVERIFIED_MAX)
      .map((p) => ({
        authority: p.authority,
        amount: p.amountRial,
        callback_url: p.callbackUrl,
        referer: "",
        date: p.paidAt!.toISOString().slice(0, 19).replace("T", " "),
      }));
    return ok(path, body, { code: 100, message: "Success", authorities });
  }

  function reverse(path: string, body: Record<string, unknown>): Response {
    const payment = owned(body);
    if (typeof payment === "number") return error(path, body, payment);
    if (payment.status !== "PAID" && payment.status !== "VERIFIED") return error(path, body, -51);
    if (Date.now() - payment.paidAt!.getTime() > SIM_REVERSE_WINDOW_MS)
      return error(path, body, -9, [{ authority: "Reverse is possible within 30 minutes of payment." }]);
    payment.status = "REVERSED";
    return ok(path, body, { code: 100, message: "Reversed" });
  }

  function callbackFor(payment: Payment, status: "OK" | "NOK"): string {
    const url = new URL(payment.callbackUrl);
    url.searchParams.set("Authority", payment.authority);
    url.searchParams.set("Status", status);
    return url.toString();
  }

  function pay(authority: string, action: "pay" | "cancel" | "pay-silently" = "pay"): string | null {
    const payment = payments.get(authority);
    if (!payment) throw new Error(`no payment ${authority}`);
    if (payment.status !== "NEW" && payment.status !== "IN_BANK") return callbackFor(payment, payment.status === "FAILED" ? "NOK" : "OK");
    if (action === "cancel") {
      payment.status = "FAILED";
      return callbackFor(payment, "NOK");
    }
    payment.status = "PAID";
    payment.paidAt = new Date();
    payment.refId = faults.repeatRefId ? nextRefId - 1 : nextRefId++;
    faults.repeatRefId = false;
    const last4 = String(1000 + (payment.refId % 9000));
    payment.cardPan = `502229******${last4}`;
    payment.cardHash = new Bun.CryptoHasher("sha256").update(`card-${last4}`).digest("hex").toUpperCase();
    return action === "pay-silently" || faults.callbackNeverSent ? null : callbackFor(payment, "OK");
  }

  const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

  function bankPage(payment: Payment): Response {
    const rial = payment.amountRial.toLocaleString("en-US");
    const button = (action: string, label: string) =>
      `<form method="post" action="/pg/StartPay/${payment.authority}/${action}"><button name="action" value="${action}">${label}</button></form>`;
    const html = `<!doctype html><html><head><meta charset="utf-8"><title>Zarinpal simulator</title></head><body>
<h1>Zarinpal simulator</h1>
<p>${escapeHtml(payment.description)}</p>
<p>Amount: <strong>${rial} rial</strong> (${(payment.amountRial / 10).toLocaleString("en-US")} toman)</p>
${button("pay", "Pay")}${button("cancel", "Cancel")}${button("pay-silently", "Pay, then close the tab (no redirect)")}${button("pay-delayed", `Pay, redirect after ${options.delayedRedirectS ?? 5} s`)}
</body></html>`;
    if (payment.status === "NEW") payment.status = "IN_BANK";
    return new Response(html, { headers: { "content-type": "text/html; charset=utf-8" } });
  }

  function bankAction(authority: string, action: string, path: string): Response {
    const payment = payments.get(authority);
    if (!payment) return new Response("unknown authority", { status: 404 });
    record(path, { authority, action }, null);
    if (action === "pay-delayed") {
      const target = pay(authority, "pay");
      if (target === null) return new Response("Paid.", { headers: { "content-type": "text/plain" } });
      const seconds = options.delayedRedirectS ?? 5;
      const html = `<!doctype html><html><head><meta http-equiv="refresh" content="${seconds};url=${escapeHtml(target)}"></head><body><p>Paid. Returning to the merchant in ${seconds} s…</p></body></html>`;
      return new Response(html, { headers: { "content-type": "text/html; charset=utf-8" } });
    }
    if (action !== "pay" && action !== "cancel" && action !== "pay-silently") return new Response("unknown action", { status: 404 });
    const target = pay(authority, action);
    if (target === null)
      return new Response("Paid. (The customer closed the tab: no callback.)", { headers: { "content-type": "text/plain" } });
    return new Response(null, { status: 302, headers: { location: target } });
  }

  const api: Record<string, (path: string, body: Record<string, unknown>) => Response | Promise<Response>> = {
    "/pg/v4/payment/request.json": paymentRequest,
    "/pg/v4/payment/verify.json": verify,
    "/pg/v4/payment/inquiry.json": inquiry,
    "/pg/v4/payment/unVerified.json": unverified,
    "/pg/v4/payment/reverse.json": reverse,
  };

  const server = Bun.serve({
    port: options.port ?? 0,
    hostname: options.hostname ?? "127.0.0.1",
    idleTimeout: 0,
    async fetch(request) {
      const url = new URL(request.url);
      const path = url.pathname;
      const handler = api[path];
      if (handler && request.method === "POST") {
        const body = await readBody(request);
        if (!body) return error(path, null, -9, [{ body: "The body must be a JSON object." }]);
        return handler(path, body);
      }
      const start = /^\/pg\/StartPay\/([A-Za-z0-9]{1,64})(?:\/([a-z-]{1,32}))?$/.exec(path);
      if (start) {
        if (request.method === "POST" && start[2]) return bankAction(start[1]!, start[2], path);
        const payment = payments.get(start[1]!);
        record(path, null, null);
        return payment ? bankPage(payment) : new Response("unknown authority", { status: 404 });
      }
      if (path === "/__sim/log") return Response.json(log);
      if (path === "/__sim/faults" && request.method === "POST") {
        const body = (await readBody(request)) ?? {};
        const current = faults as unknown as Record<string, unknown>;
        for (const [key, value] of Object.entries(body)) {
          // Only known faults, each with its own type (a code may also be cleared with null).
          const known = Object.hasOwn(current, key);
          const fits =
            typeof value === typeof current[key] ||
            (value === null && key.endsWith("Code")) ||
            (typeof value === "number" && key.endsWith("Code"));
          if (!known || !fits) return Response.json({ error: `unknown fault or wrong type: ${key}` }, { status: 400 });
        }
        Object.assign(faults, body);
        return Response.json(faults);
      }
      return new Response("not found", { status: 404 });
    },
  });

  return {
    url: `http://${server.hostname}:${server.port}`,
    port: server.port!,
    faults,
    log,
    pay,
    status: (authority) => payments.get(authority)?.status ?? null,
    stop: async () => {
      await server.stop(true);
    },
  };
}
