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
import { existsSync, mkdirSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI, { toFile } from "openai";
import { chromium, type Browser, type Page } from "playwright-core";
import { ALERT_TEMPLATE_DEFAULT } from "../src/accountArea/sms.ts";
import { microToToman } from "../src/catalog/prices.ts";
import { createLogger } from "../src/log.ts";
import { startSmsSimulator, type SmsSimulator } from "../src/sim/sms.ts";
import { startZarinpalSim, type ZarinpalSim } from "../src/sim/zarinpal/server.ts";
import { seriousViolations } from "./axe.ts";
import { BATCH_POLL_MS } from "./batchPoll.ts";
import { balanceMicroOf, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { until, untilValue } from "./until.ts";

const CHROMIUM = "/usr/bin/chromium";
/** How long a page may take to show what a step awaits (a browser on a loaded machine). */
const PAGE_MS_MAX = 15_000;
const ARTIFACTS = join(import.meta.dir, "artifacts");
const MERCHANT = "1344b5d4-0048-11e8-94db-005056a205be";
const SMS_KEY = "browser-sms-key";
const PHONE = "09121112233";
const MODEL = "gpt-4o-mini";
/** Lines of the batch cancelled from the page: enough, at the simulator's 600 ms a line, to outlast a few reads of the list. */
const SLOW_LINES = 30;
const PAGES = ["overview", "wallet", "keys", "usage", "batches", "pricing", "security"] as const;

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
  /** What each confirm() the page asked said. */
  const dialogs: string[] = [];
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
    page.on("dialog", (dialog) => {
      dialogs.push(dialog.message());
      void dialog.accept();
    });
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
  const waitFor = (expression: string): Promise<void> =>
    until(async () => Boolean(await page.evaluate(expression).catch(() => false)), { msMax: PAGE_MS_MAX, what: expression, pollMs: 50 });
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
    expect({ page: label, serious: await seriousViolations(page) }).toEqual({ page: label, serious: [] });
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
    // Persian only: the tries left in Persian digits, no English sentence.
    expect(await page.textContent("#signin-error")).toContain("۴ بار دیگر");
    expect(await page.textContent("#signin-error")).not.toMatch(/[A-Za-z0-9]/);
    expect(await page.textContent("#code-sent")).toContain("۰۹۱۲۱۱۱۲۲۳۳");
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
    expect(refId).toMatch(/^[۰-۹]+$/); // Persian digits on the Persian page
    const paidId = (await page.getAttribute("#topups tbody tr", "data-topup"))!;
    const paidRef = (await page.getAttribute("#topups tbody tr td.ref", "data-ref"))!;
    expect(paidRef).toMatch(/^\d+$/);
    // The outcome is shown once: the address loses it, and a reload does not bring it back.
    expect(page.url()).toBe(`${t.url}/console/#/wallet`);
    await page.reload();
    await ready("wallet");
    expect(await page.locator("#topup-outcome").count()).toBe(0);
    // The wallet shows the balance.
    expect(await page.textContent("#wallet-balance .value")).toContain("۲۰۰٬۰۰۰");

    // A cancelled payment reads as cancelled, in the message and in its row (nothing to check), and only once.
    await tabTo("preset-500000");
    await page.keyboard.press("Enter");
    await page.waitForURL(/\/pg\/StartPay\//, { timeout: 15_000 });
    await tabTo('button[value="cancel"]');
    await page.keyboard.press("Enter");
    await page.waitForURL(/\/console\/\?topup=/, { timeout: 15_000 });
    await ready("wallet");
    await page.waitForSelector("#topup-outcome.warn");
    expect(await page.textContent("#topup-outcome")).toBe("نتیجهٔ پرداخت: لغو شده — پرداخت لغو شد و مبلغی کسر نشد.");
    expect(await page.locator('#topups tr[data-state="cancelled"]').count()).toBe(1);
    expect(await page.locator('#topups tr[data-state="cancelled"] button').count()).toBe(0);
    await go("overview");
    await go("wallet");
    expect(await page.locator("#topup-outcome").count()).toBe(0);

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
    // The new key is listed at once, while its secret is still on the page.
    await waitFor(`document.querySelectorAll('#keys-table tr[data-key]').length === 1`);
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

    // A low-balance alert at the whole balance (300,000 toman), set on the wallet page by keyboard.
    await go("wallet");
    await tabTo("alert-threshold");
    await page.keyboard.type("۳۰۰۰۰۰");
    await page.keyboard.press("Enter");
    await waitFor(`document.getElementById("alert-saved")?.textContent.includes("۳۰۰٬۰۰۰")`);

    // The key works with the official client.
    const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
    const reply = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "سلام" }], max_tokens: 12 });
    expect(reply.choices[0]!.message.content).toBeTruthy();
    // The usage record is written within the durability bound (through the usage stream with NATS).
    const accountId = ((await page.evaluate(`fetch("/console/api/session").then((r) => r.json())`)) as { account_id: string }).account_id;
    const record: { request_id: string; billed_micro_toman: string } = await untilValue(
      async () => {
        await t.gw.deps.writer.flush();
        return (await t.admin("GET", `/admin/accounts/${accountId}`)).body.recent_usage[0];
      },
      { msMax: PAGE_MS_MAX, what: "the account's usage record", pollMs: 100 },
    );
    expect(record.request_id).toBeTruthy();
    // Its settlement took the balance below the threshold: one SMS, and the overview's banner.
    const alerts = () => sms.sent.filter((m) => m.template === ALERT_TEMPLATE_DEFAULT && m.receptor === PHONE);
    await until(() => alerts().length > 0, { msMax: PAGE_MS_MAX, what: "the balance alert SMS" });
    expect(alerts().map((m) => m.token)).toEqual(["299999"]);

    // The usage page shows the request and its exact cost; totals agree.
    await go("usage");
    const row = `tr[data-request="${record.request_id}"]`;
    await page.waitForSelector(row);
    expect(await page.getAttribute(row, "data-cost-micro")).toBe(record.billed_micro_toman);
    expect(await page.getAttribute("#usage-totals", "data-cost-micro")).toBe(record.billed_micro_toman);
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
    await waitFor(`document.getElementById("usage-totals")?.dataset.costMicro === ${JSON.stringify(record.billed_micro_toman)}`);

    // CSV export (a download).
    await tabTo("usage-csv");
    const [download] = await Promise.all([page.waitForEvent("download"), page.keyboard.press("Enter")]);
    const csv = readFileSync((await download.path())!, "utf8");
    expect(csv.split("\r\n")[1]).toContain(record.request_id);
    expect(csv.split("\r\n")[1]).toContain(`,${record.billed_micro_toman},`);

    // A batch of two chat lines through the official client: the batches page shows it with its
    // progress and its cost, the output file downloads from the page, and the usage page marks its lines.
    const input = ["Hello", "Good day"].map((text, i) =>
      JSON.stringify({
        custom_id: `line-${i + 1}`,
        method: "POST",
        url: "/v1/chat/completions",
        body: { model: MODEL, messages: [{ role: "user", content: text }], max_tokens: 8 },
      }),
    );
    const batchFile = await client.files.create({ file: await toFile(Buffer.from(`${input.join("\n")}\n`), "in.jsonl"), purpose: "batch" });
    const created = await client.batches.create({
      input_file_id: batchFile.id,
      endpoint: "/v1/chat/completions",
      completion_window: "24h",
    });
    const batch = (await untilValue(
      async () => {
        const b = await client.batches.retrieve(created.id);
        return b.status === "completed" ? b : undefined;
      },
      { msMax: PAGE_MS_MAX, what: "the batch completed", pollMs: BATCH_POLL_MS },
    )) as unknown as { id: string; output_file_id: string; cost_micro_toman: string };
    expect(BigInt(batch.cost_micro_toman)).toBeGreaterThan(0n);
    await go("batches");
    const batchRow = `#batches-table tr[data-batch="${batch.id}"]`;
    await page.waitForSelector(batchRow);
    expect(await page.getAttribute(batchRow, "data-status")).toBe("completed");
    expect(await page.textContent(`${batchRow} .batch-status`)).toBe("انجام شد");
    expect(await page.textContent(`${batchRow} .progress-text`)).toBe("۲ از ۲");
    expect(await page.getAttribute(`${batchRow} progress`, "value")).toBe("2");
    expect(await page.getAttribute(batchRow, "data-cost-micro")).toBe(batch.cost_micro_toman);
    const costText = new Intl.NumberFormat("fa-IR", { maximumFractionDigits: 6 }).format(
      microToToman(BigInt(batch.cost_micro_toman)) as Intl.StringNumericLiteral,
    );
    expect(await page.textContent(`${batchRow} .cost`)).toBe(costText);
    await tabTo(`${batchRow} a.output-file`);
    const [output] = await Promise.all([page.waitForEvent("download"), page.keyboard.press("Enter")]);
    const outputLines = readFileSync((await output.path())!, "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(outputLines.map((l) => l.custom_id)).toEqual(["line-1", "line-2"]);
    const linesCost = outputLines.reduce((sum, l) => sum + BigInt(Math.round(l.response.body.usage.cost * 1e6)), 0n);
    expect(linesCost).toBe(BigInt(batch.cost_micro_toman));
    // The usage page marks the batch's lines (which batch, which line); their costs are the batch's.
    await go("usage");
    await waitFor(`document.querySelectorAll('#usage-table tr[data-batch="${batch.id}"]').length === 2`);
    const batchRows = page.locator(`#usage-table tr[data-batch="${batch.id}"]`);
    const rowCosts = await batchRows.evaluateAll((rows) => rows.map((r) => r.getAttribute("data-cost-micro")!));
    expect(rowCosts.reduce((sum, c) => sum + BigInt(c), 0n)).toBe(BigInt(batch.cost_micro_toman));
    expect((await batchRows.locator(".source").allTextContents()).sort()).toEqual([`دسته‌ای، خط ۱ ${batch.id}`, `دسته‌ای، خط ۲ ${batch.id}`]);
    expect(await page.textContent(`tr[data-request="${record.request_id}"] .source`)).toBe("زنده");
    const batchCsv = await (await page.request.get(`${t.url}/console/api/usage.csv`)).text();
    expect(batchCsv.split("\r\n")[0]).toEndWith(",batch_id,batch_line");
    expect(
      batchCsv
        .split("\r\n")
        .filter((l) => l.includes(`,${batch.id},`))
        .map((l) => l.split(",").at(-1))
        .sort(),
    ).toEqual(["1", "2"]);

    // A batch that runs slowly: its page follows it without a reload (the list is read again while
    // a batch is live), and its Cancel, by keyboard and confirmed, stops it mid-way: the wallet pays
    // only for the lines run.
    t.sim!.options.ttftMs = 600;
    try {
      const before = await balanceMicroOf(t.url, key);
      const slowLines = Array.from({ length: SLOW_LINES }, (_, i) =>
        JSON.stringify({
          custom_id: `slow-${i + 1}`,
          method: "POST",
          url: "/v1/chat/completions",
          body: { model: MODEL, messages: [{ role: "user", content: `Item ${i + 1}` }], max_tokens: 8 },
        }),
      );
      const slowFile = await client.files.create({
        file: await toFile(Buffer.from(`${slowLines.join("\n")}\n`), "slow.jsonl"),
        purpose: "batch",
      });
      const slow = await client.batches.create({ input_file_id: slowFile.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
      await go("batches");
      await page.evaluate("window.sameDocument = true");
      const shownAt = await page.getAttribute("#main", "data-ready");
      const slowRow = `#batches-table tr[data-batch="${slow.id}"]`;
      const ran = async () =>
        Number(
          (await page.evaluate(
            `document.querySelector(${JSON.stringify(`${slowRow} progress`)})?.getAttribute("value") ?? "-1"`,
          )) as string,
        );
      await until(async () => (await ran()) >= 1, { msMax: PAGE_MS_MAX, what: "the page showing a line run", pollMs: 50 });
      const firstSeen = await ran();
      await until(async () => (await ran()) > firstSeen, { msMax: PAGE_MS_MAX, what: "the page showing more lines run", pollMs: 50 });
      // The same page, never rendered again: only its list was read again.
      expect(await page.evaluate("window.sameDocument === true")).toBe(true);
      expect(await page.getAttribute("#main", "data-ready")).toBe(shownAt);
      expect(await page.getAttribute(slowRow, "data-status")).toBe("in_progress");
      await tabTo(`${slowRow} button.cancel`);
      await page.keyboard.press("Enter");
      await waitFor(`document.getElementById("batch-result")?.textContent.includes(${JSON.stringify(slow.id)})`);
      expect(dialogs.at(-1)).toContain(slow.id);
      expect(["در حال لغو", "لغو شده"]).toContain((await page.textContent(`${slowRow} .batch-status`))!);
      // Cancelling is live too: the page reads on until the batch is cancelled.
      await waitFor(`document.querySelector(${JSON.stringify(slowRow)})?.dataset.status === "cancelled"`);
      expect(await page.locator(`${slowRow} button.cancel`).count()).toBe(0);
      const cancelled = (await client.batches.retrieve(slow.id)) as unknown as {
        request_counts: { completed: number; failed: number; total: number };
        cost_micro_toman: string;
      };
      const linesRun = cancelled.request_counts.completed + cancelled.request_counts.failed;
      expect(linesRun).toBeGreaterThan(firstSeen);
      expect(linesRun).toBeLessThan(SLOW_LINES);
      const slowCost = BigInt(cancelled.cost_micro_toman);
      expect(slowCost).toBeGreaterThan(0n);
      expect(await page.getAttribute(slowRow, "data-cost-micro")).toBe(cancelled.cost_micro_toman);
      await until(async () => (await balanceMicroOf(t.url, key)) === before - slowCost, {
        msMax: PAGE_MS_MAX,
        what: "the wallet down by the lines run",
        pollMs: 100,
      });
      await axe("batches-cancelled-fa");
    } finally {
      t.sim!.options.ttftMs = 0;
    }

    // The icon the pages link to is served (no 404 in the console on every page).
    const icon = await page.request.get(`${t.url}/console/favicon.ico`);
    expect({ status: icon.status(), type: icon.headers()["content-type"] }).toEqual({ status: 200, type: "image/svg+xml" });
    expect(await page.getAttribute('link[rel="icon"]', "href")).toBe("/console/favicon.ico");

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
        if (view === "overview")
          expect(await page.textContent("#balance-alert")).toContain(lang === "fa" ? "۳۰۰٬۰۰۰ تومان" : "300,000 toman");
        if (view === "batches") expect(await page.textContent(`${batchRow} .progress-text`)).toBe(lang === "fa" ? "۲ از ۲" : "2 of 2");
        await page.screenshot({ path: join(ARTIFACTS, `console-${view}-${lang}.png`), fullPage: true });
        await axe(`${view}-${lang}`);
      }
      // The paid top-up's receipt, from its link in the wallet history: its amount and reference are the payment's.
      await go("wallet");
      await tabTo(`#topups tr[data-topup="${paidId}"] a.receipt-link`);
      await page.keyboard.press("Enter");
      await ready("receipt");
      expect(await page.getAttribute("#receipt-amount", "data-amount-micro")).toBe("200000000000");
      expect(await page.textContent("#receipt-amount")).toBe(lang === "fa" ? "۲۰۰٬۰۰۰ تومان" : "200,000 toman");
      expect(await page.getAttribute("#receipt-ref", "data-ref")).toBe(paidRef);
      expect(await page.textContent("#receipt-card")).toMatch(lang === "fa" ? /^[۰-۹]{6}\*{6}[۰-۹]{4}$/ : /^\d{6}\*{6}\d{4}$/);
      expect(await page.textContent("#receipt-jalali")).toContain(lang === "fa" ? "۱۴" : "AP");
      await axe(`receipt-${lang}`);
      await page.screenshot({ path: join(ARTIFACTS, `console-receipt-${lang}.png`), fullPage: true });
      // Printed (or saved as PDF), the receipt is alone on the page: no header, no buttons.
      await page.emulateMedia({ media: "print" });
      expect(await page.isHidden("header")).toBe(true);
      expect(await page.isHidden("#receipt-print")).toBe(true);
      expect(await page.isVisible("#receipt")).toBe(true);
      await page.emulateMedia({ media: "screen" });
    }
    expect(existsSync(join(ARTIFACTS, "console-usage-en.png"))).toBe(true);

    // A phone's screen and a laptop's: no page scrolls sideways, in either language; screenshots of each.
    const shots = mkdtempSync(join(tmpdir(), "darvaze-console-"));
    process.stderr.write(`account-area screenshots at 360 and 1280 px: ${shots}\n`);
    for (const lang of ["en", "fa"] as const) {
      if ((await page.getAttribute("html", "lang")) !== lang) {
        await tabTo("lang-switch", { back: true });
        await page.keyboard.press("Enter");
        await waitFor(`document.documentElement.lang === ${JSON.stringify(lang)}`);
      }
      for (const width of [360, 1280]) {
        await page.setViewportSize({ width, height: 900 });
        for (const view of PAGES) {
          await go(view);
          const overflow = await page.evaluate("document.documentElement.scrollWidth - window.innerWidth");
          expect({ view, lang, width, overflow }).toEqual({ view, lang, width, overflow: 0 });
          await page.screenshot({ path: join(shots, `${view}-${lang}-${width}.png`), fullPage: true });
        }
      }
    }
    expect(existsSync(join(shots, "security-fa-360.png"))).toBe(true);
    // At 1280 px the balance stays on one line.
    await go("overview");
    expect(
      await page.evaluate(
        `(() => { const v = document.querySelector("#balance .value"); return v.scrollWidth <= v.clientWidth && v.getClientRects().length === 1; })()`,
      ),
    ).toBe(true);
    await tabTo("lang-switch", { back: true });
    await page.keyboard.press("Enter");
    await waitFor(`document.documentElement.lang === "en"`);
    await page.setViewportSize({ width: 1200, height: 900 });

    // Revoke from the keys page (keyboard; the confirmation is accepted), then the next call is refused.
    await go("keys");
    // Restrictions by keyboard: a wrong address is refused in the page's words, a model list is saved.
    await tabTo("button.restrict");
    await page.keyboard.press("Enter");
    await waitFor(`document.activeElement?.id === "restrict-models"`);
    await page.keyboard.type(MODEL);
    await tabTo("restrict-ips");
    await page.keyboard.type("10.0.0.0/33");
    await page.keyboard.press("Enter");
    await waitFor(`document.getElementById("key-error").textContent.includes("Address list")`);
    await page.fill("#restrict-ips", "");
    await page.keyboard.press("Enter");
    await ready("keys");
    await waitFor(`document.getElementById("status").textContent.includes("saved")`);
    // The keys list that reloads after the revocation is held until the customer has signed out:
    // a view still loading when another render began must not take the page back when it ends.
    let releaseKeys = () => {};
    const keysHeld = new Promise<void>((resolve) => {
      releaseKeys = resolve;
    });
    let heldLists = 0;
    await page.route("**/console/api/keys", async (route) => {
      if (route.request().method() === "GET") {
        heldLists++;
        await keysHeld;
      }
      await route.continue();
    });
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
    expect(heldLists).toBe(1);
    const listed = page.waitForResponse((r) => r.url().endsWith("/console/api/keys") && r.request().method() === "GET");
    releaseKeys();
    await listed;
    await page.unroute("**/console/api/keys");
    // A bounded negative check: the stale keys view had 1 s to mark the page as its own.
    await Bun.sleep(1_000);
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
