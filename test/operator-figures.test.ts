/**
 * The operators' console's reads: a customer found by phone, name, account, key id, key display
 * or whole key; their usage (the last request's exact cost), wallet movements with reasons and
 * sessions; revenue whose totals add up by model, vendor and region and reconcile with the
 * ledger's usage transfers and the ledger audit, exact to the micro-toman; anomalies; the overview.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { accountForPhone } from "../src/ledger/wallets.ts";
import { ADMIN_TOKEN, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { until } from "./until.ts";

let t: TestGateway;
let funded: { accountId: string; keyId: string; key: string };
let phoneAccount: string;
const PHONE = "+989121234567";

beforeAll(async () => {
  t = await startTestGateway();
  funded = await t.fundedKey("1000");
  phoneAccount = (await accountForPhone(t.gw.deps.db, PHONE)).id;
  await t.admin("POST", `/admin/accounts/${phoneAccount}/topups`, { amount_toman: 50, reference: "phone-first" });
  const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: funded.key, maxRetries: 0 });
  for (const model of ["gpt-4o-mini", "gpt-4o-mini", "claude-3-5-haiku-latest"]) {
    await client.chat.completions.create({ model, messages: [{ role: "user", content: "hello" }] }).catch(() => null);
  }
}, SETUP_MS_MAX);
afterAll(() => t?.stop(), SETUP_MS_MAX);

const ids = (reply: { body: { data: { id: string }[] } }) => reply.body.data.map((c) => c.id);

describe("finding a customer", () => {
  test("by phone, written any way; by account id and its start; by name; by key id, display or whole key", async () => {
    for (const written of ["09121234567", "+98 912 123 4567", "۰۹۱۲۱۲۳۴۵۶۷"]) {
      const found = await t.admin("GET", `/admin/customers?q=${encodeURIComponent(written)}`);
      expect({ written, ids: ids(found), matched: found.body.data[0]?.matched }).toEqual({
        written,
        ids: [phoneAccount],
        matched: "phone",
      });
    }
    expect(ids(await t.admin("GET", `/admin/customers?q=${funded.accountId}`))).toEqual([funded.accountId]);
    expect(ids(await t.admin("GET", `/admin/customers?q=${funded.accountId.slice(0, -3)}`))).toContain(funded.accountId);
    const key = (await t.admin("GET", `/admin/accounts/${funded.accountId}`)).body.keys[0];
    for (const q of [funded.keyId, key.display, funded.key]) {
      const found = await t.admin("GET", `/admin/customers?q=${encodeURIComponent(q)}`);
      expect(found.body.data.find((c: any) => c.id === funded.accountId)?.matched).toBe("key");
    }
    expect(ids(await t.admin("GET", `/admin/customers?q=${encodeURIComponent("912123")}`))).toContain(phoneAccount); // the name is the phone
    expect((await t.admin("GET", "/admin/customers?q=%25")).body.data.length).toBe(0); // a LIKE wildcard is a character
    expect((await t.admin("GET", "/admin/customers?q=")).status).toBe(400);
    expect((await t.admin("GET", "/admin/customers?q=a&extra=1")).status).toBe(400);
  });
});

describe("a customer's page", () => {
  test("usage with the last request's exact cost, its CSV, wallet movements with reasons, sessions", async () => {
    await t.admin("POST", `/admin/accounts/${funded.accountId}/adjustments`, {
      amount_toman: "-0.5",
      reason: "refund topup t-1",
      reference: "r1",
    });
    const usage = await t.admin("GET", `/admin/accounts/${funded.accountId}/usage?limit=10`);
    expect(usage.status).toBe(200);
    expect(usage.body.data.length).toBeGreaterThan(0);
    const shown = (await t.admin("GET", `/admin/accounts/${funded.accountId}`)).body.recent_usage[0];
    expect(usage.body.data[0].cost_micro_toman).toBe(shown.billed_micro_toman);
    const sum = usage.body.data.reduce((s: bigint, r: any) => s + BigInt(r.cost_micro_toman), 0n);
    expect(BigInt(usage.body.totals.cost_micro_toman)).toBe(sum);
    const csv = await fetch(`${t.url}/admin/accounts/${funded.accountId}/usage.csv`, {
      headers: { authorization: "Bearer test-admin-token-0123456789" },
    });
    expect(csv.headers.get("content-type")).toContain("text/csv");
    expect((await csv.text()).trim().split("\r\n").length).toBe(usage.body.data.length + 1);
    const wallet = await t.admin("GET", `/admin/accounts/${funded.accountId}/wallet`);
    expect(wallet.body.moves.map((m: any) => [m.kind, m.amount_micro_toman, m.reason, m.refund_of])).toEqual([
      ["adjustment", "-500000", "refund topup t-1", null],
      ["topup", "1000000000", null, null],
    ]);
    // A refund names its top-up in its reference: once per top-up.
    const refund = { amount_toman: "-1", reason: "refund of top-up top_abc", reference: "refund-top_abc" };
    expect((await t.admin("POST", `/admin/accounts/${funded.accountId}/adjustments`, refund)).status).toBe(201);
    expect((await t.admin("POST", `/admin/accounts/${funded.accountId}/adjustments`, refund)).body.credited).toBe(false);
    expect((await t.admin("POST", `/admin/accounts/${funded.accountId}/adjustments`, { ...refund, amount_toman: "-2" })).status).toBe(409);
    const refunded = (await t.admin("GET", `/admin/accounts/${funded.accountId}/wallet`)).body.moves[0];
    expect([refunded.refund_of, refunded.amount_micro_toman]).toEqual(["top_abc", "-1000000"]);
    expect((await t.admin("GET", `/admin/accounts/${funded.accountId}/sessions`)).body).toEqual({ object: "list", data: [] });
    expect((await t.admin("GET", "/admin/accounts/acc_none/wallet")).status).toBe(404);
    expect((await t.admin("GET", "/admin/accounts/acc_none/usage")).status).toBe(404);
  });
});

describe("numbers that add up", () => {
  test("revenue: every breakdown sums to the total, the total is the ledger's usage transfers, the ledger audit agrees", async () => {
    const all = await t.admin("GET", "/admin/revenue?from=2000-01-01T00:00:00Z");
    expect(all.status).toBe(200);
    const total = BigInt(all.body.revenue_micro_toman);
    expect(total).toBeGreaterThan(0n);
    for (const by of ["by_model", "by_vendor", "by_region"]) {
      const groups = all.body[by] as any[];
      expect({ by, sum: groups.reduce((s, g) => s + BigInt(g.revenue_micro_toman), 0n) }).toEqual({ by, sum: total });
      expect(groups.reduce((s, g) => s + g.requests, 0)).toBe(all.body.requests);
    }
    expect(all.body.reconciled).toBe(true);
    expect(all.body.ledger_usage_micro_toman).toBe(all.body.revenue_micro_toman);
    // Every account's usage together is the revenue, to the micro-toman.
    const perAccount = await Promise.all(
      [funded.accountId, phoneAccount].map(async (id) =>
        BigInt((await t.admin("GET", `/admin/accounts/${id}/usage`)).body.totals.cost_micro_toman),
      ),
    );
    expect(perAccount.reduce((s, v) => s + v, 0n)).toBe(total);
    const audit = await t.admin("GET", "/admin/ledger/audit");
    expect(audit.body.ok).toBe(true);
    // Today's window (Tehran) holds the same requests: they were all made just now.
    const today = await t.admin("GET", "/admin/revenue");
    expect(today.body.revenue_micro_toman).toBe(all.body.revenue_micro_toman);
    expect(new Date(today.body.from).getTime()).toBeLessThanOrEqual(Date.now());
    expect(all.body.by_region.map((g: any) => g.key)).toEqual(
      expect.arrayContaining([expect.stringMatching(/^(in-country|abroad|unknown)$/)]),
    );
    const empty = await t.admin("GET", "/admin/revenue?from=2000-01-01T00:00:00Z&to=2000-01-02T00:00:00Z");
    expect([empty.body.revenue_micro_toman, empty.body.requests, empty.body.reconciled]).toEqual(["0", 0, true]);
    expect((await t.admin("GET", "/admin/revenue?from=yesterday")).status).toBe(400);
  });

  test("the overview: today's and the month's revenue, the audit, dead letters, payments, pools", async () => {
    await until(async () => (await t.admin("GET", "/admin/overview")).status === 200);
    const o = (await t.admin("GET", "/admin/overview")).body;
    expect(o.object).toBe("overview");
    expect(BigInt(o.month.revenue_micro_toman)).toBeGreaterThanOrEqual(BigInt(o.today.revenue_micro_toman));
    expect(o.ledger_audit).toMatchObject({ ok: true, failed: [] });
    // Run at most OVERVIEW_AUDIT_FRESH_MS ago: a second overview at once shows the same run.
    expect((await t.admin("GET", "/admin/overview")).body.ledger_audit.checked_at).toBe(o.ledger_audit.checked_at);
    expect(o.dead_letters.awaiting_replay).toBe(0);
    expect(Array.isArray(o.pools_in_trouble)).toBe(true);
    const anomalies = await t.admin("GET", "/admin/anomalies");
    expect(anomalies.body.object).toBe("list");
  });
});

describe("gw equivalents", () => {
  const gw = async (...args: string[]) => {
    const child = Bun.spawn(["bun", "run", "src/cli/gw.ts", ...args], {
      cwd: `${import.meta.dir}/..`,
      env: { ...process.env, GW_URL: t.url, ADMIN_TOKEN },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
    return { code, stdout, stderr };
  };

  test("customers search, accounts usage / wallet / sessions, revenue, anomalies, overview", async () => {
    const found = await gw("customers", "search", "09121234567");
    expect({ code: found.code, hit: found.stdout.includes(phoneAccount), err: found.stderr }).toEqual({ code: 0, hit: true, err: "" });
    const used = await gw("accounts", "usage", funded.accountId, "--model", "gpt-4o-mini", "--limit", "5");
    expect(used.code).toBe(0);
    expect(used.stdout).toContain("gpt-4o-mini");
    expect((await gw("accounts", "wallet", funded.accountId)).stdout).toContain("refund topup t-1");
    expect((await gw("accounts", "sessions", funded.accountId)).stdout).toContain("no live sessions");
    const revenue = await gw("revenue", "--from", "2000-01-01T00:00:00Z");
    const all = (await t.admin("GET", "/admin/revenue?from=2000-01-01T00:00:00Z")).body;
    expect(revenue.stdout).toContain(`${all.revenue_toman} toman, ${all.requests} requests`);
    expect(revenue.stdout).toContain("by vendor");
    expect((await gw("anomalies")).code).toBe(0);
    const overview = await gw("overview");
    expect(overview.stdout).toContain("ledger audit: ok");
    expect((await gw("revenue", "--from", "yesterday")).code).toBe(2);
    const entry = (await t.admin("GET", "/admin/catalog")).body.data.find((e: any) => e.id === "gpt-4o-mini");
    const { id: _, ...rest } = entry;
    const file = join(mkdtempSync(join(tmpdir(), "preview-")), "entry.json");
    writeFileSync(file, JSON.stringify({ ...rest, usd_per_1m: { ...rest.usd_per_1m, input_token: "0.17" } }));
    const preview = await gw("catalog", "preview", "gpt-4o-mini", "--file", file);
    expect({ code: preview.code, err: preview.stderr }).toEqual({ code: 0, err: "" });
    expect(preview.stdout).toMatch(/input_token\s+\S+\s+0\.17\s+\d+\s+\d+/);
    expect((await t.admin("GET", "/admin/catalog")).body.data.find((e: any) => e.id === "gpt-4o-mini").usd_per_1m.input_token).toBe(
      rest.usd_per_1m.input_token,
    );
  });
});

describe("a price change's preview", () => {
  test("says today's toman prices before and after, and /v1/models shows the after once applied; nothing changes before", async () => {
    const entry = (await t.admin("GET", "/admin/catalog")).body.data.find((e: any) => e.id === "claude-3-5-haiku");
    const { id: _, ...rest } = entry;
    const changed = { ...rest, usd_per_1m: { ...rest.usd_per_1m, input_token: "0.91" } };
    const preview = await t.admin("POST", "/admin/catalog/models/claude-3-5-haiku/preview", changed);
    expect(preview.status).toBe(200);
    const input = preview.body.prices.find((p: any) => p.key === "input_token");
    expect(input.usd_per_1m_after).toBe("0.91");
    const model = async () =>
      (await fetch(`${t.url}/v1/models/claude-3-5-haiku`, { headers: { authorization: `Bearer ${funded.key}` } })).json() as Promise<any>;
    expect(String((await model()).pricing.input)).toBe(input.toman_per_1m_before);
    expect((await t.admin("PUT", "/admin/catalog/models/claude-3-5-haiku", changed)).status).toBe(200);
    expect(String((await model()).pricing.input)).toBe(input.toman_per_1m_after);
    expect(BigInt(input.toman_per_1m_after)).toBe((91n * BigInt(preview.body.toman_per_usd) + 50n) / 100n);
  });
});
