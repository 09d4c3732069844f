/**
 * The daily SMS budget through the gateway: past SMS_DAILY_BUDGET_MAX no sign-in code goes out
 * (503 with retry-after, nothing reaches the SMS provider), unknown requesters stop short of the
 * known devices' reserve, and /metrics tells the operator: today's sent and refused messages, the
 * budget, and the exhausted flag. Each code comes from its own /24 (test/peer.ts), under the
 * budget's range ceilings.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { startSmsSimulator, type SmsSimulator } from "../src/sim/sms.ts";
import { unknownRequestersMax } from "../src/accountArea/smsBudget.ts";
import { ADMIN_TOKEN, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { peerRequest } from "./peer.ts";

const SMS_KEY = "sim-kavenegar-key";
const TEMPLATE = "darvaze-otp";
const BUDGET = 10;

let sms: SmsSimulator;
let t: TestGateway;

beforeAll(async () => {
  sms = await startSmsSimulator({ apiKey: SMS_KEY, template: TEMPLATE });
  t = await startTestGateway({
    SMS_SENDER: "kavenegar",
    KAVENEGAR_API_KEY: SMS_KEY,
    KAVENEGAR_TEMPLATE: TEMPLATE,
    KAVENEGAR_URL: sms.url,
    SMS_DAILY_BUDGET_MAX: String(BUDGET),
  });
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  await sms?.stop();
}, SETUP_MS_MAX);

/** A code asked from the /24 of `network`, with the browser's cookie if any. */
async function askCode(phone: string, network: number, cookie?: string) {
  const origin = new URL(t.url).origin;
  const reply = await peerRequest(`${t.url}/console/api/otp`, {
    from: `127.3.${network}.1`,
    method: "POST",
    headers: { origin, ...(cookie ? { cookie } : {}) },
    body: { phone },
  });
  return { status: reply.status, retryAfter: reply.headers["retry-after"], body: reply.body };
}

async function metricLines(): Promise<string[]> {
  const response = await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  return (await response.text()).split("\n").filter((line) => line.startsWith("darvaze_sms_"));
}

test("the daily SMS budget stops sending, and /metrics shows it used up", async () => {
  expect(await metricLines()).toEqual(
    expect.arrayContaining(['darvaze_sms_today{outcome="sent"} 0', `darvaze_sms_daily_budget ${BUDGET}`, "darvaze_sms_budget_exhausted 0"]),
  );
  const unknownMax = unknownRequestersMax(BUDGET);
  const codeIds: string[] = [];
  for (let i = 0; i < unknownMax; i++) {
    const asked = await askCode(`0912000100${i}`, i + 1);
    expect(asked.status).toBe(202);
    codeIds.push(asked.body.code_id);
  }
  expect(sms.sent.length).toBe(unknownMax);
  const refused = await askCode("09120001009", 100);
  expect(refused.status).toBe(503);
  expect(refused.body.error.code).toBe("service_unavailable");
  const retryAfterS = Number(refused.retryAfter);
  expect(retryAfterS).toBeGreaterThan(0);
  expect(retryAfterS).toBeLessThanOrEqual(24 * 3_600);
  expect(sms.sent.length).toBe(unknownMax);
  // The reserve is a known device's: sign in, then ask again from that browser.
  const signed = await peerRequest(`${t.url}/console/api/sign-in`, {
    from: "127.3.1.1",
    method: "POST",
    headers: { origin: new URL(t.url).origin },
    body: { phone: "09120001000", code_id: codeIds[0], code: sms.lastCode("09120001000") },
  });
  expect(signed.status).toBe(200);
  const device = signed.cookies.find((c) => c.startsWith("dvz_device="))!;
  while (sms.sent.length < BUDGET) expect((await askCode("09120001000", 1, device)).status).toBe(202);
  expect((await askCode("09120001000", 1, device)).status).toBe(429); // its own resend interval first
  expect((await askCode("09120001008", 101)).status).toBe(503);
  expect(sms.sent.length).toBe(BUDGET);
  expect(await metricLines()).toEqual(
    expect.arrayContaining([
      `darvaze_sms_today{outcome="sent"} ${BUDGET}`,
      'darvaze_sms_today{outcome="refused"} 2',
      "darvaze_sms_budget_exhausted 1",
    ]),
  );
});
