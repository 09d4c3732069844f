/**
 * Wallet top-ups through Zarinpal, end to end against the local simulator (which imports nothing
 * from the gateway): the customer's path through StartPay and the callback, the reconciler's
 * recoveries, and the refusals. Every credit is checked in the ledger itself: one transfer per
 * paid top-up, of the requested amount, to the account recorded at request time.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import { runGw } from "../src/cli/gw.ts";
import { CALLBACK_ATTEMPTS_MAX } from "../src/payments/topups.ts";
import { startZarinpalSim, type ZarinpalSim } from "../src/sim/zarinpal/server.ts";
import { ADMIN_TOKEN, SETUP_MS_MAX, startTestGateway, type TestGateway, topupAskDue } from "./helpers.ts";

const MERCHANT = "1344b5d4-0048-11e8-94db-005056a205be";
const TTL_MS = 2_000;
const TIMEOUT_MS = 1_000;
const ASK_INTERVAL_MS = 100;

let sim: ZarinpalSim;
let t: TestGateway;

beforeAll(async () => {
  sim = await startZarinpalSim({ merchantIds: [MERCHANT] });
  t = await startTestGateway({
    ZARINPAL_MERCHANT_ID: MERCHANT,
    ZARINPAL_BASE_URL: sim.url,
    RECONCILE_INTERVAL_MS: "0",
    PAYMENT_STALE_MS: "0",
    PAYMENT_TIMEOUT_MS: String(TIMEOUT_MS),
    PAYMENT_VERIFY_CLAIM_MS: "1500",
    PAYMENT_ASK_INTERVAL_MS: String(ASK_INTERVAL_MS),
    TOPUP_TTL_MS: String(TTL_MS),
    TOPUP_TOMAN_MIN: "1000",
  });
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  await sim?.stop();
}, SETUP_MS_MAX);

async function account(): Promise<string> {
  const created = await t.admin("POST", "/admin/accounts", { name: "payer" });
  return created.body.id as string;
}

async function start(accountId: string, toman: number) {
  const reply = await t.admin("POST", "/admin/topups", { account_id: accountId, amount_toman: toman });
  expect(reply.status).toBe(201);
  return reply.body as { id: string; authority: string; redirect_url: string; state: string };
}

/** The customer's browser: a button on the bank page, then (when sent) the callback. */
async function customer(topup: { authority: string }, action: "pay" | "cancel" | "pay-silently"): Promise<URL | null> {
  const page = await fetch(`${sim.url}/pg/StartPay/${topup.authority}/${action}`, { method: "POST", redirect: "manual" });
  const location = page.headers.get("location");
  if (!location) return null;
  const callback = await fetch(location, { redirect: "manual" });
  expect(callback.status).toBe(303);
  return new URL(callback.headers.get("location")!);
}

async function balanceMicro(accountId: string): Promise<bigint> {
  const shown = await t.admin("GET", `/admin/accounts/${accountId}`);
  return BigInt(shown.body.balance_micro_toman);
}

async function credits(topupId: string): Promise<{ amount: bigint; credit: string }[]> {
  const rows = await t.gw.deps.db.rows<{ amount_micro: string; credit_account: string }>(
    sql`SELECT amount_micro::text, credit_account FROM ledger_transfers WHERE reference = ${`topup:pay:${topupId}`}`,
  );
  return rows.map((r) => ({ amount: BigInt(r.amount_micro), credit: r.credit_account }));
}

async function show(id: string) {
  return (await t.admin("GET", `/admin/topups/${id}`)).body as {
    state: string;
    reason: string | null;
    ref_id: string | null;
    replies: unknown[];
    fee_toman: string | null;
    card_pan: string | null;
  };
}

/** A top-up's TTL runs out. Expiry is the database's clock, so its expiry moves into the past rather than the test waiting TTL_MS. */
async function outlive(topupId: string): Promise<void> {
  await t.gw.deps.db.rows(sql`UPDATE topups SET expires_at = now() - interval '1 second' WHERE id = ${topupId}`);
}

const reconcile = async () => (await t.admin("POST", "/admin/topups/reconcile")).body;

describe("the customer's path", () => {
  test("request, StartPay, callback, verify: credited once, in micro-toman, 50,000 toman sent as 500,000 rial", async () => {
    const accountId = await account();
    const topup = await start(accountId, 50_000);
    expect(topup.state).toBe("redirected");
    expect(topup.redirect_url).toBe(`${sim.url}/pg/StartPay/${topup.authority}`);
    const page = await fetch(topup.redirect_url);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain("500,000 rial");

    const landed = await customer(topup, "pay");
    expect(landed!.pathname).toBe("/pay/result");
    expect(landed!.searchParams.get("topup")).toBe(topup.id);
    expect(landed!.searchParams.get("outcome")).toBe("verified");
    const result = await fetch(landed!);
    expect(await result.text()).toContain('data-outcome="verified"');

    const sent = sim.log.find(
      (e) => e.path === "/pg/v4/payment/request.json" && (e.body?.metadata as { order_id?: string })?.order_id === topup.id,
    );
    expect(sent!.body!.amount).toBe(500_000);
    const verifies = sim.log.filter((e) => e.path === "/pg/v4/payment/verify.json" && e.body?.authority === topup.authority);
    expect(verifies.map((e) => e.body!.amount)).toEqual([500_000]);

    expect(await balanceMicro(accountId)).toBe(50_000n * 1_000_000n);
    expect(await credits(topup.id)).toEqual([{ amount: 50_000_000_000n, credit: `wallet:${accountId}` }]);
    const shown = await show(topup.id);
    expect(shown.state).toBe("verified");
    expect(shown.ref_id).toMatch(/^\d+$/);
    expect(shown.card_pan).toMatch(/^502229\*{6}\d{4}$/);
    // The fee is recorded (1% of 500,000 rial = 5,000 rial = 500 toman), never deducted.
    expect(shown.fee_toman).toBe("500");
    expect(shown.replies.length).toBe(2);

    // The callback again (a reload): nothing more.
    const again = await fetch(`${t.url}/pay/zarinpal/callback?Authority=${topup.authority}&Status=OK`, { redirect: "manual" });
    expect(new URL(again.headers.get("location")!).searchParams.get("outcome")).toBe("verified");
    expect(await credits(topup.id)).toHaveLength(1);
  });

  test("50 concurrent callbacks and reconciler runs for one authority: exactly one credit", async () => {
    const accountId = await account();
    const topup = await start(accountId, 20_000);
    sim.pay(topup.authority, "pay-silently");
    sim.faults.verifyDelayMs = 30;
    try {
      const callbacks = Array.from({ length: 50 }, () =>
        fetch(`${t.url}/pay/zarinpal/callback?Authority=${topup.authority}&Status=OK`, { redirect: "manual" }),
      );
      const runs = Array.from({ length: 5 }, () => reconcile());
      const replies = await Promise.all(callbacks);
      await Promise.all(runs);
      expect(replies.every((r) => r.status === 303)).toBe(true);
    } finally {
      sim.faults.verifyDelayMs = 0;
    }
    await reconcile();
    expect(await credits(topup.id)).toEqual([{ amount: 20_000_000_000n, credit: `wallet:${accountId}` }]);
    expect(await balanceMicro(accountId)).toBe(20_000n * 1_000_000n);
    expect((await show(topup.id)).state).toBe("verified");
    // The claim let one settle verify while the others returned the row as it was: without it,
    // each of the 55 settles would have called verify. (A verify that outlives the provider
    // timeout on a busy core frees the claim, so a few may follow: never one per settle.)
    const verifies = sim.log.filter((e) => e.path === "/pg/v4/payment/verify.json" && e.body?.authority === topup.authority);
    expect(verifies.length).toBeGreaterThanOrEqual(1);
    expect(verifies.length).toBeLessThan(10);
  });

  test("a cancelled payment: no verify, then expired by the reconciler, with no credit", async () => {
    const accountId = await account();
    const topup = await start(accountId, 10_000);
    const landed = await customer(topup, "cancel");
    expect(landed!.searchParams.get("outcome")).toBe("cancelled");
    expect(sim.log.some((e) => e.path === "/pg/v4/payment/verify.json" && e.body?.authority === topup.authority)).toBe(false);
    await outlive(topup.id);
    const report = await reconcile();
    expect(report.expired).toBeGreaterThanOrEqual(1);
    const shown = await show(topup.id);
    expect(shown.state).toBe("expired");
    expect(shown.reason).toContain("FAILED");
    expect(await credits(topup.id)).toHaveLength(0);
    expect(await balanceMicro(accountId)).toBe(0n);
  });
});

describe("the reconciler's recoveries", () => {
  test("verify committed at the provider but its reply lost: the reconciler credits once", async () => {
    const accountId = await account();
    const topup = await start(accountId, 30_000);
    sim.faults.dropVerifyReplies = 1;
    const landed = await customer(topup, "pay");
    expect(landed!.searchParams.get("outcome")).toBe("pending");
    expect(sim.status(topup.authority)).toBe("VERIFIED");
    const waiting = await show(topup.id);
    expect(waiting.state).toBe("verifying");
    expect(waiting.reason).toContain(`no reply within ${TIMEOUT_MS} ms`);
    expect(await credits(topup.id)).toHaveLength(0);

    await reconcile();
    const shown = await show(topup.id);
    expect(shown.state).toBe("verified");
    expect(shown.reason).toContain("101");
    expect(await credits(topup.id)).toHaveLength(1);
    expect(await balanceMicro(accountId)).toBe(30_000n * 1_000_000n);
  });

  test("no callback at all: the reconciler finds the payment (unverified list) and credits it", async () => {
    const accountId = await account();
    const topup = await start(accountId, 15_000);
    expect(await customer(topup, "pay-silently")).toBeNull();
    const report = await reconcile();
    expect(report.unverified_listed).toBeGreaterThanOrEqual(1);
    expect((await show(topup.id)).state).toBe("verified");
    expect(await credits(topup.id)).toHaveLength(1);
    await reconcile();
    expect(await credits(topup.id)).toHaveLength(1);
  });

  test("code 101 on first sight (verified elsewhere): a success, credited once", async () => {
    const accountId = await account();
    const topup = await start(accountId, 12_000);
    sim.pay(topup.authority, "pay-silently");
    const direct = await fetch(`${sim.url}/pg/v4/payment/verify.json`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ merchant_id: MERCHANT, amount: 120_000, authority: topup.authority }),
    });
    expect(((await direct.json()) as { data: { code: number } }).data.code).toBe(100);
    const landed = await fetch(`${t.url}/pay/zarinpal/callback?Authority=${topup.authority}&Status=OK`, { redirect: "manual" });
    expect(new URL(landed.headers.get("location")!).searchParams.get("outcome")).toBe("verified");
    expect((await show(topup.id)).reason).toContain("101");
    expect(await credits(topup.id)).toHaveLength(1);
  });
});

describe("refusals leave no credit and a clear state", () => {
  test("amount mismatch (−50) goes to review; the operator completes it once", async () => {
    const accountId = await account();
    const topup = await start(accountId, 11_000);
    sim.faults.verifyCode = -50;
    const landed = await customer(topup, "pay");
    expect(landed!.searchParams.get("outcome")).toBe("review");
    const shown = await show(topup.id);
    expect(shown.state).toBe("needs_review");
    expect(shown.reason).toContain("-50");
    expect(await credits(topup.id)).toHaveLength(0);
    // The reconciler leaves a top-up in review alone (the payment is still on the unverified list).
    await reconcile();
    expect((await show(topup.id)).state).toBe("needs_review");

    const completed = await t.admin("POST", `/admin/topups/${topup.id}/complete`, { reason: "checked with the bank" });
    expect(completed.status).toBe(200);
    expect(completed.body.state).toBe("verified");
    const twice = await t.admin("POST", `/admin/topups/${topup.id}/complete`, { reason: "checked with the bank" });
    expect(twice.status).toBe(400);
    expect(await credits(topup.id)).toHaveLength(1);
    expect(await balanceMicro(accountId)).toBe(11_000n * 1_000_000n);
  });

  test("a ref_id already credited to another top-up goes to review, not to a second credit", async () => {
    const accountId = await account();
    const first = await start(accountId, 14_000);
    await customer(first, "pay");
    const second = await start(accountId, 14_000);
    sim.faults.repeatRefId = true;
    const landed = await customer(second, "pay");
    expect(landed!.searchParams.get("outcome")).toBe("review");
    const shown = await show(second.id);
    expect(shown.state).toBe("needs_review");
    expect(shown.reason).toBe(`ref_id ${(await show(first.id)).ref_id} already belongs to top-up ${first.id}`);
    expect(await credits(second.id)).toHaveLength(0);
    expect(await balanceMicro(accountId)).toBe(14_000n * 1_000_000n);
  });

  test("a top-up in review rejected with --reverse: the payment is handed back, nothing credited", async () => {
    const accountId = await account();
    const topup = await start(accountId, 13_000);
    sim.faults.verifyCode = -50;
    await customer(topup, "pay");
    expect((await show(topup.id)).state).toBe("needs_review");
    const rejected = await t.admin("POST", `/admin/topups/${topup.id}/reject`, { reason: "amount differs at the bank", reverse: true });
    expect(rejected.status).toBe(200);
    expect(rejected.body.state).toBe("reversed");
    expect(sim.status(topup.authority)).toBe("REVERSED");
    await reconcile();
    expect((await show(topup.id)).state).toBe("reversed");
    expect(await credits(topup.id)).toHaveLength(0);
  });

  test("a callback saying OK for an unpaid payment (−51): failed, not paid", async () => {
    const accountId = await account();
    const topup = await start(accountId, 10_000);
    const landed = await fetch(`${t.url}/pay/zarinpal/callback?Authority=${topup.authority}&Status=OK`, { redirect: "manual" });
    expect(new URL(landed.headers.get("location")!).searchParams.get("outcome")).toBe("failed");
    const shown = await show(topup.id);
    expect(shown.state).toBe("failed");
    expect(shown.reason).toContain("-51: not paid");
    expect(await credits(topup.id)).toHaveLength(0);

    // Whoever knows the authority, however patient (one callback each PAYMENT_ASK_INTERVAL_MS), cannot make the gateway
    // verify it without end: while it may be paid, once per interval; past its expiry, CALLBACK_ATTEMPTS_MAX times at most.
    await t.gw.deps.db.rows(sql`UPDATE topups SET expires_at = now() - interval '1 second' WHERE id = ${topup.id}`);
    for (let i = 0; i < CALLBACK_ATTEMPTS_MAX + 5; i++) {
      await topupAskDue(t, topup.id, ASK_INTERVAL_MS);
      await fetch(`${t.url}/pay/zarinpal/callback?Authority=${topup.authority}&Status=OK`, { redirect: "manual" });
    }
    const verifies = sim.log.filter((e) => e.path === "/pg/v4/payment/verify.json" && e.body?.authority === topup.authority);
    expect(verifies).toHaveLength(CALLBACK_ATTEMPTS_MAX + 1); // the first, while payable, spent none
    expect((await show(topup.id)).state).toBe("failed");
  });

  test("an invalid authority (−54): failed with the reason; a rejected review stays uncredited", async () => {
    const accountId = await account();
    const topup = await start(accountId, 10_000);
    sim.faults.verifyCode = -54;
    await customer(topup, "pay");
    const shown = await show(topup.id);
    expect(shown.state).toBe("failed");
    expect(shown.reason).toContain("-54: invalid authority");
    expect(await credits(topup.id)).toHaveLength(0);
    const rejected = await t.admin("POST", `/admin/topups/${topup.id}/reject`, { reason: "not in review" });
    expect(rejected.status).toBe(400);
    // The payment did go through at the bank: the unverified list brings it back and it is credited once.
    await reconcile();
    expect((await show(topup.id)).state).toBe("verified");
    expect(await credits(topup.id)).toHaveLength(1);
  });

  test("an unknown authority on the callback lands on the result page and credits nothing", async () => {
    const landed = await fetch(`${t.url}/pay/zarinpal/callback?Authority=A000000000000000000000000000000000001&Status=OK`, {
      redirect: "manual",
    });
    expect(new URL(landed.headers.get("location")!).searchParams.get("outcome")).toBe("unknown");
    const odd = await (await fetch(`${t.url}/pay/result?outcome=constructor&topup=<b>`)).text();
    expect(odd).toContain('data-outcome="unknown"');
    expect(odd).not.toContain("<b>");
  });

  test("amounts outside the configured bounds are refused before the provider is asked", async () => {
    const accountId = await account();
    const small = await t.admin("POST", "/admin/topups", { account_id: accountId, amount_toman: 999 });
    expect(small.status).toBe(400);
    expect(small.body.error.param).toBe("amount_toman");
    const fraction = await t.admin("POST", "/admin/topups", { account_id: accountId, amount_toman: "1000.5" });
    expect(fraction.status).toBe(400);
  });
});

test("the CLI starts, lists, shows and reconciles top-ups", async () => {
  const accountId = await account();
  const gw = async (...argv: string[]) => {
    const out: string[] = [];
    const code = await runGw(argv, { GW_URL: t.url, ADMIN_TOKEN }, { out: (s) => out.push(s), err: (s) => out.push(s) });
    return { code, text: out.join("\n") };
  };
  const started = await gw("topups", "start", accountId, "25000");
  expect(started.code).toBe(0);
  const url = /(http:\/\/\S+\/pg\/StartPay\/(A\d+))/.exec(started.text)!;
  expect(started.text).toContain("redirected");
  sim.pay(url[2]!, "pay-silently");
  const reconciled = await gw("topups", "reconcile");
  expect(reconciled.text).toMatch(/verified\s+1/);
  const listed = await gw("topups", "list", "--account", accountId, "--state", "verified");
  expect(listed.text).toContain("25000 toman");
  const id = /top_[0-9A-Za-z]+/.exec(listed.text)![0];
  const shown = await gw("topups", "show", id);
  expect(shown.text).toContain("reply 1");
  expect((await gw("topups", "list", "--state", "paid")).code).toBe(2);
  const refused = await gw("topups", "complete", id, "--reason", "already verified");
  expect(refused.code).toBe(1);
  expect(refused.text).toContain("not needs_review");
});

test("/metrics counts top-ups per state, and `gw ledger audit` passes after all of the above", async () => {
  // One verified and one expired top-up of its own, so that this test holds when run alone too.
  const accountId = await account();
  const paid = await start(accountId, 10_000);
  expect((await customer(paid, "pay"))!.searchParams.get("outcome")).toBe("verified");
  const cancelled = await start(accountId, 10_000);
  await customer(cancelled, "cancel");
  await outlive(cancelled.id);
  await reconcile();
  expect((await show(cancelled.id)).state).toBe("expired");
  const metrics = await (await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).text();
  expect(metrics).toMatch(/darvaze_topups\{state="verified"\} [1-9]/);
  expect(metrics).toMatch(/darvaze_topups\{state="expired"\} [1-9]/);
  const out: string[] = [];
  const code = await runGw(["ledger", "audit"], { GW_URL: t.url, ADMIN_TOKEN }, { out: (s) => out.push(s), err: (s) => out.push(s) });
  expect(out.join("\n")).toContain("ledger audit: ok");
  expect(code).toBe(0);
});

test("the audit catches a verified top-up without its credit, or a credit without one", async () => {
  const db = t.gw.deps.db;
  const [row] = await db.rows<{ id: string }>(sql`SELECT id FROM topups WHERE state = 'verified' LIMIT 1`);
  await db.rows(sql`UPDATE topups SET state = 'failed' WHERE id = ${row!.id}`);
  try {
    const audit = (await t.admin("GET", "/admin/ledger/audit")).body as {
      ok: boolean;
      checks: { name: string; ok: boolean; violations: { topup: string }[] }[];
    };
    expect(audit.ok).toBe(false);
    const check = audit.checks.find((c) => c.name.startsWith("every verified top-up"))!;
    expect(check.violations.map((v) => v.topup)).toEqual([row!.id]);
  } finally {
    await db.rows(sql`UPDATE topups SET state = 'verified' WHERE id = ${row!.id}`);
  }
  expect((await t.admin("GET", "/admin/ledger/audit")).body.ok).toBe(true);
});
