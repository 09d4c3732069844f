/**
 * `bun run gw top` end to end: a real CLI process reads a gateway's live feed and prints the
 * pool view with the traffic the test sent; a wrong token is refused with exit code 1.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import OpenAI from "openai";
import { SNAPSHOT_INTERVAL_MS } from "../src/metrics/live.ts";
import { POOL_SNAPSHOTS } from "../actors/protocol.ts";
import { ADMIN_TOKEN, SETUP_MS_MAX, startTestGateway, until, type TestGateway } from "./helpers.ts";

let t: TestGateway;
let keyId = "";

beforeAll(async () => {
  t = await startTestGateway();
  const funded = await t.fundedKey(1000);
  keyId = funded.keyId;
  const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: funded.key, maxRetries: 0 });
  // The traffic reaches the view with the next snapshot the node publishes (the hub merges it in
  // the same tick): wait for a snapshot taken after the last request ended, with its key and no
  // request in flight (one taken during the last request shows it in flight), not for a guessed
  // number of intervals.
  let sent = false;
  let seen = false;
  const unsubscribe = t.gw.deps.bus.subscribe(POOL_SNAPSHOTS, t.gw.deps.subjects.metricsPools, (snapshot) => {
    const idle = snapshot.backends.every((b) => b.inFlight === 0);
    if (sent && idle && snapshot.topKeys.some((k) => k.keyId === keyId)) seen = true;
  });
  try {
    for (let i = 0; i < 3; i++) await client.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] });
    sent = true;
    await until(() => seen, SNAPSHOT_INTERVAL_MS * 5);
  } finally {
    unsubscribe();
  }
}, SETUP_MS_MAX);

afterAll(() => t.stop(), SETUP_MS_MAX);

async function gw(args: string[], env: Record<string, string> = {}) {
  const child = Bun.spawn(["bun", "run", "src/cli/gw.ts", ...args], {
    cwd: `${import.meta.dir}/..`,
    env: { ...process.env, GW_URL: t.url, ADMIN_TOKEN, ...env },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { stdout, stderr, code };
}

test("gw top --once prints the live view with this traffic", async () => {
  const run = await gw(["top", "--once"]);
  expect(run.stderr).toBe("");
  expect(run.code).toBe(0);
  expect(run.stdout).toStartWith("darvaze top · 1 node · ");
  expect(run.stdout).toMatch(/gpt-4o-mini\s+sim\s+closed\s+0\/10000/);
  expect(run.stdout).toContain(keyId);
  expect(run.stdout).not.toContain("\x1b["); // not a terminal: no colours, no clearing
}, 30_000);

test("gw top with a wrong token exits 1", async () => {
  const run = await gw(["top", "--once"], { ADMIN_TOKEN: "wrong-token-0123456789" });
  expect(run.code).toBe(1);
  expect(run.stderr).toContain("HTTP 401");
}, 30_000);
