/**
 * Low-balance alerts end to end: the customer's threshold set in the account area and by the admin
 * API, one SMS (the SMS simulator's log) for the request whose settlement crosses it, none for a
 * later request below it, and the overview's banner flag until a top-up lifts the balance again.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import OpenAI from "openai";
import { ALERT_TEMPLATE_DEFAULT } from "../src/accountArea/sms.ts";
import { startSmsSimulator, type SmsSimulator } from "../src/sim/sms.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { until } from "./until.ts";

const SMS_KEY = "sim-kavenegar-key";
const TEMPLATE = "darvaze-otp";
const PHONE = "09120004401";

let sms: SmsSimulator;
let t: TestGateway;
let origin: string;

beforeAll(async () => {
  sms = await startSmsSimulator({ apiKey: SMS_KEY, template: TEMPLATE });
  t = await startTestGateway({ SMS_SENDER: "kavenegar", KAVENEGAR_API_KEY: SMS_KEY, KAVENEGAR_TEMPLATE: TEMPLATE, KAVENEGAR_URL: sms.url });
  origin = new URL(t.url).origin;
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  await sms?.stop();
}, SETUP_MS_MAX);

const browser = { cookie: "", csrf: "" };

async function call(method: string, path: string, body?: unknown) {
  const response = await fetch(`${t.url}${path}`, {
    method,
    headers: {
      origin,
      "sec-fetch-site": "same-origin",
      "content-type": "application/json",
      cookie: browser.cookie,
      "x-csrf-token": browser.csrf,
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const setCookie = response.headers.get("set-cookie");
  if (setCookie) browser.cookie = setCookie.split(";")[0]!;
  return { status: response.status, body: (await response.json()) as any };
}

const alertsTo = (receptor: string) => sms.sent.filter((m) => m.template === ALERT_TEMPLATE_DEFAULT && m.receptor === receptor);

test("crossing the threshold sends one SMS and raises the banner until a top-up lifts the balance", async () => {
  const sent = await call("POST", "/console/api/otp", { phone: PHONE });
  const signed = await call("POST", "/console/api/sign-in", { phone: PHONE, code_id: sent.body.code_id, code: sms.lastCode(PHONE) });
  expect(signed.status).toBe(200);
  browser.csrf = signed.body.csrf_token;
  const accountId = signed.body.account_id;
  await t.admin("POST", `/admin/accounts/${accountId}/topups`, { amount_toman: 100_000, reference: "alert-1" });

  expect((await call("PUT", "/console/api/alert", { low_balance_threshold_toman: 0 })).body.error.param).toBe(
    "low_balance_threshold_toman",
  );
  const set = await call("PUT", "/console/api/alert", { low_balance_threshold_toman: 100_000 });
  expect(set.body).toMatchObject({ object: "alert", low_balance_threshold_toman: "100000", balance_alert: false });
  expect((await t.admin("GET", `/admin/accounts/${accountId}`)).body.low_balance_threshold_toman).toBe("100000");

  const created = await call("POST", "/console/api/keys", { name: "alerts" });
  const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: created.body.key, maxRetries: 0 });
  const ask = () => client.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }], max_tokens: 3 });

  await ask(); // 100,000 → just under: the crossing
  await until(() => alertsTo(PHONE).length === 1);
  expect(alertsTo(PHONE)[0]!.token).toBe("99999");
  expect((await call("GET", "/console/api/overview")).body).toMatchObject({ balance_alert: true, low_balance_threshold_toman: "100000" });

  await ask(); // already below: no crossing
  await until(async () => (await call("GET", "/console/api/usage")).body.totals.requests === 2, 15_000);
  const ran = await t.admin("GET", `/admin/accounts/${accountId}`);
  expect(ran.body.recent_usage).toHaveLength(2);
  // The second settlement wrote no alert: nothing is left for any node to send.
  const alerts = await t.gw.deps.db.rows<{ status: string }>(sql`SELECT status FROM balance_alerts WHERE account_id = ${accountId}`);
  expect(alerts.map((a) => a.status)).toEqual(["sent"]);
  expect(alertsTo(PHONE)).toHaveLength(1);

  await t.admin("POST", `/admin/accounts/${accountId}/topups`, { amount_toman: 10, reference: "alert-2" });
  expect((await call("GET", "/console/api/overview")).body.balance_alert).toBe(false);
});

test("the admin API sets and clears an account's threshold; an unknown account is 404", async () => {
  const account = (await t.admin("POST", "/admin/accounts", { name: "alerted" })).body;
  const set = await t.admin("PATCH", `/admin/accounts/${account.id}`, { low_balance_threshold_toman: "2500.5" });
  expect(set.body).toMatchObject({ id: account.id, object: "account", low_balance_threshold_toman: "2500.5" });
  const cleared = await t.admin("PATCH", `/admin/accounts/${account.id}`, { low_balance_threshold_toman: null });
  expect(cleared.body.low_balance_threshold_toman).toBeNull();
  expect((await t.admin("PATCH", "/admin/accounts/acct_none", { low_balance_threshold_toman: 5 })).status).toBe(404);
});
