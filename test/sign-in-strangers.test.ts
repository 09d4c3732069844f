/**
 * Strangers against sign-in, through the gateway from many source addresses (test/peer.ts): 50
 * attacking addresses asking codes for a victim's phone use up the unknown requesters' cap, and
 * the owner, whose browser holds the known-device cookie of an earlier sign-in, still gets a code
 * and signs in; a cookie for another phone does not help the attackers. One IPv4 /24 cannot spend
 * more than its share of the SMS budget, and the operator's log names it.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { OTP_SENDS_PER_PHONE_UNKNOWN_PER_DAY_MAX, smsCeilings } from "../src/accountArea/otp.ts";
import { createLogger } from "../src/log.ts";
import { startSmsSimulator, type SmsSimulator } from "../src/sim/sms.ts";
import { ADMIN_TOKEN, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { peerRequest } from "./peer.ts";

const SMS_KEY = "sim-kavenegar-key";
const TEMPLATE = "darvaze-otp";
const BUDGET = 200;
const ATTACKERS = 50;

let sms: SmsSimulator;
let t: TestGateway;
const logLines: string[] = [];

beforeAll(async () => {
  sms = await startSmsSimulator({ apiKey: SMS_KEY, template: TEMPLATE });
  t = await startTestGateway(
    {
      SMS_SENDER: "kavenegar",
      KAVENEGAR_API_KEY: SMS_KEY,
      KAVENEGAR_TEMPLATE: TEMPLATE,
      KAVENEGAR_URL: sms.url,
      SMS_DAILY_BUDGET_MAX: String(BUDGET),
    },
    { log: createLogger("warn", (line) => logLines.push(line)) },
  );
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  await sms?.stop();
}, SETUP_MS_MAX);

/** A console call from `from` with the browser's cookies (`jar`, updated from the reply). */
async function consoleCall(from: string, path: string, body: unknown, jar: Map<string, string> = new Map()) {
  const cookie = [...jar].map(([name, value]) => `${name}=${value}`).join("; ");
  const reply = await peerRequest(`${t.url}${path}`, {
    from,
    method: "POST",
    headers: { origin: new URL(t.url).origin, ...(cookie ? { cookie } : {}) },
    body,
  });
  for (const c of reply.cookies) jar.set(c.slice(0, c.indexOf("=")), c.slice(c.indexOf("=") + 1));
  return reply;
}

/** Asks a code from `from` and signs in with it; the browser's cookies end up in `jar`. */
async function signIn(from: string, national: string, jar: Map<string, string>) {
  const sent = await consoleCall(from, "/console/api/otp", { phone: national }, jar);
  expect(sent.status).toBe(202);
  const signed = await consoleCall(
    from,
    "/console/api/sign-in",
    { phone: national, code_id: sent.body.code_id, code: sms.lastCode(national) },
    jar,
  );
  expect(signed.status).toBe(200);
  return signed;
}

async function smsSent(): Promise<number> {
  const text = await (await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).text();
  return Number(/^darvaze_sms_today\{outcome="sent"\} (\d+)$/m.exec(text)![1]);
}

test("50 attacking addresses cannot keep the owner, on a known device, from signing in", async () => {
  const victim = "09120000401";
  const owner = new Map<string, string>();
  const first = await signIn("127.0.0.1", victim, owner);
  expect(first.headers["set-cookie"]!.find((c) => c.startsWith("dvz_device="))).toMatch(
    /^dvz_device=[\w.-]+; Path=\/; HttpOnly; SameSite=Lax; Max-Age=\d+$/,
  );
  // An attacker with a known-device cookie of their own phone: it is bound to that phone.
  const attacker = new Map<string, string>();
  await signIn("127.1.200.1", "09120000402", attacker);

  const attacks = await Promise.all(
    Array.from({ length: ATTACKERS }, (_, i) => consoleCall(`127.1.${i}.1`, "/console/api/otp", { phone: victim }, new Map(attacker))),
  );
  const sent = attacks.filter((a) => a.status === 202).length;
  expect(sent).toBe(OTP_SENDS_PER_PHONE_UNKNOWN_PER_DAY_MAX - 1); // the owner's first sign-in took one
  for (const refused of attacks.filter((a) => a.status !== 202)) {
    expect(refused.status).toBe(429);
    expect(refused.body.error.code).toBe("code_resend_limited");
    expect(Number(refused.headers["retry-after"])).toBeGreaterThan(0);
  }
  // A browser without the cookie, even at the owner's address, is a stranger too.
  expect((await consoleCall("127.0.0.1", "/console/api/otp", { phone: victim })).status).toBe(429);

  // The owner's browser: a code, and a session.
  const codesBefore = sms.sent.length;
  const signed = await signIn("127.0.0.1", victim, owner);
  expect(sms.sent.length).toBe(codesBefore + 1);
  expect(signed.body.phone).toBe("+989120000401");
  expect(signed.body.account_id).toBe(first.body.account_id);
});

test("one /24 cannot drain the SMS budget: its share, then refusals; the next /24 is served; the log names the range", async () => {
  const { rangeDay } = smsCeilings(BUDGET);
  const before = await smsSent();
  const flood = await Promise.all(
    Array.from({ length: ATTACKERS }, (_, i) =>
      consoleCall(`127.2.0.${i + 1}`, "/console/api/otp", { phone: `0913${String(i).padStart(7, "0")}` }),
    ),
  );
  expect(flood.filter((r) => r.status === 202).length).toBe(rangeDay);
  const refused = flood.filter((r) => r.status !== 202);
  expect(refused.every((r) => r.status === 429 && r.body.error.code === "code_resend_limited")).toBe(true);
  expect(refused[0]!.body.error.message).toContain("range");
  expect((await smsSent()) - before).toBe(rangeDay);
  expect(rangeDay).toBeLessThan(BUDGET / 10);
  const reached = logLines.map((line) => JSON.parse(line)).filter((l) => l.event === "sms_range_ceiling_reached");
  expect(reached).toEqual([expect.objectContaining({ range: "127.2.0.0/24", codesPerDayMax: rangeDay })]);
  // The next network is served.
  expect((await consoleCall("127.2.1.1", "/console/api/otp", { phone: "09139999999" })).status).toBe(202);
});
