/**
 * A gateway without a pools file refuses to start, naming it.
 * How the gateway holds its port: a second gateway on a busy port (its own data folder) exits
 * non-zero with a message naming the port, before it opens anything, and the first keeps serving;
 * a non-streamed reply that takes 45 s reaches the official `openai` client (no retry) and is
 * charged once (the idle timeout is set above the longest wait, src/http/listen.ts).
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { randomBase62 } from "../src/ids.ts";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { ADMIN_TOKEN, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { gatewayStartFailure, NODE_READY_MS_MAX, poolsFileFor } from "./processes.ts";
import { untilValue } from "./until.ts";

/** The upstream's wait before its whole reply: longer than Elysia's default idle timeout of 30 s. */
const SLOW_REPLY_MS = 45_000;
// gpt-4o-mini, "Hello, world!" with max_tokens 10: 10 prompt and 10 completion tokens at
// 13,500 and 54,000 toman per 1M = 135,000 + 540,000 micro-toman (as in e2e.test.ts).
const HELLO_10_COST_MICRO = 675_000n;

let sim: Simulator;
let t: TestGateway;

beforeAll(async () => {
  sim = await startSimulator({ ttftMs: SLOW_REPLY_MS });
  t = await startTestGateway({ DARVAZE_CONFIG: poolsFileFor(sim) });
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  await sim?.stop();
}, SETUP_MS_MAX);

test(
  "without a pools file a gateway exits 1 naming DARVAZE_CONFIG and the demo, before touching its data folder",
  async () => {
    const data = join(mkdtempSync(join(tmpdir(), "darvaze-unconfigured-")), "data");
    const refused = await gatewayStartFailure({
      DARVAZE_DATA: data,
      DARVAZE_CONFIG: undefined,
      DATABASE_URL: undefined,
      NATS_URL: undefined,
      ADMIN_TOKEN,
      KEY_PEPPER: randomBase62(40),
    });
    expect(refused.exitCode).toBe(1);
    expect(refused.stderr).toContain("darvaze: invalid configuration:\n  - DARVAZE_CONFIG: is required");
    expect(refused.stderr).toContain("`bun run demo` serves every model from simulated upstreams");
    expect(existsSync(data)).toBe(false);
  },
  NODE_READY_MS_MAX + 5_000,
);

test(
  "a second gateway on a busy port exits 1 naming the port, before touching its data folder; the first keeps serving",
  async () => {
    const data = join(mkdtempSync(join(tmpdir(), "darvaze-second-")), "data");
    const second = await gatewayStartFailure({
      DARVAZE_CONFIG: poolsFileFor(sim),
      PORT: String(t.gw.port),
      HOST: "127.0.0.1",
      DARVAZE_DATA: data,
      DATABASE_URL: undefined,
      NATS_URL: undefined,
      ADMIN_TOKEN,
      KEY_PEPPER: randomBase62(40),
    });
    expect(second.exitCode).toBe(1);
    expect(second.stderr.trim()).toBe(
      `darvaze: port ${t.gw.port} on 127.0.0.1 is in use (another gateway?); stop it or set PORT to a free port`,
    );
    expect(existsSync(data)).toBe(false);
    // Every connection still reaches the first gateway: with reusePort the kernel would have split them.
    const health = await fetch(`${t.url}/health`);
    expect([health.status, await health.text()]).toEqual([200, "ok"]);
  },
  NODE_READY_MS_MAX + 5_000,
);

test(
  "a non-streamed reply that takes 45 s arrives through the openai client with no retry, charged once",
  async () => {
    const { key } = await t.fundedKey(1000);
    const balance = async () => {
      const response = await fetch(`${t.url}/v1/credits`, { headers: { authorization: `Bearer ${key}` } });
      return BigInt(((await response.json()) as { balance_micro_toman: string }).balance_micro_toman);
    };
    const before = await balance();
    const upstreamCallsBefore = sim.log.entries().length;
    // The SDK's own default timeout is 10 minutes; no retry, so a cut connection would fail the test.
    const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
    const startedMs = Date.now();
    const reply = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "Hello, world!" }],
      max_tokens: 10,
    });
    expect(Date.now() - startedMs).toBeGreaterThanOrEqual(SLOW_REPLY_MS);
    expect(reply.usage).toMatchObject({ prompt_tokens: 10, completion_tokens: 10 });
    expect(sim.log.entries().length - upstreamCallsBefore).toBe(1);
    // The charge is posted after the reply (credits wait up to 1 s for it; a loaded machine may take longer).
    const after = await untilValue(balance, { accept: (now) => now !== before, what: "the charge in the key's balance", pollMs: 50 });
    expect(before - after).toBe(HELLO_10_COST_MICRO);
  },
  SLOW_REPLY_MS + 45_000,
);
