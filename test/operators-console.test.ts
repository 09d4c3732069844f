/**
 * The operators' console in a real browser (Debian's chromium through playwright-core), by
 * keyboard: an owner adds a support operator; the support operator finds a customer by phone,
 * sees their last request's cost, adjusts within their ceiling, is refused above it and on the
 * prices page; a finance operator changes a model's price after its preview, and /v1/models shows
 * the price the preview said; the owner's audit trail lists all of it with who and before/after.
 * Every page in Persian and English: axe finds no serious or critical violation, the console logs
 * no error, nothing scrolls sideways at 360 or 1280 px; screenshots at 360 and 1280 px go to a temporary
 * folder. Without /usr/bin/chromium the suite is skipped LOUDLY.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";
import { accountForPhone } from "../src/ledger/wallets.ts";
import { startZarinpalSim, type ZarinpalSim } from "../src/sim/zarinpal/server.ts";
import { base32Decode, hotp, totpStep } from "../src/operators/totp.ts";
import { seriousViolations } from "./axe.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { until } from "./until.ts";

const CHROMIUM = "/usr/bin/chromium";
const PAGE_MS_MAX = 15_000;
/** The walk's whole length, and the pages' (18 views × 2 widths × axe), on a loaded machine. */
const WALK_MS_MAX = 120_000;
const PAGES_MS_MAX = 300_000;
const PASSWORD = "a long operator password";
const PHONE = "+989121112299";
const MODEL = "claude-3-5-haiku";
const MERCHANT = "1344b5d4-0048-11e8-94db-005056a205be";
const PAGES = ["overview", "customers", "payments", "prices", "pools", "operations", "operators", "audit"] as const;

const suite = existsSync(CHROMIUM) ? describe : describe.skip;
if (!existsSync(CHROMIUM))
  process.stderr.write(`\n*** SKIPPED the operators' console browser test: it needs ${CHROMIUM} (apt-get install -y chromium) ***\n\n`);

/** One operator's browser: its own context (cookies), page, and the console errors it logged. */
interface Desk {
  context: BrowserContext;
  page: Page;
  errors: string[];
}

suite("operators' console in a browser", () => {
  let t: TestGateway;
  let zarinpal: ZarinpalSim;
  let browser: Browser;
  let customer: { accountId: string; key: string };
  let paymentPage: string;
  const shots = mkdtempSync(join(tmpdir(), "operators-console-"));
  const desks: Desk[] = [];

  beforeAll(async () => {
    zarinpal = await startZarinpalSim({ merchantIds: [MERCHANT] });
    t = await startTestGateway({ ZARINPAL_MERCHANT_ID: MERCHANT, ZARINPAL_BASE_URL: zarinpal.url });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu"] });
    const accountId = (await accountForPhone(t.gw.deps.db, PHONE)).id;
    await t.admin("POST", `/admin/accounts/${accountId}/topups`, { amount_toman: 20_000, reference: "browser-first" });
    const key = (await t.admin("POST", `/admin/accounts/${accountId}/keys`, { name: "app" })).body.key;
    customer = { accountId, key };
    const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
    await client.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hello there" }] });
    const started = await t.admin("POST", "/admin/topups", { account_id: accountId, amount_toman: 100_000 });
    expect(started.status).toBe(201);
    paymentPage = started.body.redirect_url;
  }, SETUP_MS_MAX);

  afterAll(async () => {
    await browser?.close();
    await t?.stop();
    await zarinpal?.stop();
  }, SETUP_MS_MAX);

  async function desk(lang: "fa" | "en", width = 1280): Promise<Desk> {
    const context = await browser.newContext({ viewport: { width, height: 900 }, locale: lang === "fa" ? "fa-IR" : "en-US" });
    const page = await context.newPage();
    const errors: string[] = [];
    // A refusal the walk provokes (403 above the ceiling) is logged by the browser as a failed load:
    // those are judged by status below (no 5xx); every other console error counts.
    page.on("console", (m) => {
      if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) errors.push(m.text());
    });
    page.on("pageerror", (e) => errors.push(String(e)));
    page.on("response", (r) => {
      if (r.status() >= 500) errors.push(`${r.status()} ${r.url()}`);
    });
    const made = { context, page, errors };
    desks.push(made);
    return made;
  }

  const waitFor = (page: Page, expression: string): Promise<void> =>
    until(async () => Boolean(await page.evaluate(expression).catch(() => false)), { msMax: PAGE_MS_MAX, what: expression, pollMs: 50 });
  const ready = (page: Page, view: string) =>
    waitFor(
      page,
      `document.getElementById("main").dataset.view === ${JSON.stringify(view)} && !!document.getElementById("main").dataset.ready`,
    );
  const textOf = (page: Page, selector: string) =>
    page.evaluate(`document.querySelector(${JSON.stringify(selector)})?.textContent ?? ""`) as Promise<string>;
  const waitText = (page: Page, selector: string, text: string) =>
    waitFor(page, `(document.querySelector(${JSON.stringify(selector)})?.textContent ?? "").includes(${JSON.stringify(text)})`);

  async function tabTo(page: Page, idOrSelector: string, options: { back?: boolean } = {}): Promise<void> {
    const selector = /^[\w-]+$/.test(idOrSelector) ? `#${idOrSelector}` : idOrSelector;
    for (let i = 0; i < 200; i++) {
      if (await page.evaluate(`!!document.activeElement && document.activeElement.matches(${JSON.stringify(selector)})`)) return;
      await page.keyboard.press(options.back ? "Shift+Tab" : "Tab");
    }
    throw new Error(`${selector} cannot be reached with Tab`);
  }
  async function typeInto(page: Page, id: string, text: string) {
    await tabTo(page, id);
    await page.keyboard.press("Control+A");
    await page.keyboard.type(text);
  }
  async function go(page: Page, view: string) {
    await tabTo(page, `#nav-${view}`, { back: true });
    await page.keyboard.press("Enter");
    await ready(page, view);
  }
  async function signIn(d: Desk, login: string, secret: string) {
    await d.page.goto(`${t.url}/operators/`);
    await ready(d.page, "signin");
    await typeInto(d.page, "login", login);
    await typeInto(d.page, "password", PASSWORD);
    // A code is good once: wait for a step no one has used when two sign in within one.
    await typeInto(d.page, "code", hotp(base32Decode(secret), totpStep(Date.now())));
    await d.page.keyboard.press("Enter");
    await ready(d.page, "overview");
  }
  async function axe(page: Page, label: string) {
    expect({ page: label, serious: await seriousViolations(page) }).toEqual({ page: label, serious: [] });
  }
  const secretOf = (uri: string) => new URL(uri).searchParams.get("secret")!;
  const addOperatorByApi = async (login: string, role: string) =>
    secretOf((await t.admin("POST", "/admin/operators", { login, name: login, role, password: PASSWORD })).body.otpauth_uri);

  test(
    "owner adds support; support finds, reads, adjusts, is refused; finance previews and changes a price; the audit says all",
    async () => {
      // The owner, in Persian, adds a support operator with a ceiling of 1,000 toman a day.
      const owner = await desk("fa");
      await signIn(owner, "owner", await addOperatorByApi("owner", "owner"));
      expect(await owner.page.getAttribute("html", "dir")).toBe("rtl");
      // The overview shows the batch queue: none open, this node running no line.
      expect(await owner.page.textContent("#batch-queue .value")).toBe("دسته‌ای بازی نیست");
      expect(await owner.page.textContent("#batch-queue .muted")).toContain("همین گره: ۰ خط در حال اجرا");
      await go(owner.page, "operators");
      await typeInto(owner.page, "op-login", "sara");
      await typeInto(owner.page, "op-name", "Sara");
      await tabTo(owner.page, "op-role");
      for (let i = 0; i < 4 && (await owner.page.inputValue("#op-role")) !== "support"; i++) await owner.page.keyboard.press("ArrowDown");
      expect(await owner.page.inputValue("#op-role")).toBe("support");
      await typeInto(owner.page, "op-password", PASSWORD);
      await typeInto(owner.page, "op-ceiling", "1000");
      await owner.page.keyboard.press("Enter");
      await owner.page.waitForSelector("#otpauth");
      const saraSecret = secretOf((await textOf(owner.page, "#otpauth")).trim());

      // Support, in English, finds the customer by phone and sees the last request's cost.
      const support = await desk("en");
      await signIn(support, "sara", saraSecret);
      expect(await support.page.getAttribute("html", "dir")).toBe("ltr");
      expect(await support.page.locator("#nav-audit").count()).toBe(0); // the owner's pages are not offered
      await go(support.page, "customers");
      await typeInto(support.page, "search", "0912 111 2299");
      await support.page.keyboard.press("Enter");
      await support.page.waitForSelector("#customers a.customer-link");
      await tabTo(support.page, "#customers a.customer-link");
      await support.page.keyboard.press("Enter");
      await ready(support.page, "customer");
      const usage = (await t.admin("GET", `/admin/accounts/${customer.accountId}/usage`)).body.data[0];
      await waitText(
        support.page,
        "#last-request",
        `${Number(usage.cost_toman).toLocaleString("en-US", { maximumFractionDigits: 6 })} toman`,
      );
      expect(await textOf(support.page, "#last-request")).toContain("gpt-4o-mini");

      // Within the ceiling, then above it.
      await typeInto(support.page, "adjust-amount", "600");
      await typeInto(support.page, "adjust-reason", "goodwill for a slow day");
      await support.page.keyboard.press("Enter");
      await support.page.waitForSelector("#adjust-done:not(:empty)");
      await ready(support.page, "customer");
      await typeInto(support.page, "adjust-amount", "500");
      await typeInto(support.page, "adjust-reason", "more goodwill");
      await support.page.keyboard.press("Enter");
      await waitText(support.page, "#adjust-error", "above your daily ceiling");
      // The prices page reads, and refuses support's change.
      await go(support.page, "prices");
      await typeInto(support.page, "price-input", "0.5");
      await support.page.keyboard.press("Enter");
      await waitText(support.page, "#price-error", "Your role may not do this");

      // Finance, in Persian, previews a price and applies it; /v1/models shows what the preview said.
      const finance = await desk("fa");
      await signIn(finance, "farid", await addOperatorByApi("farid", "finance"));
      await go(finance.page, "prices");
      await tabTo(finance.page, "price-model");
      for (let i = 0; i < 300 && (await finance.page.inputValue("#price-model")) !== MODEL; i++)
        await finance.page.keyboard.press("ArrowDown");
      expect(await finance.page.inputValue("#price-model")).toBe(MODEL);
      await typeInto(finance.page, "price-input", "0.93");
      await tabTo(finance.page, "price-preview-button");
      await finance.page.keyboard.press("Enter");
      await finance.page.waitForSelector('#preview-table tr[data-key="input_token"]');
      const preview = (await t.admin("POST", `/admin/catalog/models/${MODEL}/preview`, await entryWith("0.93"))).body.prices.find(
        (p: any) => p.key === "input_token",
      );
      const shownAfter = await textOf(finance.page, '#preview-table tr[data-key="input_token"] td:nth-child(3)');
      expect(shownAfter).toBe(Number(preview.toman_per_1m_after).toLocaleString("fa-IR"));
      await tabTo(finance.page, "price-apply");
      await finance.page.keyboard.press("Enter");
      await finance.page.waitForSelector("#price-done:not(:empty)");
      const listed = (await (
        await fetch(`${t.url}/v1/models/${MODEL}`, { headers: { authorization: `Bearer ${customer.key}` } })
      ).json()) as any;
      expect(String(listed.pricing.input)).toBe(preview.toman_per_1m_after);

      // The finance operator adds a model from its catalog entry, previewed first: the catalog then holds it at the previewed price.
      const { aliases: _aliases, ...newEntry } = await entryWith("0.41");
      await typeInto(finance.page, "add-id", "console-added-model");
      await tabTo(finance.page, "add-entry");
      await finance.page.fill("#add-entry", JSON.stringify(newEntry));
      await tabTo(finance.page, "add-preview-button");
      await finance.page.keyboard.press("Enter");
      await finance.page.waitForSelector('#add-preview-table tr[data-key="input_token"]');
      const addedShown = await textOf(finance.page, '#add-preview-table tr[data-key="input_token"] td:nth-child(2)');
      await tabTo(finance.page, "add-apply");
      await finance.page.keyboard.press("Enter");
      await finance.page.waitForSelector("#add-done:not(:empty)");
      const catalogAfter = (await t.admin("GET", "/admin/catalog")).body;
      expect(catalogAfter.data.some((e: any) => e.id === "console-added-model")).toBe(true);
      const addedToday = catalogAfter.toman_per_1m_today["console-added-model"].input_token;
      expect(addedShown).toBe(Number(addedToday).toLocaleString("fa-IR"));

      // The owner's pool editor starts from the pool as the pools file writes it, and saves it back unchanged.
      await go(owner.page, "pools");
      const editedModel = await owner.page.inputValue("#pool-model");
      const listedPool = (await t.admin("GET", "/admin/pools")).body.data.find((p: any) => p.model === editedModel);
      expect(JSON.parse(await owner.page.inputValue("#pool-json"))).toEqual(listedPool.spec);
      await tabTo(owner.page, "pool-save");
      await owner.page.keyboard.press("Enter");
      await owner.page.waitForSelector("#pool-saved:not(:empty)");

      // The owner's audit trail: who did what, with before and after.
      await go(owner.page, "audit");
      // Three operators added (owner, sara, farid); one adjustment (the one above the ceiling left no row); a price changed, a model added; a pool saved.
      for (const [action, n] of [
        ["operator.add", 3],
        ["wallet.adjust", 1],
        ["catalog.put", 2],
        ["pool.set", 1],
      ] as const) {
        expect({ action, rows: await owner.page.locator(`#audit tr[data-action="${action}"]`).count() }).toEqual({ action, rows: n });
      }
      const rows = (await t.admin("GET", "/admin/audit?limit=50")).body.data as any[];
      const adjusted = rows.find((r) => r.action === "wallet.adjust");
      expect(adjusted).toMatchObject({
        role: "support",
        via: "session",
        reason: "goodwill for a slow day",
        amount_micro_toman: "600000000",
      });
      const puts = rows.filter((r) => r.action === "catalog.put");
      for (const put of puts) expect(put).toMatchObject({ role: "finance" });
      const changed = puts.find((r) => r.before);
      expect(changed.before.usd_per_1m.input_token).not.toBe("0.93");
      expect(changed.after.model.usd_per_1m.input_token).toBe("0.93");
      expect(puts.find((r) => !r.before).after.model.usd_per_1m.input_token).toBe("0.41");
      // Dates on the Persian page are Jalali, in Persian digits.
      expect(await textOf(owner.page, "#audit tbody tr td")).toMatch(/[۰-۹]/);

      for (const d of desks) expect(d.errors).toEqual([]);
    },
    WALK_MS_MAX,
  );

  /** The model's entry with another input price, as the page sends it. */
  async function entryWith(input: string) {
    const entry = (await t.admin("GET", "/admin/catalog")).body.data.find((e: any) => e.id === MODEL);
    const { id: _, ...rest } = entry;
    return { ...rest, usd_per_1m: { ...rest.usd_per_1m, input_token: input } };
  }

  test(
    "every page in both languages: axe, no console error, no sideways scroll at 360 or 1280 px, screenshots at 360 and 1280 px",
    async () => {
      const d = await desk("fa");
      // The customer pays the top-up on the Zarinpal simulator's page: the customer's page shows its receipt.
      await d.page.goto(paymentPage);
      await d.page.click('button[value="pay"]');
      await until(
        async () => (await t.admin("GET", `/admin/topups?account_id=${customer.accountId}&state=verified`)).body.data.length === 1,
        {
          msMax: PAGE_MS_MAX,
          what: "the top-up verified",
        },
      );
      await signIn(d, "olga", await addOperatorByApi("olga", "owner"));
      await d.page.goto(`${t.url}/operators/#/customer/${customer.accountId}`);
      await ready(d.page, "customer");
      expect(await d.page.locator('#payments tr[data-state="verified"] details.receipt-of').count()).toBe(1);
      for (const lang of ["fa", "en"] as const) {
        for (const view of [...PAGES, "customer"]) {
          if (view === "customer") await d.page.evaluate(`location.hash = "#/customer/${customer.accountId}"`);
          else await d.page.evaluate(`location.hash = "#/${view}"`);
          await ready(d.page, view);
          for (const width of [1280, 360]) {
            await d.page.setViewportSize({ width, height: 900 });
            await d.page.screenshot({ path: join(shots, `operators-${view}-${lang}-${width}.png`), fullPage: true });
            const wide = (await d.page.evaluate("document.documentElement.scrollWidth")) as number;
            expect({ view, lang, width, sideways: wide > width }).toEqual({ view, lang, width, sideways: false });
          }
          await axe(d.page, `${view}-${lang}`);
          expect(await d.page.getAttribute("html", "dir")).toBe(lang === "fa" ? "rtl" : "ltr");
        }
        if (lang === "fa") {
          await tabTo(d.page, "lang-switch", { back: true });
          await d.page.keyboard.press("Enter");
          await waitFor(d.page, `document.documentElement.lang === "en"`);
        }
      }
      expect(d.errors).toEqual([]);
      process.stderr.write(`operators' console screenshots: ${shots}\n`);
    },
    PAGES_MS_MAX,
  );
});
