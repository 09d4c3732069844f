/**
 * The account area's API, called directly as a browser would (Origin, cookie, CSRF token): sign-in
 * by code through the Kavenegar-speaking SMS simulator, refusals (cross-site including another
 * port, no session, another account's ids, a code after 5 wrong tries, resend limits), keys
 * refused before funding, key expiry, usage and its CSV export, check status within the callback's
 * attempt cap, a batch's cancel (the account's own only, with the CSRF token).
 */
import { afterAll, beforeAll, describe, expect, setSystemTime, test } from "bun:test";
import OpenAI, { toFile } from "openai";
import { OTP_SENDS_PER_ADDRESS_PER_HOUR_MAX, OTP_TRIES_MAX } from "../src/accountArea/otp.ts";
import { TRIES_LEFT_HEADER } from "../src/http/console/route.ts";
import { CALLBACK_ATTEMPTS_MAX } from "../src/payments/topups.ts";
import { startSmsSimulator, type SmsSimulator } from "../src/sim/sms.ts";
import { startZarinpalSim, type ZarinpalSim } from "../src/sim/zarinpal/server.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway, topupAskDue, until } from "./helpers.ts";

const SMS_KEY = "sim-kavenegar-key";
const TEMPLATE = "darvaze-otp";
const MERCHANT = "1344b5d4-0048-11e8-94db-005056a205be";
const ASK_INTERVAL_MS = 100;

let sms: SmsSimulator;
let zarinpal: ZarinpalSim;
let t: TestGateway;
let origin: string;

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
    PAYMENT_ASK_INTERVAL_MS: String(ASK_INTERVAL_MS),
  });
  origin = new URL(t.url).origin;
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  await sms?.stop();
}, SETUP_MS_MAX);

interface Browser {
  cookie: string | null;
  csrf: string | null;
}

async function call(b: Browser | null, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
  const response = await fetch(`${t.url}${path}`, {
    method,
    headers: {
      origin,
      "sec-fetch-site": "same-origin",
      ...(body !== undefined ? { "content-type": "application/json" } : {}),
      ...(b?.cookie ? { cookie: b.cookie } : {}),
      ...(b?.csrf ? { "x-csrf-token": b.csrf } : {}),
      ...headers,
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const setCookie = response.headers.getSetCookie().find((c) => c.startsWith("dvz_session="));
  if (b && setCookie) b.cookie = setCookie.split(";")[0]!;
  const text = await response.text();
  let parsed: any = text;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: response.status, body: parsed, headers: response.headers };
}

async function signIn(national: string): Promise<Browser> {
  const b: Browser = { cookie: null, csrf: null };
  const sent = await call(b, "POST", "/console/api/otp", { phone: national });
  expect(sent.status).toBe(202);
  const code = sms.lastCode(national)!;
  expect(code).toMatch(/^\d{6}$/);
  const signed = await call(b, "POST", "/console/api/sign-in", { phone: national, code_id: sent.body.code_id, code });
  expect(signed.status).toBe(200);
  b.csrf = signed.body.csrf_token;
  return b;
}

/** A browser signed in to the account without a code (the session made as sign-in makes it). */
async function sessionOf(accountId: string): Promise<Browser> {
  const created = await t.gw.console.sessions.create(accountId, { userAgent: "test", clientAddress: "127.0.0.1" });
  return { cookie: `dvz_session=${created.token}`, csrf: t.gw.console.sessions.csrfToken(created.id) };
}

/** Waits until the account's usage shows `requests` requests: records are written within the durability bound (a stream and a consumer with NATS). */
async function usageWritten(b: Browser, requests: number): Promise<void> {
  await until(async () => (await call(b, "GET", "/console/api/usage")).body.totals.requests >= requests, {
    msMax: 15_000,
    what: `the usage showing ${requests} requests`,
    pollMs: 100,
  });
}

const askDue = (topupId: string) => topupAskDue(t, topupId, ASK_INTERVAL_MS);

const persian = (ascii: string) => ascii.replace(/\d/g, (d) => "۰۱۲۳۴۵۶۷۸۹"[Number(d)]!);

describe("console API", () => {
  test("sign-in with a code typed in Persian digits creates the account and a session cookie", async () => {
    const b: Browser = { cookie: null, csrf: null };
    const sent = await call(b, "POST", "/console/api/otp", { phone: "+98 912 000 0001" });
    expect(sent.status).toBe(202);
    const codeId = sent.body.code_id;
    const code = sms.lastCode("09120000001")!;
    const signed = await call(b, "POST", "/console/api/sign-in", { phone: persian("09120000001"), code_id: codeId, code: persian(code) });
    expect(signed.status).toBe(200);
    expect(signed.body.phone).toBe("+989120000001");
    const [sessionSet, deviceSet] = signed.headers.getSetCookie();
    expect(sessionSet).toMatch(/^dvz_session=\w{43}; Path=\/; HttpOnly; SameSite=Lax; Max-Age=\d+$/);
    expect(deviceSet).toMatch(/^dvz_device=[\w.-]+; Path=\/; HttpOnly; SameSite=Lax; Max-Age=\d+$/);
    b.csrf = signed.body.csrf_token;
    const session = await call(b, "GET", "/console/api/session");
    expect(session.body.account_id).toBe(signed.body.account_id);
    // The same code again: used up.
    expect((await call(null, "POST", "/console/api/sign-in", { phone: "09120000001", code_id: codeId, code })).body.error.code).toBe(
      "code_expired",
    );
    // Signing in again from this browser makes a new session and ends the one it came with.
    const oldCookie = b.cookie;
    const resent = await call(b, "POST", "/console/api/otp", { phone: "09120000011" });
    const again = await call(b, "POST", "/console/api/sign-in", {
      phone: "09120000011",
      code_id: resent.body.code_id,
      code: sms.lastCode("09120000011"),
    });
    expect(again.body.session_id).not.toBe(signed.body.session_id);
    expect(b.cookie).not.toBe(oldCookie);
    expect((await call({ cookie: oldCookie, csrf: null }, "GET", "/console/api/session")).status).toBe(401);
  });

  test("top-up through Zarinpal: the payment page, then check status of a payment whose customer never came back", async () => {
    const b = await signIn("09120000012");
    const started = await call(b, "POST", "/console/api/topups", { amount_toman: 50_000 });
    expect(started.status).toBe(201);
    expect(started.body.payment_url).toStartWith(`${zarinpal.url}/pg/StartPay/`);
    const pending = await call(b, "GET", `/console/api/topups/${started.body.id}`);
    expect(pending.body).toMatchObject({ state: "redirected", pending: true, ref_id: null, amount_micro_toman: "50000000000" });
    // The customer pays and closes the tab: no callback ever arrives.
    const bank = await fetch(`${started.body.payment_url}/pay-silently`, { method: "POST", redirect: "manual" });
    expect(bank.status).toBeLessThan(500);
    const checked = await call(b, "POST", `/console/api/topups/${started.body.id}/check`);
    expect(checked.body).toMatchObject({ state: "verified", pending: false });
    expect(checked.body.ref_id).toMatch(/^\d+$/);
    expect((await call(b, "GET", "/console/api/overview")).body.balance_micro_toman).toBe("50000000000");
    // Checking again credits nothing more.
    await call(b, "POST", `/console/api/topups/${started.body.id}/check`);
    expect((await call(b, "GET", "/console/api/overview")).body.balance_micro_toman).toBe("50000000000");
  });

  test("check status asks Zarinpal at most CALLBACK_ATTEMPTS_MAX times per top-up, then only shows it; the reconciler still credits it", async () => {
    const b = await signIn("09120000013");
    const started = await call(b, "POST", "/console/api/topups", { amount_toman: 50_000 });
    const { id, payment_url } = started.body;
    const authority = String(payment_url).split("/").at(-1);
    const providerCalls = () =>
      zarinpal.log.filter((e) => /\/(inquiry|verify)\.json$/.test(e.path) && e.body?.authority === authority).length;
    // A check within PAYMENT_ASK_INTERVAL_MS of the last one asks nothing.
    expect((await call(b, "POST", `/console/api/topups/${id}/check`)).body).toMatchObject({ state: "redirected", pending: true });
    expect((await call(b, "POST", `/console/api/topups/${id}/check`)).body).toMatchObject({ state: "redirected", pending: true });
    expect(providerCalls()).toBe(1);
    for (let i = 0; i < CALLBACK_ATTEMPTS_MAX + 5; i++) {
      await askDue(id);
      expect((await call(b, "POST", `/console/api/topups/${id}/check`)).body).toMatchObject({ state: "redirected", pending: true });
    }
    expect(providerCalls()).toBe(CALLBACK_ATTEMPTS_MAX);
    // Paid now, with no callback: a check past its attempts does not ask Zarinpal; the reconciler, on Zarinpal's own word, credits it.
    expect((await fetch(`${payment_url}/pay-silently`, { method: "POST", redirect: "manual" })).status).toBeLessThan(500);
    await askDue(id);
    expect((await call(b, "POST", `/console/api/topups/${id}/check`)).body.state).toBe("redirected");
    expect(providerCalls()).toBe(CALLBACK_ATTEMPTS_MAX);
    expect((await t.admin("POST", "/admin/topups/reconcile")).status).toBe(200);
    expect((await call(b, "GET", `/console/api/topups/${id}`)).body.state).toBe("verified");
    expect((await call(b, "GET", "/console/api/overview")).body.balance_micro_toman).toBe("50000000000");
  });

  test("refusals: no session, cross-site (another port too), missing CSRF token", async () => {
    expect((await call(null, "GET", "/console/api/overview")).body.error.code).toBe("session_required");
    const b = await signIn("09120000002");
    const otherPort = `http://127.0.0.1:${Number(new URL(t.url).port) + 1}`;
    const cross = await call(b, "POST", "/console/api/keys", { name: "x" }, { origin: otherPort, "sec-fetch-site": "same-site" });
    expect(cross.status).toBe(403);
    expect(cross.body.error.code).toBe("cross_site_refused");
    expect((await call(b, "GET", "/console/api/keys", undefined, { origin: otherPort, "sec-fetch-site": "same-site" })).status).toBe(403);
    expect((await call({ ...b, csrf: null }, "POST", "/console/api/keys", { name: "x" })).body.error.code).toBe("cross_site_refused");
    expect(
      (
        await call(
          b,
          "POST",
          "/console/api/sign-in",
          { phone: "09120000002", code_id: "otp_x", code: "000000" },
          { origin: "https://evil.example", "sec-fetch-site": "cross-site" },
        )
      ).status,
    ).toBe(403);
  });

  test("batch cancel: the account's own batch only (another's is not found), only with the CSRF token, as POST /v1/batches/{id}/cancel does", async () => {
    // Sessions made directly: the codes this address may ask for this hour are the other tests'.
    const { accountId, key } = await t.fundedKey(100_000);
    const owner = await sessionOf(accountId);
    const stranger = await sessionOf((await t.fundedKey(1)).accountId);
    const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
    t.sim!.options.ttftMs = 500;
    try {
      const lines = Array.from({ length: 20 }, (_, i) =>
        JSON.stringify({
          custom_id: `c${i}`,
          method: "POST",
          url: "/v1/chat/completions",
          body: { model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }], max_tokens: 5 },
        }),
      );
      const file = await client.files.create({ file: await toFile(Buffer.from(`${lines.join("\n")}\n`), "in.jsonl"), purpose: "batch" });
      const batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
      const path = `/console/api/batches/${batch.id}/cancel`;
      const noCsrf = await call({ ...owner, csrf: null }, "POST", path);
      expect([noCsrf.status, noCsrf.body.error.code]).toEqual([403, "cross_site_refused"]);
      const crossSite = await call(owner, "POST", path, undefined, { origin: "https://evil.example", "sec-fetch-site": "cross-site" });
      expect([crossSite.status, crossSite.body.error.code]).toEqual([403, "cross_site_refused"]);
      const theirs = await call(stranger, "POST", path);
      expect([theirs.status, theirs.body.error.code, theirs.body.error.param]).toEqual([404, "not_found", "batch_id"]);
      expect((await call(null, "POST", path)).body.error.code).toBe("session_required");
      // None of those moved it.
      expect(["validating", "in_progress"]).toContain((await client.batches.retrieve(batch.id)).status);
      const cancelled = await call(owner, "POST", path);
      expect(cancelled.status).toBe(200);
      expect(cancelled.body).toMatchObject({ id: batch.id, object: "batch" });
      expect(["cancelling", "cancelled"]).toContain(cancelled.body.status);
      await until(async () => (await client.batches.retrieve(batch.id)).status === "cancelled", {
        msMax: 20_000,
        what: "the batch cancelled",
        pollMs: 200,
      });
      const listed = (await call(owner, "GET", "/console/api/batches")).body.data.find((b: { id: string }) => b.id === batch.id);
      expect(listed.status).toBe("cancelled");
      expect(listed.request_counts.completed + listed.request_counts.failed).toBeLessThan(20);
      // Cancelled already: the same answer as the key's cancel; an unknown id is not found.
      expect((await call(owner, "POST", path)).body.status).toBe("cancelled");
      expect((await client.batches.cancel(batch.id)).status).toBe("cancelled");
      expect((await call(owner, "POST", "/console/api/batches/batch_nope/cancel")).status).toBe(404);
    } finally {
      t.sim!.options.ttftMs = 0;
    }
  });

  test("a code is dead after 5 wrong tries, even the right one; a code is tried only with the id its request answered", async () => {
    const sent = await call(null, "POST", "/console/api/otp", { phone: "09120000003" });
    const code_id = sent.body.code_id;
    expect(code_id).toMatch(/^otp_\w{20}$/);
    const code = sms.lastCode("09120000003")!;
    const wrong = code === "000000" ? "111111" : "000000";
    const missing = await call(null, "POST", "/console/api/sign-in", { phone: "09120000003", code });
    expect(missing.status).toBe(400);
    expect(missing.body.error.param).toBe("code_id");
    const unknown = await call(null, "POST", "/console/api/sign-in", { phone: "09120000003", code_id: "otp_AAAAAAAAAAAAAAAAAAAA", code });
    expect(unknown.body.error.code).toBe("code_expired");
    for (let i = 1; i <= OTP_TRIES_MAX; i++) {
      const reply = await call(null, "POST", "/console/api/sign-in", { phone: "09120000003", code_id, code: wrong });
      expect(reply.body.error.code).toBe(i < OTP_TRIES_MAX ? "code_invalid" : "code_attempts_exceeded");
      // The tries left as a number, for the page to say in its language.
      expect(reply.headers.get(TRIES_LEFT_HEADER)).toBe(i < OTP_TRIES_MAX ? String(OTP_TRIES_MAX - i) : null);
    }
    const right = await call(null, "POST", "/console/api/sign-in", { phone: "09120000003", code_id, code });
    expect(right.status).toBe(429);
    expect(right.body.error.code).toBe("code_attempts_exceeded");
  });

  test("keys: refused before funding, created after, another account's id is not found, expiry enforced", async () => {
    const b = await signIn("09120000004");
    const before = await call(b, "POST", "/console/api/keys", { name: "first" });
    expect(before.status).toBe(409);
    expect(before.body.error.code).toBe("wallet_not_funded");
    const session = await call(b, "GET", "/console/api/session");
    expect((await call(b, "GET", "/console/api/overview")).body).toMatchObject({
      funded: false,
      low_balance: true,
      balance_micro_toman: "0",
    });
    await t.admin("POST", `/admin/accounts/${session.body.account_id}/topups`, { amount_toman: 100_000, reference: "console-api-1" });
    const overview = (await call(b, "GET", "/console/api/overview")).body;
    expect(overview).toMatchObject({
      funded: true,
      low_balance: false,
      available_toman: "100000",
      today: { requests: 0, timezone: "UTC" },
      jalali_month: { timezone: "Asia/Tehran" },
    });
    expect(overview.month.from).toMatch(/^\d{4}-\d{2}-01T00:00:00\.000Z$/);
    const created = await call(b, "POST", "/console/api/keys", { name: "first", rpm: 100 });
    expect(created.status).toBe(201);
    expect(created.body.exports).toEqual([`export OPENAI_BASE_URL=${t.url}/v1`, `export OPENAI_API_KEY=${created.body.key}`]);

    const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: created.body.key, maxRetries: 0 });
    const reply = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 5,
    });
    await usageWritten(b, 1);
    const listed = await call(b, "GET", "/console/api/keys");
    expect(JSON.stringify(listed.body)).not.toContain(created.body.key);
    const row = listed.body.data.find((k: any) => k.id === created.body.id);
    expect(row.last_used_at).not.toBeNull();
    const usage = await call(b, "GET", `/console/api/usage?key=${created.body.id}`);
    expect(usage.body.data).toHaveLength(1);
    expect(usage.body.data[0].output_units).toBe(String(reply.usage!.completion_tokens));
    expect(row.spent_micro_toman).toBe(usage.body.totals.cost_micro_toman);
    expect((await call(b, "GET", "/console/api/usage?model=gpt-4o-mini")).body.data).toHaveLength(1);
    expect((await call(b, "GET", "/console/api/usage?model=other-model")).body.totals.requests).toBe(0);
    expect((await call(b, "GET", "/console/api/usage?from=2000-01-01&to=2000-01-02")).body.data).toHaveLength(0);
    const today = new Date().toISOString().slice(0, 10);
    expect((await call(b, "GET", `/console/api/usage?from=${today}&to=${today}`)).body.daily).toEqual([
      { day: today, cost_toman: usage.body.totals.cost_toman, cost_micro_toman: usage.body.totals.cost_micro_toman, requests: 1 },
    ]);
    expect((await call(b, "GET", "/console/api/usage?from=yesterday")).status).toBe(400);

    const other = await signIn("09120000005");
    expect((await call(other, "DELETE", `/console/api/keys/${created.body.id}`)).status).toBe(404);
    expect((await call(other, "GET", `/console/api/usage?key=${created.body.id}`)).body.data).toHaveLength(0);
    const mine = await call(b, "POST", "/console/api/topups", { amount_toman: 20_000 });
    expect((await call(b, "GET", "/console/api/topups")).body.data.map((x: any) => x.id)).toEqual([mine.body.id]);
    expect((await call(other, "GET", "/console/api/topups")).body.data).toEqual([]);
    expect((await call(other, "GET", `/console/api/topups/${mine.body.id}`)).status).toBe(404);
    expect((await call(other, "POST", `/console/api/topups/${mine.body.id}/check`)).status).toBe(404);

    const soon = await call(b, "POST", "/console/api/keys", { name: "brief", expires_at: new Date(Date.now() + 1_500).toISOString() });
    expect(soon.status).toBe(201);
    const briefClient = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: soon.body.key, maxRetries: 0 });
    await briefClient.models.list(); // cached now
    const info = (await (await fetch(`${t.url}/v1/key`, { headers: { authorization: `Bearer ${soon.body.key}` } })).json()) as {
      expires_at: number;
    };
    expect(info.expires_at).toBe(Math.floor(Date.parse(soon.body.expires_at) / 1000));
    // The gateway runs in this process: move its wall clock past the expiry instead of waiting for it.
    setSystemTime(new Date(Date.parse(soon.body.expires_at) + 100));
    const refused = await briefClient.models.list().catch((error) => error);
    setSystemTime();
    expect(refused.status).toBe(401);
    expect(refused.error.message).toContain("expired");

    expect((await call(b, "DELETE", `/console/api/keys/${created.body.id}`)).body.revoked_at).not.toBeNull();
    const after = await client.chat.completions
      .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] })
      .catch((e) => e);
    expect(after.status).toBe(401);
  }, 30_000);

  test("keys made in the console stay within the operator's ceilings and the account's number of live keys", async () => {
    const b = await signIn("09120000031");
    const accountId = (await call(b, "GET", "/console/api/session")).body.account_id;
    await t.admin("POST", `/admin/accounts/${accountId}/topups`, { amount_toman: 1_000, reference: "console-ceilings" });
    const ceilings = { key_concurrency_max: 4, key_rpm_max: 600, key_tpm_max: 50_000, keys_max: 2 };
    expect((await t.admin("PATCH", `/admin/accounts/${accountId}`, { limits: ceilings })).status).toBe(200);
    for (const [field, value, ceiling] of [
      ["concurrency_max", 10_000, 4],
      ["rpm", 10_000_000, 600],
      ["tpm", 2_000_000_000, 50_000],
    ] as const) {
      const above = await call(b, "POST", "/console/api/keys", { name: "above", [field]: value });
      expect(above.status).toBe(400);
      expect(above.body.error.param).toBe(field);
      expect(above.body.error.message).toContain(`${field} may be at most ${ceiling}`);
    }
    // A limit not given is the ceiling: no console key is unlimited.
    const plain = await call(b, "POST", "/console/api/keys", { name: "plain" });
    expect(plain.status).toBe(201);
    expect(plain.body).toMatchObject({ concurrency_max: 4, rpm: 600, tpm: 50_000 });
    const within = await call(b, "POST", "/console/api/keys", { name: "within", concurrency_max: 2, rpm: 10, tpm: 1_000 });
    expect(within.body).toMatchObject({ concurrency_max: 2, rpm: 10, tpm: 1_000 });
    const third = await call(b, "POST", "/console/api/keys", { name: "third" });
    expect(third.status).toBe(409);
    expect(third.body.error).toMatchObject({ code: "key_limit_reached", param: "keys_max" });
    // The console cannot change its own account's limits.
    expect((await call(b, "PUT", "/console/api/alert", { low_balance_threshold_toman: 10, limits: { keys_max: 100 } })).status).toBe(400);
  });

  test("key restrictions: the account changes its own key's allowlists (bounded like the admin API); admission follows", async () => {
    const b = await signIn("09120000021");
    const session = await call(b, "GET", "/console/api/session");
    await t.admin("POST", `/admin/accounts/${session.body.account_id}/topups`, { amount_toman: 10_000, reference: "console-restrict-1" });
    const created = await call(b, "POST", "/console/api/keys", { name: "office", allowed_models: ["gpt-4o-mini"] });
    expect(created.body).toMatchObject({ allowed_models: ["gpt-4o-mini"], allowed_ips: null });
    const path = `/console/api/keys/${created.body.id}`;
    const chat = (model: string) =>
      new OpenAI({ baseURL: `${t.url}/v1`, apiKey: created.body.key, maxRetries: 0 }).chat.completions
        .create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 2 })
        .then(() => 200)
        .catch((error) => error.status as number);
    expect(await chat("phi-4")).toBe(403);

    const other = await signIn("09120000022");
    expect((await call(other, "PATCH", path, { allowed_models: null })).body.error.code).toBe("not_found");
    expect((await call({ ...b, csrf: null }, "PATCH", path, { allowed_models: null })).body.error.code).toBe("cross_site_refused");
    const badBlock = await call(b, "PATCH", path, { allowed_ips: ["10.0.0.0/8", "10.0.0.0/33"] });
    expect([badBlock.status, badBlock.body.error.code, badBlock.body.error.param]).toEqual([400, "invalid_request", "allowed_ips.1"]);
    const tooMany = await call(b, "PATCH", path, { allowed_models: Array.from({ length: 101 }, (_, i) => `m${i}`) });
    expect([tooMany.status, tooMany.body.error.param]).toEqual([400, "allowed_models"]);
    expect((await call(b, "PATCH", path, {})).status).toBe(400);
    expect((await call(b, "PATCH", path, { rpm: 5 })).status).toBe(400); // limits are the operator's, not this route's

    const changed = await call(b, "PATCH", path, { allowed_models: ["phi-4"], allowed_ips: ["203.0.113.0/24", "::1", "127.0.0.1"] });
    expect([changed.status, changed.body.allowed_models, changed.body.allowed_ips]).toEqual([
      200,
      ["phi-4"],
      ["203.0.113.0/24", "::1", "127.0.0.1"],
    ]);
    expect(changed.body.account_id).toBeUndefined();
    await until(async () => (await chat("gpt-4o-mini")) === 403 && (await chat("phi-4")) === 200);
    expect((await call(b, "GET", "/console/api/keys")).body.data[0]).toMatchObject({ allowed_models: ["phi-4"] });

    await call(b, "PATCH", path, { allowed_ips: ["203.0.113.0/24"] });
    await until(async () => (await chat("phi-4")) === 403);
    const cleared = await call(b, "PATCH", path, { allowed_models: null, allowed_ips: null });
    expect([cleared.body.allowed_models, cleared.body.allowed_ips]).toEqual([null, null]);
    await until(async () => (await chat("gpt-4o-mini")) === 200);
  }, 30_000);

  test("CSV export escapes formula cells", async () => {
    const b = await signIn("09120000006");
    const session = await call(b, "GET", "/console/api/session");
    await t.admin("POST", `/admin/accounts/${session.body.account_id}/topups`, { amount_toman: 100_000, reference: "console-api-2" });
    const created = await call(b, "POST", "/console/api/keys", { name: '=HYPERLINK("http://x")' });
    const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: created.body.key, maxRetries: 0 });
    await client.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }], max_tokens: 3 });
    await usageWritten(b, 1);
    const csv = await call(b, "GET", "/console/api/usage.csv");
    expect(csv.headers.get("content-type")).toBe("text/csv; charset=utf-8");
    const lines = (csv.body as string).trim().split("\r\n");
    expect(lines[0]).toStartWith("time_utc,request_id,key_id,key_name");
    expect(lines).toHaveLength(2);
    expect(lines[1]).toContain(`"'=HYPERLINK(""http://x"")"`);
  });

  test("receipts: a paid top-up's, with its reference and card; none for another account, an unpaid or a cancelled payment", async () => {
    const b = await signIn("09120000015");
    /** The customer on the bank page: `pay` or `cancel`, then back through the callback; the return address. */
    const payPage = async (action: "pay" | "cancel") => {
      const started = await call(b, "POST", "/console/api/topups", { amount_toman: 30_000 });
      const bank = await fetch(`${started.body.payment_url}/${action}`, { method: "POST", redirect: "manual" });
      const callback = await fetch(bank.headers.get("location")!, { redirect: "manual" });
      return { id: started.body.id as string, back: new URL(callback.headers.get("location")!) };
    };
    const paid = await payPage("pay");
    expect(paid.back.searchParams.get("outcome")).toBe("verified");
    const topUp = (await call(b, "GET", `/console/api/topups/${paid.id}`)).body;
    const receipt = await call(b, "GET", `/console/api/receipts/${paid.id}`);
    expect(receipt.status).toBe(200);
    expect(receipt.body).toMatchObject({
      object: "receipt",
      id: paid.id,
      state: "verified",
      amount_micro_toman: "30000000000",
      ref_id: topUp.ref_id,
    });
    expect(receipt.body.ref_id).toMatch(/^\d+$/);
    expect(receipt.body.card_pan).toMatch(/^\d{6}\*{6}\d{4}$/);
    expect(receipt.body.phone).toBe("+989120000015");
    // Another account's receipt does not exist for it.
    const other = await signIn("09120000016");
    expect((await call(other, "GET", `/console/api/receipts/${paid.id}`)).status).toBe(404);
    expect((await call(null, "GET", `/console/api/receipts/${paid.id}`)).status).toBe(401);

    // Cancelled on the bank page: shown as cancelled, nothing to check, no receipt.
    const cancelled = await payPage("cancel");
    expect(cancelled.back.searchParams.get("outcome")).toBe("cancelled");
    expect((await call(b, "GET", `/console/api/topups/${cancelled.id}`)).body).toMatchObject({
      state: "cancelled",
      pending: false,
      ref_id: null,
    });
    expect((await call(b, "GET", `/console/api/receipts/${cancelled.id}`)).status).toBe(404);
    // Still waiting (not paid yet): no receipt either.
    const waiting = await call(b, "POST", "/console/api/topups", { amount_toman: 30_000 });
    expect((await call(b, "GET", `/console/api/receipts/${waiting.body.id}`)).status).toBe(404);
  });

  test("sessions are listed, revocable, and sign-out everywhere ends them all", async () => {
    const a = await signIn("09120000007");
    const list = await call(a, "GET", "/console/api/sessions");
    expect(list.body.data).toHaveLength(1);
    expect(list.body.data[0].current).toBe(true);
    expect(list.body.data[0].device).toBe(`Bun/${Bun.version}`); // no known browser: the header, printable and bounded
    const out = await call(a, "POST", "/console/api/sign-out-everywhere");
    expect(out.body.sessions_ended).toBe(1);
    expect((await call(a, "GET", "/console/api/session")).status).toBe(401);
  });

  test("resend limits: per phone (a minute apart) and per client address", async () => {
    expect((await call(null, "POST", "/console/api/otp", { phone: "09120000008" })).status).toBe(202);
    const again = await call(null, "POST", "/console/api/otp", { phone: "09120000008" });
    expect(again.status).toBe(429);
    expect(again.body.error.code).toBe("code_resend_limited");
    expect(Number(again.headers.get("retry-after"))).toBeGreaterThan(0);
    let refusedAt = -1;
    for (let i = 0; i <= OTP_SENDS_PER_ADDRESS_PER_HOUR_MAX; i++) {
      const reply = await call(null, "POST", "/console/api/otp", { phone: `0913${String(i).padStart(7, "0")}` });
      if (reply.status === 429) {
        refusedAt = i;
        expect(reply.body.error.message).toContain("network");
        break;
      }
    }
    // Every send from this address this hour counts (the tests above sent some).
    expect(refusedAt).toBeGreaterThanOrEqual(0);
    expect(refusedAt).toBeLessThan(OTP_SENDS_PER_ADDRESS_PER_HOUR_MAX);
  });
});
