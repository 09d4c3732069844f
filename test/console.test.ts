/**
 * The account area in a real browser (Debian's chromium through playwright-core): sign in with
 * the code the SMS simulator received, top up through the Zarinpal simulator, create a key,
 * call /v1/chat/completions with the official openai client using the key copied from the page,
 * see the request and its exact cost on the usage page, export CSV, revoke, and see the next call
 * refused. Every form is filled and submitted from the keyboard. axe-core checks every page in
 * Persian and English; screenshots go to test/artifacts/console-<page>-<lang>.png. Finally the
 * key's secret is searched for in every response the browser received after creation and in the
 * gateway's log. Without /usr/bin/chromium the suite is skipped LOUDLY.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { chromium, type Browser, type Page } from "playwright-core";
import { createLogger } from "../src/log.ts";
import { startSmsSimulator, type SmsSimulator } from "../src/sim/sms.ts";
import { startZarinpalSim, type ZarinpalSim } from "../src/sim/zarinpal/server.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";

const CHROMIUM = "/usr/bin/chromium";
const ARTIFACTS = join(import.meta.dir, "artifacts");
const MERCHANT = "1344b5d4-0048-11e8-94db-005056a205be";
const SMS_KEY = "browser-sms-key";
const PHONE = "09121112233";
const MODEL = "gpt-4o-mini";
const PAGES = ["overview", "wallet", "keys", "usage", "pricing", "security"] as const;
const AXE = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

const suite = existsSync(CHROMIUM) ? describe : describe.skip;
if (!existsSync(CHROMIUM))
  process.stderr.write(`\n*** SKIPPED the account-area browser test: it needs ${CHROMIUM} (apt-get install -y chromium) ***\n\n`);

suite("account area in a browser", () => {
  let sms: SmsSimulator;
  let zarinpal: ZarinpalSim;
  let t: TestGateway;
  let browser: Browser;
  let page: Page;
  const logLines: string[] = [];
  /** Bodies of every response the page received, with the time it arrived. */
  const captured: { at: number; url: string; body: string }[] = [];

  beforeAll(async () => {
    sms = await startSmsSimulator({ apiKey: SMS_KEY, template: "darvaze-otp" });
    zarinpal = await startZarinpalSim({ merchantIds: [MERCHANT] });
    t = await startTestGateway(
      {
        SMS_SENDER: "kavenegar",
        KAVENEGAR_API_KEY: SMS_KEY,
        KAVENEGAR_URL: sms.url,
        ZARINPAL_MERCHANT_ID: MERCHANT,
        ZARINPAL_BASE_URL: zarinpal.url,
        PAYMENT_RETURN_URL: "/console/#/wallet",
        LOG_LEVEL: "debug",
      },
      { log: createLogger("debug", (line) => logLines.push(line)) },
    );
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu"] });
    const context = await browser.newContext({ viewport: { width: 1200, height: 900 }, locale: "fa-IR" });
    await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: t.url });
    page = await context.newPage();
    page.on("dialog", (dialog) => void dialog.accept());
    page.on("response", async (response) => {
      const body = await response.text().catch(() => "");
      captured.push({ at: Date.now(), url: response.url(), body });
    });
  }, SETUP_MS_MAX);

  afterAll(async () => {
    await browser?.close();
    await t?.stop();
    await zarinpal?.stop();
    await sms?.stop();
  }, SETUP_MS_MAX);

  /**
   * Polls a condition written as page source. (waitForFunction evaluates strings with eval, which
   * the console's Content-Security-Policy rightly forbids; page.evaluate is not subject to it.)
   */
  async function waitFor(expression: string, timeoutMs = 15_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!(await page.evaluate(expression).catch(() => false))) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${expression}`);
      await Bun.sleep(50);
    }
  }
  const ready = (view: string) =>
    waitFor(`document.getElementById("main").dataset.view === ${JSON.stringify(view)} && !!document.getElementById("main").dataset.ready`);
  /** Moves focus with Tab until the element with this id (or matching this selector) has it: the keyboard path to it. */
  async function tabTo(idOrSelector: string, options: { back?: boolean; pressesMax?: number } = {}): Promise<void> {
    const pressesMax = options.pressesMax ?? 80;
    const selector = /^[\w-]+$/.test(idOrSelector) ? `#${idOrSelector}` : idOrSelector;
    for (let i = 0; i < pressesMax; i++) {
      if (await page.evaluate(`!!document.activeElement && document.activeElement.matches(${JSON.stringify(selector)})`)) return;
      await page.keyboard.press(options.back ? "Shift+Tab" : "Tab");
    }
    throw new Error(`${selector} cannot be reached with Tab`);
  }
  /** To a page by its link in the header, by keyboard: back from the page's content to the navigation. */
  async function go(view: string) {
    await tabTo(`#nav-${view}`, { back: true });
    await page.keyboard.press("Enter");
    await ready(view);
  }
  async function axe(label: string) {
    await page.evaluate(AXE);
    const result = (await page.evaluate(`axe.run(document, { resultTypes: ["violations"] })`)) as {
      violations: { id: string; impact: string; nodes: { target: string[] }[] }[];
    };
    const serious = result.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
    expect({ page: label, serious: serious.map((v) => `${v.id}: ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`) }).toEqual({
      page: label,
      serious: [],
    });
  }

  test("the whole flow, by keyboard, in Persian and English", async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.goto(`${t.url}/console/`);
    await ready("signin");
    expect(await page.getAttribute("html", "dir")).toBe("rtl");
    expect(await page.isHidden("#code")).toBe(true); // until a code was sent
    await axe("signin-fa");
    await page.screenshot({ path: join(ARTIFACTS, "console-signin-fa.png"), fullPage: true });

    // Sign in: the phone in Persian digits, the code as the SMS simulator received it.
    await tabTo("phone");
    await page.keyboard.type("۰۹۱۲۱۱۱۲۲۳۳");
    await page.keyboard.press("Enter");
    await page.waitForSelector("#phone-form", { state: "hidden" });
    expect(await page.isHidden("#code")).toBe(false);
    expect(await page.evaluate("document.activeElement.id")).toBe("code");
    const code = sms.lastCode(PHONE);
    expect(code).toMatch(/^\d{6}$/);
    // A wrong code first: refused in Persian, with the tries left.
    await page.keyboard.type(code === "000000" ? "111111" : "000000");
    await page.keyboard.press("Enter");
    await waitFor(`document.getElementById("signin-error").textContent.includes("کد نادرست است")`);
    expect(await page.textContent("#signin-error")).toContain("4 tries left");
    await page.keyboard.press("Control+A");
    await page.keyboard.type(code!);
    await page.keyboard.press("Enter");
    await ready("overview");
    await page.waitForSelector("#not-funded");

    // Keys are refused before the wallet is funded.
    await go("keys");
    expect(await page.isDisabled("#key-create")).toBe(true);
    await page.waitForSelector("#keys-not-funded");

    // Top up through the Zarinpal simulator's bank page and come back with the outcome.
    await go("wallet");
    await tabTo("topup-amount");
    await page.keyboard.type("۲۰۰۰۰۰");
    await page.keyboard.press("Enter");
    await page.waitForURL(/\/pg\/StartPay\//, { timeout: 15_000 });
    await tabTo('button[value="pay"]');
    await page.keyboard.press("Enter");
    await page.waitForURL(/\/console\/\?topup=/, { timeout: 15_000 });
    await ready("wallet");
    await page.waitForSelector("#topup-outcome.ok");
    expect(await page.getAttribute("#topups tbody tr", "data-state")).toBe("verified");
    const refId = await page.textContent("#topups tbody tr td:nth-child(4)");
    expect(refId).toMatch(/^\d+$/);

    // A payment whose customer never came back (paid, tab closed): "check status" asks the bank and credits it.
    await tabTo("preset-100000");
    await page.keyboard.press("Enter");
    await page.waitForURL(/\/pg\/StartPay\//, { timeout: 15_000 });
    await tabTo('button[value="pay-silently"]');
    await Promise.all([page.waitForNavigation(), page.keyboard.press("Enter")]);
    await page.goto(`${t.url}/console/#/wallet`); // typed into the address bar
    await ready("wallet");
    await tabTo('#topups tr[data-state="redirected"] button');
    await page.keyboard.press("Enter");
    await waitFor(`document.querySelectorAll('#topups tr[data-state="verified"]').length === 2`);

    // Create a key with limits, from the keyboard; read it from the page.
    await go("keys");
    await tabTo("key-name");
    await page.keyboard.type("کلید آزمایشی");
    await tabTo("key-rpm");
    await page.keyboard.type("۶۰");
    await tabTo("key-create");
    await page.keyboard.press("Enter");
    await page.waitForSelector("#new-key");
    const key = (await page.textContent("#new-key"))!.trim();
    const createdAt = Date.now();
    expect(key).toMatch(/^sk-dvz-\w{40}$/);
    expect(await page.textContent("#new-key-exports")).toBe(`export OPENAI_BASE_URL=${t.url}/v1\nexport OPENAI_API_KEY=${key}`);
    await page.keyboard.press("Enter"); // the copy button has focus
    expect(await page.evaluate("navigator.clipboard.readText()")).toBe(key);
    await page.screenshot({ path: join(ARTIFACTS, "console-key-created-fa.png"), fullPage: true });
    await tabTo("key-saved");
    await page.keyboard.press("Enter");
    await ready("keys");
    expect(await page.textContent("#new-key-panel")).toBe("");

    // The key works with the official client.
    const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
    const reply = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "سلام" }], max_tokens: 12 });
    expect(reply.choices[0]!.message.content).toBeTruthy();
    // The usage record is written within the durability bound (through the usage stream with NATS).
    const accountId = ((await page.evaluate(`fetch("/console/api/session").then((r) => r.json())`)) as { account_id: string }).account_id;
    let record: { request_id: string; billed_micro_toman: string } | undefined;
    for (const deadline = Date.now() + 15_000; !record && Date.now() < deadline; await Bun.sleep(100)) {
      await t.gw.deps.writer.flush();
      record = (await t.admin("GET", `/admin/accounts/${accountId}`)).body.recent_usage[0];
    }
    expect(record!.request_id).toBeTruthy();

    // The usage page shows the request and its exact cost; totals agree.
    await go("usage");
    const row = `tr[data-request="${record!.request_id}"]`;
    await page.waitForSelector(row);
    expect(await page.getAttribute(row, "data-cost-micro")).toBe(record!.billed_micro_toman);
    expect(await page.getAttribute("#usage-totals", "data-cost-micro")).toBe(record!.billed_micro_toman);
    expect(await page.locator("#usage-chart rect").count()).toBe(1);

    // Filters: a model with no requests empties the list and the totals; clearing it brings them back.
    await tabTo("filter-model");
    await page.keyboard.type("no-such-model");
    await page.keyboard.press("Enter");
    await waitFor(`document.getElementById("usage-totals")?.dataset.costMicro === "0"`);
    expect(await page.locator("#usage-table").count()).toBe(0);
    await tabTo("filter-model");
    await page.keyboard.press("Control+A");
    await page.keyboard.press("Backspace");
    await page.keyboard.press("Enter");
    await waitFor(`document.getElementById("usage-totals")?.dataset.costMicro === ${JSON.stringify(record!.billed_micro_toman)}`);

    // CSV export (a download).
    await tabTo("usage-csv");
    const [download] = await Promise.all([page.waitForEvent("download"), page.keyboard.press("Enter")]);
    const csv = readFileSync((await download.path())!, "utf8");
    expect(csv.split("\r\n")[1]).toContain(record!.request_id);
    expect(csv.split("\r\n")[1]).toContain(`,${record!.billed_micro_toman},`);

    // Every page in both languages: screenshots and axe.
    for (const lang of ["fa", "en"] as const) {
      if ((await page.getAttribute("html", "lang")) !== lang) {
        await tabTo("lang-switch");
        await page.keyboard.press("Enter");
        await waitFor(`document.documentElement.lang === ${JSON.stringify(lang)}`);
      }
      expect(await page.getAttribute("html", "dir")).toBe(lang === "fa" ? "rtl" : "ltr");
      for (const view of PAGES) {
        await go(view);
        await page.screenshot({ path: join(ARTIFACTS, `console-${view}-${lang}.png`), fullPage: true });
        await axe(`${view}-${lang}`);
      }
    }
    expect(existsSync(join(ARTIFACTS, "console-usage-en.png"))).toBe(true);

    // A phone's screen: no page is wider than it (wide tables scroll inside their own region).
    await page.setViewportSize({ width: 390, height: 844 });
    for (const view of PAGES) {
      await go(view);
      expect({ view, overflow: await page.evaluate("document.documentElement.scrollWidth - window.innerWidth") }).toEqual({
        view,
        overflow: 0,
      });
    }
    await go("keys");
    await page.screenshot({ path: join(ARTIFACTS, "console-keys-phone-en.png"), fullPage: true });
    await page.setViewportSize({ width: 1200, height: 900 });

    // Revoke from the keys page (keyboard; the confirmation is accepted), then the next call is refused.
    await go("keys");
    await tabTo("button.revoke");
    await page.keyboard.press("Enter");
    await waitFor(`!document.querySelector("button.revoke")`);
    const refused = await client.chat.completions
      .create({ model: MODEL, messages: [{ role: "user", content: "hi" }] })
      .catch((error) => error);
    expect(refused.status).toBe(401);
    expect(refused.error.message).toContain("revoked");

    // Sign out by keyboard; the sign-in page in English passes axe too.
    await tabTo("sign-out", { back: true });
    await page.keyboard.press("Enter");
    await ready("signin");
    expect(await page.getAttribute("html", "lang")).toBe("en");
    await axe("signin-en");
    await page.screenshot({ path: join(ARTIFACTS, "console-signin-en.png"), fullPage: true });
    expect((await page.evaluate(`fetch("/console/api/session").then((r) => r.status)`)) as number).toBe(401);

    // The secret never appears again: not in any response after the creation reply, not in the log.
    const creation = captured.filter((c) => c.body.includes(key));
    expect(creation.map((c) => new URL(c.url).pathname)).toEqual(["/console/api/keys"]);
    expect(creation[0]!.at).toBeLessThanOrEqual(createdAt);
    expect(captured.filter((c) => c.at > createdAt).length).toBeGreaterThan(10);
    expect(logLines.length).toBeGreaterThan(10);
    expect(logLines.filter((line) => line.includes(key))).toEqual([]);
    expect(logLines.filter((line) => line.includes(key.slice(7)))).toEqual([]);
  }, 180_000);
});
