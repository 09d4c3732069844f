/**
 * Strangers against payments: a customer's 30 top-ups in a row stop at the pending cap (429 in the
 * console API's shape, Zarinpal asked only for the ones allowed), and so do several accounts from
 * one address; forged callbacks (`Status=OK` before the customer pays) repeated 11 times cost one
 * verify attempt, and the payer's own callback is verified and credited once; the reconciler takes
 * stale top-ups in turns across accounts, so one account's flood does not crowd out another's.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import { RECONCILE_PER_ACCOUNT_MAX } from "../src/payments/reconciler.ts";
import { CALLBACK_ATTEMPTS_MAX, TOPUPS_PENDING_PER_ACCOUNT_MAX, TOPUPS_PENDING_PER_ADDRESS_MAX } from "../src/payments/topups.ts";
import { startSmsSimulator, type SmsSimulator } from "../src/sim/sms.ts";
import { startZarinpalSim, type ZarinpalSim } from "../src/sim/zarinpal/server.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway, topupAskDue } from "./helpers.ts";
import { peerRequest } from "./peer.ts";

const SMS_KEY = "sim-kavenegar-key";
const TEMPLATE = "darvaze-otp";
const MERCHANT = "1344b5d4-0048-11e8-94db-005056a205be";
const ASK_INTERVAL_MS = 500;

let sms: SmsSimulator;
let zarinpal: ZarinpalSim;
let t: TestGateway;

beforeAll(async () => {
  sms = await startSmsSimulator({ apiKey: SMS_KEY, template: TEMPLATE });
  zarinpal = await startZarinpalSim({ merchantIds: [MERCHANT] });
  t = await startTestGateway({
    SMS_SENDER: "kavenegar",
    KAVENEGAR_API_KEY: SMS_KEY,
    KAVENEGAR_TEMPLATE: TEMPLATE,
    KAVENEGAR_URL: sms.url,
    ZARINPAL_MERCHANT_ID: MERCHANT,
    ZARINPAL_BASE_URL: zarinpal.url,
    RECONCILE_INTERVAL_MS: "0",
    PAYMENT_STALE_MS: "0",
    PAYMENT_ASK_INTERVAL_MS: String(ASK_INTERVAL_MS),
  });
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  await sms?.stop();
  await zarinpal?.stop();
}, SETUP_MS_MAX);

interface Browser {
  from: string;
  cookie: string;
  csrf: string;
}

/** A customer signed in from `from` (a loopback source address). */
async function customer(from: string, national: string): Promise<Browser> {
  const origin = new URL(t.url).origin;
  const sent = await peerRequest(`${t.url}/console/api/otp`, { from, method: "POST", headers: { origin }, body: { phone: national } });
  expect(sent.status).toBe(202);
  const signed = await peerRequest(`${t.url}/console/api/sign-in`, {
    from,
    method: "POST",
    headers: { origin },
    body: { phone: national, code_id: sent.body.code_id, code: sms.lastCode(national) },
  });
  expect(signed.status).toBe(200);
  return { from, cookie: signed.cookies.find((c) => c.startsWith("dvz_session="))!, csrf: signed.body.csrf_token };
}

const topUp = (b: Browser) =>
  peerRequest(`${t.url}/console/api/topups`, {
    from: b.from,
    method: "POST",
    headers: { origin: new URL(t.url).origin, cookie: b.cookie, "x-csrf-token": b.csrf },
    body: { amount_toman: 20_000 },
  });

const requestsToZarinpal = () => zarinpal.log.filter((e) => e.path === "/pg/v4/payment/request.json").length;

test("30 top-ups in a row stop at the pending cap per account, then per address; 429 in the console API's shape", async () => {
  const a = await customer("127.5.0.1", "09120000501");
  const asked = requestsToZarinpal();
  const replies = [];
  for (let i = 0; i < 30; i++) replies.push(await topUp(a));
  expect(replies.filter((r) => r.status === 201).length).toBe(TOPUPS_PENDING_PER_ACCOUNT_MAX);
  expect(replies.slice(0, TOPUPS_PENDING_PER_ACCOUNT_MAX).every((r) => r.status === 201)).toBe(true);
  const refused = replies.at(-1)!;
  expect(refused.status).toBe(429);
  expect(refused.body).toEqual({
    error: {
      message: expect.stringContaining("waiting for payment"),
      type: "rate_limit_error",
      param: "amount_toman",
      code: "rate_limit_exceeded",
    },
  });
  expect(Number(refused.headers["retry-after"])).toBeGreaterThan(0);
  expect(requestsToZarinpal() - asked).toBe(TOPUPS_PENDING_PER_ACCOUNT_MAX);

  // Other accounts from the same address share its cap; another address has its own.
  const b = await customer("127.5.0.1", "09120000502");
  const c = await customer("127.5.0.1", "09120000503");
  let fromAddress = TOPUPS_PENDING_PER_ACCOUNT_MAX;
  for (const other of [b, c]) {
    for (let i = 0; i < TOPUPS_PENDING_PER_ACCOUNT_MAX; i++) if ((await topUp(other)).status === 201) fromAddress++;
  }
  expect(fromAddress).toBe(TOPUPS_PENDING_PER_ADDRESS_MAX);
  const capped = await topUp(c);
  expect(capped.status).toBe(429);
  expect(capped.body.error.message).toContain("your network");
  expect((await topUp(await customer("127.5.1.1", "09120000504"))).status).toBe(201);
});

test("11 forged callbacks at once before the payment cost one verify and no attempt; the payer's callback is verified and credited once", async () => {
  const account = (await t.admin("POST", "/admin/accounts", { name: "payer" })).body.id as string;
  const started = (await t.admin("POST", "/admin/topups", { account_id: account, amount_toman: 40_000 })).body;
  const callback = `${t.url}/pay/zarinpal/callback?Authority=${started.authority}&Status=OK`;
  const forged = await Promise.all(Array.from({ length: CALLBACK_ATTEMPTS_MAX + 1 }, () => fetch(callback, { redirect: "manual" })));
  expect(forged.every((r) => r.status === 303)).toBe(true);
  // Each gets the answer the top-up had when it came: not paid, or a verify still in flight.
  const outcomes = forged.map((r) => new URL(r.headers.get("location")!).searchParams.get("outcome"));
  expect(outcomes.every((o) => o === "failed" || o === "pending")).toBe(true);
  expect(outcomes).toContain("failed");
  const verifies = () => zarinpal.log.filter((e) => e.path === "/pg/v4/payment/verify.json" && e.body?.authority === started.authority);
  // At most one verify an interval: those that came within one of a "not paid" waited for the next and took its answer.
  expect(verifies().length).toBeLessThanOrEqual(2);
  expect((await t.admin("GET", `/admin/topups/${started.id}`)).body.attempts).toBe(0);

  // The customer pays; the bank sends them back once the interval since the last ask has passed.
  const bank = await fetch(`${zarinpal.url}/pg/StartPay/${started.authority}/pay`, { method: "POST", redirect: "manual" });
  expect(bank.headers.get("location")).toBe(callback);
  await topupAskDue(t, started.id, ASK_INTERVAL_MS);
  const paid = await fetch(callback, { redirect: "manual" });
  expect(new URL(paid.headers.get("location")!).searchParams.get("outcome")).toBe("verified");
  expect((await fetch(callback, { redirect: "manual" })).status).toBe(303);
  const credits = await t.gw.deps.db.rows<{ amount_micro: string }>(
    sql`SELECT amount_micro::text FROM ledger_transfers WHERE reference = ${`topup:pay:${started.id}`}`,
  );
  expect(credits.map((c) => c.amount_micro)).toEqual(["40000000000"]);
  expect((await t.admin("GET", `/admin/accounts/${account}`)).body.balance_micro_toman).toBe("40000000000");
});

test("a patient forger, one callback per interval for more intervals than there are attempts, still leaves the payer's callback its verify, even right after a forged one", async () => {
  const account = (await t.admin("POST", "/admin/accounts", { name: "patient" })).body.id as string;
  const started = (await t.admin("POST", "/admin/topups", { account_id: account, amount_toman: 30_000 })).body;
  const callback = `${t.url}/pay/zarinpal/callback?Authority=${started.authority}&Status=OK`;
  const verifies = () => zarinpal.log.filter((e) => e.path === "/pg/v4/payment/verify.json" && e.body?.authority === started.authority);
  for (let i = 0; i <= CALLBACK_ATTEMPTS_MAX; i++) {
    await topupAskDue(t, started.id, ASK_INTERVAL_MS);
    const forged = await fetch(callback, { redirect: "manual" });
    expect(new URL(forged.headers.get("location")!).searchParams.get("outcome")).toBe("failed");
  }
  // Each forged callback was a verify Zarinpal answered "not paid": none of them spent an attempt.
  expect(verifies().length).toBe(CALLBACK_ATTEMPTS_MAX + 1);
  expect((await t.admin("GET", `/admin/topups/${started.id}`)).body.attempts).toBe(0);
  // One more forged callback, then the customer pays and comes back inside the same interval.
  await topupAskDue(t, started.id, ASK_INTERVAL_MS);
  await fetch(callback, { redirect: "manual" });
  await fetch(`${zarinpal.url}/pg/StartPay/${started.authority}/pay`, { method: "POST", redirect: "manual" });
  const paid = await fetch(callback, { redirect: "manual" });
  expect(new URL(paid.headers.get("location")!).searchParams.get("outcome")).toBe("verified");
  expect((await t.admin("GET", `/admin/accounts/${account}`)).body.balance_micro_toman).toBe("30000000000");
});

test("the reconciler takes stale top-ups in turns across accounts: one account's flood leaves room for another's", async () => {
  const flooder = (await t.admin("POST", "/admin/accounts", { name: "flood" })).body.id as string;
  const other = (await t.admin("POST", "/admin/accounts", { name: "lost callback" })).body.id as string;
  for (let i = 0; i < 3 * RECONCILE_PER_ACCOUNT_MAX; i++)
    await t.admin("POST", "/admin/topups", { account_id: flooder, amount_toman: 20_000 });
  const lost = (await t.admin("POST", "/admin/topups", { account_id: other, amount_toman: 20_000 })).body.id as string;
  // As many as there are accounts with stale top-ups: the first turn, one of each account's.
  const accounts = new Set((await t.gw.payments!.topups.stale(0, 1_000, 1)).map((row) => row.accountId)).size;
  const batch = await t.gw.payments!.topups.stale(0, accounts, RECONCILE_PER_ACCOUNT_MAX);
  expect(batch.map((row) => row.id)).toContain(lost);
  const perAccount = new Map<string, number>();
  for (const row of await t.gw.payments!.topups.stale(0, 1_000, RECONCILE_PER_ACCOUNT_MAX))
    perAccount.set(row.accountId, (perAccount.get(row.accountId) ?? 0) + 1);
  expect(perAccount.get(flooder)).toBe(RECONCILE_PER_ACCOUNT_MAX);
  expect(Math.max(...perAccount.values())).toBe(RECONCILE_PER_ACCOUNT_MAX);
});
