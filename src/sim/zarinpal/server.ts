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

async function readBody(request: Request): Promise<Record<string, unknown> | null> {
  const text = await request.text();
  if (text.length > SIM_BODY_BYTES_MAX) return null;
  try {
    const value = JSON.parse(text) as unknown;
    return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

function newAuthority(): string {
  const digits = Array.from(crypto.getRandomValues(new Uint8Array(35)), (b) => String(b % 10)).join("");
  return `A${digits}`;
}

function callbackFor(payment: Payment, status: "OK" | "NOK"): string {
  const url = new URL(payment.callbackUrl);
  url.searchParams.set("Authority", payment.authority);
  url.searchParams.set("Status", status);
  return url.toString();
}

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** The bank's state and its API: payments by authority, what it received, the faults it is told to make. */
class ZarinpalBank {
  readonly payments = new Map<string, Payment>();
  private readonly verifying = new Set<string>();
  readonly log: SimPayLogEntry[] = [];
  readonly faults = noFaults();
  private nextRefId = 100_000_000 + Math.floor(Math.random() * 1_000_000);

  constructor(private readonly options: SimPayOptions) {}

  private code(n: number): number | string {
    return this.options.codesAsStrings ? String(n) : n;
  }

  record(path: string, body: Record<string, unknown> | null, answered: number | null): void {
    this.log.push({ at: new Date().toISOString(), path, body, code: answered });
    if (this.log.length > SIM_LOG_ENTRIES_MAX) this.log.shift();
  }

  private ok(path: string, body: Record<string, unknown> | null, data: Record<string, unknown>): Response {
    this.record(path, body, Number(data.code));
    return Response.json({ data: { ...data, code: this.code(Number(data.code)) }, errors: [] });
  }

  error(path: string, body: Record<string, unknown> | null, err: number, validations: Record<string, string>[] = []): Response {
    this.record(path, body, err);
    const message = SIM_ERRORS[String(err) as SimErrorCode] ?? "Unknown error";
    const status = err === -9 ? 422 : err === -10 || err === -11 ? 401 : err === -12 ? 429 : 200;
    return Response.json({ data: [], errors: { code: this.code(err), message, validations } }, { status });
  }

  private merchantError(merchantId: unknown): number | null {
    if (typeof merchantId !== "string" || !UUID.test(merchantId)) return -9;
    if (this.options.merchantIds && !this.options.merchantIds.includes(merchantId)) return -10;
    return null;
  }

  private paymentRequest(path: string, body: Record<string, unknown>): Response {
    const merchant = this.merchantError(body.merchant_id);
    if (merchant !== null)
      return this.error(path, body, merchant, merchant === -9 ? [{ merchant_id: "The merchant id must be 36 characters." }] : []);
    if (this.faults.requestCode !== null) {
      const forced = this.faults.requestCode;
      this.faults.requestCode = null;
      return this.error(path, body, forced);
    }
    const irt = body.currency === "IRT";
    const amount = typeof body.amount === "string" ? Number(body.amount) : body.amount;
    if (typeof amount !== "number" || !Number.isSafeInteger(amount))
      return this.error(path, body, -9, [{ amount: "The amount must be a whole number." }]);
    const amountRial = irt ? amount * 10 : amount;
    if (amountRial < SIM_AMOUNT_RIAL_MIN) return this.error(path, body, -9, [{ amount: "The amount must be at least 10000 rial." }]);
    if (typeof body.callback_url !== "string" || !/^https?:\/\//.test(body.callback_url)) {
      return this.error(path, body, -9, [{ callback_url: "The callback url must be an http(s) URL." }]);
    }
    if (typeof body.description !== "string" || body.description.length === 0)
      return this.error(path, body, -9, [{ description: "The description is required." }]);
    if (this.payments.size >= SIM_PAYMENTS_MAX) return this.error(path, body, -12);
    const metadata = (typeof body.metadata === "object" && body.metadata !== null ? body.metadata : {}) as Record<string, unknown>;
    const authority = newAuthority();
    // The merchant pays the fee: 1% up to 40,000 rial (shown, never taken from the customer's amount here).
    const feeRial = Math.min(Math.ceil(amountRial / 100), 40_000);
    this.payments.set(authority, {
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
    return this.ok(path, body, { code: 100, message: "Success", authority, fee_type: "Merchant", fee: feeRial });
  }

  /** Looks the authority up for a merchant: −54 unknown, −53 another merchant's. */
  private owned(body: Record<string, unknown>): Payment | number {
    const merchant = this.merchantError(body.merchant_id);
    if (merchant !== null) return merchant;
    const payment = typeof body.authority === "string" ? this.payments.get(body.authority) : undefined;
    if (!payment) return -54;
    if (payment.merchantId !== body.merchant_id) return -53;
    return payment;
  }

  private async verify(path: string, body: Record<string, unknown>): Promise<Response> {
    const answer = await this.verifyOnce(path, body);
    if (answer !== "dropped") return answer;
    // Committed, but the reply never reaches the merchant: hold the connection, then close it.
    await Bun.sleep(SIM_DROPPED_REPLY_HOLD_MS);
    return new Response(null, { status: 504 });
  }

  /** One verify, with at most one in flight per authority (the real service answers −12 to more). */
  private async verifyOnce(path: string, body: Record<string, unknown>): Promise<Response | "dropped"> {
    const payment = this.owned(body);
    if (typeof payment === "number") return this.error(path, body, payment);
    if (this.verifying.has(payment.authority)) return this.error(path, body, -12);
    this.verifying.add(payment.authority);
    try {
      if (this.faults.verifyDelayMs > 0) await Bun.sleep(this.faults.verifyDelayMs);
      if (this.faults.verifyCode !== null) {
        const forced = this.faults.verifyCode;
        this.faults.verifyCode = null;
        return this.error(path, body, forced);
      }
      const amount = typeof body.amount === "string" ? Number(body.amount) : body.amount;
      if (payment.status !== "PAID" && payment.status !== "VERIFIED") return this.error(path, body, -51);
      if (amount !== payment.amountRial) return this.error(path, body, -50);
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
      if (this.faults.dropVerifyReplies > 0) {
        this.faults.dropVerifyReplies--;
        this.record(path, body, data.code);
        return "dropped";
      }
      return this.ok(path, body, data);
    } finally {
      this.verifying.delete(payment.authority);
    }
  }

  private inquiry(path: string, body: Record<string, unknown>): Response {
    const payment = this.owned(body);
    if (typeof payment === "number") return this.error(path, body, payment);
    const status = payment.status === "NEW" ? "IN_BANK" : payment.status;
    return this.ok(path, body, { code: 100, message: "Success", status });
  }

  private unverified(path: string, body: Record<string, unknown>): Response {
    const merchant = this.merchantError(body.merchant_id);
    if (merchant !== null) return this.error(path, body, merchant);
    const authorities = [...this.payments.values()]
      .filter((p) => p.merchantId === body.merchant_id && p.status === "PAID")
      .slice(-SIM_UNVERIFIED_MAX)
      .map((p) => ({
        authority: p.authority,
        amount: p.amountRial,
        callback_url: p.callbackUrl,
        referer: "",
        date: p.paidAt!.toISOString().slice(0, 19).replace("T", " "),
      }));
    return this.ok(path, body, { code: 100, message: "Success", authorities });
  }

  private reverse(path: string, body: Record<string, unknown>): Response {
    const payment = this.owned(body);
    if (typeof payment === "number") return this.error(path, body, payment);
    if (payment.status !== "PAID" && payment.status !== "VERIFIED") return this.error(path, body, -51);
    if (Date.now() - payment.paidAt!.getTime() > SIM_REVERSE_WINDOW_MS)
      return this.error(path, body, -9, [{ authority: "Reverse is possible within 30 minutes of payment." }]);
    payment.status = "REVERSED";
    return this.ok(path, body, { code: 100, message: "Reversed" });
  }

  pay(authority: string, action: "pay" | "cancel" | "pay-silently" = "pay"): string | null {
    const payment = this.payments.get(authority);
    if (!payment) throw new Error(`no payment ${authority}`);
    if (payment.status !== "NEW" && payment.status !== "IN_BANK") return callbackFor(payment, payment.status === "FAILED" ? "NOK" : "OK");
    if (action === "cancel") {
      payment.status = "FAILED";
      return callbackFor(payment, "NOK");
    }
    payment.status = "PAID";
    payment.paidAt = new Date();
    payment.refId = this.faults.repeatRefId ? this.nextRefId - 1 : this.nextRefId++;
    this.faults.repeatRefId = false;
    const last4 = String(1000 + (payment.refId % 9000));
    payment.cardPan = `502229******${last4}`;
    payment.cardHash = new Bun.CryptoHasher("sha256").update(`card-${last4}`).digest("hex").toUpperCase();
    return action === "pay-silently" || this.faults.callbackNeverSent ? null : callbackFor(payment, "OK");
  }

  bankPage(payment: Payment): Response {
    const rial = payment.amountRial.toLocaleString("en-US");
    const button = (action: string, label: string) =>
      `<form method="post" action="/pg/StartPay/${payment.authority}/${action}"><button name="action" value="${action}">${label}</button></form>`;
    const html = `<!doctype html><html><head><meta charset="utf-8"><title>Zarinpal simulator</title></head><body>
<h1>Zarinpal simulator</h1>
<p>${escapeHtml(payment.description)}</p>
<p>Amount: <strong>${rial} rial</strong> (${(payment.amountRial / 10).toLocaleString("en-US")} toman)</p>
${button("pay", "Pay")}${button("cancel", "Cancel")}${button("pay-silently", "Pay, then close the tab (no redirect)")}${button("pay-delayed", `Pay, redirect after ${this.options.delayedRedirectS ?? 5} s`)}
</body></html>`;
    if (payment.status === "NEW") payment.status = "IN_BANK";
    return new Response(html, { headers: { "content-type": "text/html; charset=utf-8" } });
  }

  bankAction(authority: string, action: string, path: string): Response {
    const payment = this.payments.get(authority);
    if (!payment) return new Response("unknown authority", { status: 404 });
    this.record(path, { authority, action }, null);
    if (action === "pay-delayed") {
      const target = this.pay(authority, "pay");
      if (target === null) return new Response("Paid.", { headers: { "content-type": "text/plain" } });
      const seconds = this.options.delayedRedirectS ?? 5;
      const html = `<!doctype html><html><head><meta http-equiv="refresh" content="${seconds};url=${escapeHtml(target)}"></head><body><p>Paid. Returning to the merchant in ${seconds} s…</p></body></html>`;
      return new Response(html, { headers: { "content-type": "text/html; charset=utf-8" } });
    }
    if (action !== "pay" && action !== "cancel" && action !== "pay-silently") return new Response("unknown action", { status: 404 });
    const target = this.pay(authority, action);
    if (target === null)
      return new Response("Paid. (The customer closed the tab: no callback.)", { headers: { "content-type": "text/plain" } });
    return new Response(null, { status: 302, headers: { location: target } });
  }

  /** The merchant API, by path. */
  readonly api: Record<string, (path: string, body: Record<string, unknown>) => Response | Promise<Response>> = {
    "/pg/v4/payment/request.json": (path, body) => this.paymentRequest(path, body),
    "/pg/v4/payment/verify.json": (path, body) => this.verify(path, body),
    "/pg/v4/payment/inquiry.json": (path, body) => this.inquiry(path, body),
    "/pg/v4/payment/unVerified.json": (path, body) => this.unverified(path, body),
    "/pg/v4/payment/reverse.json": (path, body) => this.reverse(path, body),
  };

  /** Sets faults from a test's JSON: only known faults, each with its own type (a code may also be cleared with null). */
  setFaults(body: Record<string, unknown>): Response {
    const current = this.faults as unknown as Record<string, unknown>;
    for (const [key, value] of Object.entries(body)) {
      const known = Object.hasOwn(current, key);
      const fits =
        typeof value === typeof current[key] ||
        (value === null && key.endsWith("Code")) ||
        (typeof value === "number" && key.endsWith("Code"));
      if (!known || !fits) return Response.json({ error: `unknown fault or wrong type: ${key}` }, { status: 400 });
    }
    Object.assign(this.faults, body);
    return Response.json(this.faults);
  }
}

export async function startZarinpalSim(options: SimPayOptions = {}): Promise<ZarinpalSim> {
  const bank = new ZarinpalBank(options);
  const server = Bun.serve({
    port: options.port ?? 0,
    hostname: options.hostname ?? "127.0.0.1",
    idleTimeout: 0,
    async fetch(request) {
      const url = new URL(request.url);
      const path = url.pathname;
      const handler = bank.api[path];
      if (handler && request.method === "POST") {
        const body = await readBody(request);
        if (!body) return bank.error(path, null, -9, [{ body: "The body must be a JSON object." }]);
        return handler(path, body);
      }
      const start = /^\/pg\/StartPay\/([A-Za-z0-9]{1,64})(?:\/([a-z-]{1,32}))?$/.exec(path);
      if (start) {
        if (request.method === "POST" && start[2]) return bank.bankAction(start[1]!, start[2], path);
        const payment = bank.payments.get(start[1]!);
        bank.record(path, null, null);
        return payment ? bank.bankPage(payment) : new Response("unknown authority", { status: 404 });
      }
      if (path === "/__sim/log") return Response.json(bank.log);
      if (path === "/__sim/faults" && request.method === "POST") return bank.setFaults((await readBody(request)) ?? {});
      return new Response("not found", { status: 404 });
    },
  });

  return {
    url: `http://${server.hostname}:${server.port}`,
    port: server.port!,
    faults: bank.faults,
    log: bank.log,
    pay: (authority, action) => bank.pay(authority, action),
    status: (authority) => bank.payments.get(authority)?.status ?? null,
    stop: async () => {
      await server.stop(true);
    },
  };
}
