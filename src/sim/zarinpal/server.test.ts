/**
 * The Zarinpal simulator's own wire, checked from outside as a merchant would see it, and its
 * independence: it imports nothing from the gateway, so it cannot share the gateway's mistakes.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { startZarinpalSim, type ZarinpalSim } from "./server.ts";

const MERCHANT = "1344b5d4-0048-11e8-94db-005056a205be";
const OTHER = "2344b5d4-0048-11e8-94db-005056a205be";
let sim: ZarinpalSim;
let strings: ZarinpalSim;

beforeAll(async () => {
  sim = await startZarinpalSim({ merchantIds: [MERCHANT, OTHER] });
  strings = await startZarinpalSim({ codesAsStrings: true });
});
afterAll(async () => {
  await sim.stop();
  await strings.stop();
});

async function call(target: ZarinpalSim, op: string, body: unknown): Promise<{ status: number; json: any }> {
  const response = await fetch(`${target.url}/pg/v4/payment/${op}.json`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: response.status, json: await response.json() };
}

const request = (target: ZarinpalSim, extra: Record<string, unknown> = {}) =>
  call(target, "request", { merchant_id: MERCHANT, amount: 500_000, description: "top-up", callback_url: "http://127.0.0.1/cb", ...extra });

test("imports nothing from the gateway", () => {
  for (const file of readdirSync(import.meta.dir).filter((f) => f.endsWith(".ts"))) {
    const imports = [...readFileSync(join(import.meta.dir, file), "utf8").matchAll(/from\s+"([^"]+)"/g)].map((m) => m[1]!);
    for (const path of imports) expect(path.startsWith("./") || path.startsWith("node:") || path === "bun:test").toBe(true);
  }
});

test("request: 100 with an authority; validation (−9) and unknown merchant (−10) errors have data: [] and a non-2xx status", async () => {
  const ok = await request(sim);
  expect(ok.json.data.code).toBe(100);
  expect(ok.json.data.authority).toMatch(/^A\d{35}$/);
  expect(ok.json.errors).toEqual([]);
  const small = await request(sim, { amount: 9_999 });
  expect(small.status).toBe(422);
  expect(small.json.data).toEqual([]);
  expect(small.json.errors.code).toBe(-9);
  expect(small.json.errors.validations[0]).toHaveProperty("amount");
  // IRT: toman, ×10 inside the simulator.
  expect((await request(sim, { amount: 1_000, currency: "IRT" })).json.data.code).toBe(100);
  expect((await request(sim, { merchant_id: "short" })).json.errors.code).toBe(-9);
  expect((await request(sim, { merchant_id: "3344b5d4-0048-11e8-94db-005056a205be" })).json.errors.code).toBe(-10);
  sim.faults.requestCode = -14;
  expect((await request(sim)).json.errors.code).toBe(-14);
  expect((await request(sim)).json.data.code).toBe(100);
});

test("verify: −51 before payment, 100 then 101 with the same ref_id, −50 on another amount, −53 for another merchant, −54 unknown", async () => {
  const { authority } = (await request(sim)).json.data;
  expect((await call(sim, "verify", { merchant_id: MERCHANT, amount: 500_000, authority })).json.errors.code).toBe(-51);
  expect((await call(sim, "inquiry", { merchant_id: MERCHANT, authority })).json.data.status).toBe("IN_BANK");
  sim.pay(authority, "pay-silently");
  expect((await call(sim, "inquiry", { merchant_id: MERCHANT, authority })).json.data.status).toBe("PAID");
  const listed = (await call(sim, "unVerified", { merchant_id: MERCHANT })).json.data.authorities;
  expect(listed).toContainEqual(expect.objectContaining({ authority, amount: 500_000 }));
  expect((await call(sim, "verify", { merchant_id: MERCHANT, amount: 50_000, authority })).json.errors.code).toBe(-50);
  expect((await call(sim, "verify", { merchant_id: OTHER, amount: 500_000, authority })).json.errors.code).toBe(-53);
  const first = (await call(sim, "verify", { merchant_id: MERCHANT, amount: 500_000, authority })).json.data;
  const second = (await call(sim, "verify", { merchant_id: MERCHANT, amount: 500_000, authority })).json.data;
  expect([first.code, second.code]).toEqual([100, 101]);
  expect(second.ref_id).toBe(first.ref_id);
  expect(first.card_pan).toMatch(/^\d{6}\*{6}\d{4}$/);
  expect(
    (await call(sim, "unVerified", { merchant_id: MERCHANT })).json.data.authorities.map((a: { authority: string }) => a.authority),
  ).not.toContain(authority);
  expect((await call(sim, "verify", { merchant_id: MERCHANT, amount: 500_000, authority: "A0" })).json.errors.code).toBe(-54);
  expect((await call(sim, "reverse", { merchant_id: MERCHANT, authority })).json.data.code).toBe(100);
  expect((await call(sim, "inquiry", { merchant_id: MERCHANT, authority })).json.data.status).toBe("REVERSED");
});

test("a second verify while one is in flight is answered −12", async () => {
  const { authority } = (await request(sim)).json.data;
  sim.pay(authority, "pay-silently");
  // The first verify is held long enough that the second, sent 100 ms after it, surely arrives
  // while it is in flight, even on a loaded machine. (This folder imports nothing from outside
  // it, so not test/until.ts; and the simulator shows no verify in flight to wait for.)
  sim.faults.verifyDelayMs = 1_500;
  try {
    const body = { merchant_id: MERCHANT, amount: 500_000, authority };
    const [a, b] = await Promise.all([call(sim, "verify", body), Bun.sleep(100).then(() => call(sim, "verify", body))]);
    expect(a.json.data.code).toBe(100);
    expect(b.status).toBe(429);
    expect(b.json.errors.code).toBe(-12);
  } finally {
    sim.faults.verifyDelayMs = 0;
  }
});

test("the bank page: pay redirects with Status=OK, cancel with NOK, and callbackNeverSent sends none", async () => {
  const { authority } = (await request(sim)).json.data;
  const page = await (await fetch(`${sim.url}/pg/StartPay/${authority}`)).text();
  for (const action of ["pay", "cancel", "pay-silently", "pay-delayed"]) expect(page).toContain(`/pg/StartPay/${authority}/${action}`);
  const paid = await fetch(`${sim.url}/pg/StartPay/${authority}/pay`, { method: "POST", redirect: "manual" });
  expect(paid.status).toBe(302);
  expect(paid.headers.get("location")).toBe(`http://127.0.0.1/cb?Authority=${authority}&Status=OK`);

  const cancelled = (await request(sim)).json.data.authority;
  const back = await fetch(`${sim.url}/pg/StartPay/${cancelled}/cancel`, { method: "POST", redirect: "manual" });
  expect(back.headers.get("location")).toEndWith("Status=NOK");

  sim.faults.callbackNeverSent = true;
  try {
    const silent = (await request(sim)).json.data.authority;
    const none = await fetch(`${sim.url}/pg/StartPay/${silent}/pay`, { method: "POST", redirect: "manual" });
    expect(none.status).toBe(200);
    expect(sim.status(silent)).toBe("PAID");
  } finally {
    sim.faults.callbackNeverSent = false;
  }
});

test("faults can be set over HTTP, and a wrong one is refused", async () => {
  const set = await fetch(`${strings.url}/__sim/faults`, {
    method: "POST",
    body: JSON.stringify({ verifyCode: -11, callbackNeverSent: true }),
  });
  expect(await set.json()).toMatchObject({ verifyCode: -11, callbackNeverSent: true });
  const wrong = await fetch(`${strings.url}/__sim/faults`, { method: "POST", body: JSON.stringify({ callbackNeverSent: "yes" }) });
  expect(wrong.status).toBe(400);
  const unknown = await fetch(`${strings.url}/__sim/faults`, { method: "POST", body: JSON.stringify({ explode: true }) });
  expect(unknown.status).toBe(400);
  Object.assign(strings.faults, { verifyCode: null, callbackNeverSent: false });
});

test("codes as strings, as some of Zarinpal's own samples send them", async () => {
  const reply = await request(strings);
  expect(reply.json.data.code).toBe("100");
  expect((await call(strings, "verify", { merchant_id: MERCHANT, amount: 500_000, authority: "A1" })).json.errors.code).toBe("-54");
});

test("the log records what was received, amounts as sent", async () => {
  await request(sim, { amount: 123_450 });
  expect(sim.log.some((e) => e.path === "/pg/v4/payment/request.json" && e.body?.amount === 123_450 && e.code === 100)).toBe(true);
  const remote = (await (await fetch(`${sim.url}/__sim/log`)).json()) as unknown[];
  expect(remote.length).toBe(sim.log.length);
});
