/**
 * The daily SMS budget through the gateway: past SMS_DAILY_BUDGET_MAX no sign-in code goes out
 * (503 with retry-after, nothing reaches the SMS provider), and /metrics tells the operator:
 * today's sent and refused messages, the budget, and the exhausted flag.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { startSmsSimulator, type SmsSimulator } from "../src/sim/sms.ts";
import { ADMIN_TOKEN, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";

const SMS_KEY = "sim-kavenegar-key";
const TEMPLATE = "darvaze-otp";
const BUDGET = 3;

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

async function askCode(phone: string) {
  const origin = new URL(t.url).origin;
  const response = await fetch(`${t.url}/console/api/otp`, {
    method: "POST",
    headers: { origin, "content-type": "application/json" },
    body: JSON.stringify({ phone }),
  });
  return { status: response.status, headers: response.headers, body: (await response.json()) as any };
}

async function metricLines(): Promise<string[]> {
  const response = await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  return (await response.text()).split("\n").filter((line) => line.startsWith("darvaze_sms_"));
}

test("the daily SMS budget stops sending, and /metrics shows it used up", async () => {
  expect(await metricLines()).toEqual(
    expect.arrayContaining(['darvaze_sms_today{outcome="sent"} 0', "darvaze_sms_daily_budget 3", "darvaze_sms_budget_exhausted 0"]),
  );
  for (let i = 0; i < BUDGET; i++) expect((await askCode(`0912000100${i}`)).status).toBe(202);
  expect(sms.sent.length).toBe(BUDGET);
  const refused = await askCode("09120001009");
  expect(refused.status).toBe(503);
  expect(refused.body.error.code).toBe("service_unavailable");
  const retryAfterS = Number(refused.headers.get("retry-after"));
  expect(retryAfterS).toBeGreaterThan(0);
  expect(retryAfterS).toBeLessThanOrEqual(24 * 3_600);
  expect(sms.sent.length).toBe(BUDGET);
  expect(await metricLines()).toEqual(
    expect.arrayContaining([
      `darvaze_sms_today{outcome="sent"} ${BUDGET}`,
      'darvaze_sms_today{outcome="refused"} 1',
      "darvaze_sms_budget_exhausted 1",
    ]),
  );
});
