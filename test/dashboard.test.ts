/**
 * The live dashboard in a real browser: Debian's chromium driven by playwright-core (never a
 * downloaded browser). It signs in with the admin token, sees a chart redraw with traffic while
 * requests flow, sees a backend's row turn red when its simulator is stopped, and saves a
 * screenshot to test/artifacts/dashboard.png. Without /usr/bin/chromium the suite is skipped
 * LOUDLY with a count (CI installs chromium: .ci/run).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { chromium, type Browser, type Page } from "playwright-core";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { ADMIN_TOKEN, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";

const CHROMIUM = "/usr/bin/chromium";
const ARTIFACTS = join(import.meta.dir, "artifacts");
const MODEL = "llama-3.3-70b-instruct";
/** The page must show traffic, and a stopped backend in red, within these times. */
const CHART_SEEN_MS_MAX = 15_000;
const RED_SEEN_MS_MAX = 20_000;

const suite = existsSync(CHROMIUM) ? describe : describe.skip;
if (!existsSync(CHROMIUM)) {
  process.stderr.write(`\n*** SKIPPED 2 test(s) in "dashboard in a browser": they need ${CHROMIUM} (apt-get install -y chromium) ***\n\n`);
}

suite("dashboard in a browser", () => {
  let a: Simulator;
  let b: Simulator;
  let t: TestGateway;
  let browser: Browser;
  let client: OpenAI;

  beforeAll(async () => {
    a = await startSimulator({ ttftMs: 200, itlMs: 10, outputTokens: 20 });
    b = await startSimulator({ ttftMs: 200, itlMs: 10, outputTokens: 20 });
    const backend = (name: string, sim: Simulator) => ({ name, kind: "openai", url: `${sim.url}/v1`, region: "in-country" });
    const file = join(mkdtempSync(join(tmpdir(), "darvaze-dashboard-")), "pools.json");
    writeFileSync(file, JSON.stringify({ pools: { [MODEL]: { backends: [backend("gpu-a", a), backend("gpu-b", b)] } } }));
    t = await startTestGateway({ DARVAZE_CONFIG: file });
    const { key } = await t.fundedKey(5000);
    client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu"] });
  }, SETUP_MS_MAX);

  afterAll(async () => {
    await browser?.close();
    await t?.stop();
    await a?.stop();
    await b?.stop();
  }, SETUP_MS_MAX);

  async function signIn(page: Page, token: string): Promise<void> {
    await page.goto(`${t.url}/admin/dashboard`);
    await page.fill("#token", token);
    await page.click("#login button[type=submit]");
  }

  test("a wrong token is refused on the page", async () => {
    const page = await browser.newPage();
    await signIn(page, "not-the-admin-token");
    await page.waitForFunction(`document.getElementById("login-error").textContent !== ""`, null, { timeout: 10_000 });
    expect(await page.textContent("#login-error")).toContain("refused");
    expect(await page.isHidden("#main")).toBe(true);
    await page.close();
  }, 30_000);

  test("charts move with traffic and a stopped backend turns red", async () => {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
    await signIn(page, ADMIN_TOKEN);
    await page.waitForSelector("#main", { state: "visible", timeout: 10_000 });

    let running = true;
    const one = async () => {
      while (running) await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "hi" }] }).catch(() => {});
    };
    const clients = Promise.all(Array.from({ length: 12 }, one));
    try {
      const updatesBefore = Number((await page.getAttribute("#chart-model-rps", "data-updates")) ?? 0);
      // The page's code runs in the browser: the condition is passed as its source.
      const chartMoved = `(() => { const c = document.getElementById("chart-model-rps"); return Number(c.dataset.updates) > ${updatesBefore} && Number(c.dataset.max) > 0; })()`;
      await page.waitForFunction(chartMoved, null, { timeout: CHART_SEEN_MS_MAX, polling: 200 });
      expect(Number(await page.getAttribute("#chart-backend-tps", "data-max"))).toBeGreaterThan(0);
      expect(await page.getAttribute(`tr[data-backend="${MODEL}/gpu-b"]`, "data-breaker")).toBe("closed");

      await b.stop();
      const row = `tr[data-backend="${MODEL}/gpu-b"]`;
      await page.waitForSelector(`${row}[data-breaker="open"]`, { timeout: RED_SEEN_MS_MAX });
      const background = await page.evaluate(`getComputedStyle(document.querySelector('${row} td')).backgroundColor`);
      expect(background).toBe("rgba(248, 81, 73, 0.18)");
      expect(await page.getAttribute(`tr[data-backend="${MODEL}/gpu-a"]`, "data-breaker")).toBe("closed");
      mkdirSync(ARTIFACTS, { recursive: true });
      await page.screenshot({ path: join(ARTIFACTS, "dashboard.png"), fullPage: true });
      expect(existsSync(join(ARTIFACTS, "dashboard.png"))).toBe(true);
    } finally {
      running = false;
      await clients;
      await page.close();
    }
  }, 90_000);
});
