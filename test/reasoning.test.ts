/**
 * Hidden reasoning: a Gemini stream without max_tokens whose thinking tokens the upstream reports
 * only in its usage figures. The hold covers the whole output limit sent, thoughts included: the
 * thinking budget and the reply's limit together stay within it, so a wallet that cannot cover
 * the default limit gets a lower one and nothing is written off.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sql } from "drizzle-orm";
import OpenAI from "openai";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { ADMIN_TOKEN, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { untilValue } from "./until.ts";

const MODEL = "gemini-2.5-flash";
const INPUT_MICRO = 27_000n; // toman per 1M tokens = micro-toman per token, as published
const OUTPUT_MICRO = 225_000n;
const THOUGHTS = 3_000;
const MESSAGES = [{ role: "user" as const, content: "Hello, world!" }];
const RECORD_WAIT_MS_MAX = 10_000;

let sim: Simulator;
let t: TestGateway;

beforeAll(async () => {
  // A token every 20 ms: the usage figure with the thoughts arrives before the rest of the text.
  sim = await startSimulator({ outputTokens: 8, thoughtTokens: THOUGHTS, itlMs: 20 });
  const path = join(mkdtempSync(join(tmpdir(), "darvaze-pools-")), "pools.json");
  const backends = [{ name: "gemini-sim", kind: "gemini", url: sim.url, upstream_model: MODEL, region: "abroad" }];
  writeFileSync(path, JSON.stringify({ pools: { [MODEL]: { backends } } }));
  t = await startTestGateway({ DARVAZE_CONFIG: path });
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  await sim?.stop();
}, SETUP_MS_MAX);

/** Streams one reply without max_tokens; the request id and the finish reason the client saw. */
async function stream(key: string): Promise<{ requestId: string; finish: string | null }> {
  const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
  const { data, response } = await client.chat.completions.create({ model: MODEL, messages: MESSAGES, stream: true }).withResponse();
  let finish: string | null = null;
  for await (const chunk of data) finish = chunk.choices[0]?.finish_reason ?? finish;
  return { requestId: response.headers.get("x-request-id")!, finish };
}

/** The request's usage record as the ledger has it: units, metered and billed micro-toman. */
async function usageRecord(requestId: string): Promise<{ output_units: string; metered_micro: string; billed_micro: string }> {
  const read = async () =>
    (
      await t.gw.deps.db.rows<{ output_units: string; metered_micro: string; billed_micro: string }>(sql`
      SELECT output_units::text AS output_units, metered_micro::text AS metered_micro, billed_micro::text AS billed_micro
      FROM usage_records WHERE request_id = ${requestId}`)
    )[0];
  return untilValue(read, { msMax: RECORD_WAIT_MS_MAX, what: `the usage record of ${requestId}`, pollMs: 20 });
}

async function writtenOff(): Promise<bigint> {
  const metrics = await (await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).text();
  const line = new RegExp(`^darvaze_write_off_micro_toman_total\\{model="${MODEL}",backend="gemini-sim"\\} (\\S+)$`, "m").exec(metrics);
  return BigInt(line?.[1] ?? "0");
}

test("a stream's hidden thinking is billed in full when the wallet covers it", async () => {
  const { key } = await t.fundedKey(10_000);
  const { requestId, finish } = await stream(key);
  expect(finish).toBe("stop");
  const [entry] = sim.log.byRequestId(requestId);
  expect(entry!.completionTokens).toBe(8 + THOUGHTS);
  const expected = (BigInt(entry!.promptTokens) * INPUT_MICRO + BigInt(8 + THOUGHTS) * OUTPUT_MICRO).toString();
  expect(await usageRecord(requestId)).toEqual({ output_units: String(8 + THOUGHTS), metered_micro: expected, billed_micro: expected });
});

test("past the wallet, the limit sent is lowered to what it covers, the thoughts bounded within it: charged in full, nothing written off", async () => {
  const before = await writtenOff();
  sim.options.thoughtTokens = 20_000; // a model that would think far past the wallet
  try {
    const { key } = await t.fundedKey(1_500); // 1,500 toman: about 6,600 output tokens
    const { requestId, finish } = await stream(key);
    expect(finish).toBe("stop");
    const [entry] = sim.log.byRequestId(requestId);
    const record = await usageRecord(requestId);
    // The simulator's own bill (thoughts included) is what the customer paid, within the wallet.
    expect(record.output_units).toBe(String(entry!.completionTokens));
    expect(entry!.completionTokens).toBeGreaterThan(2_000); // it thought up to the budget it was given
    const expected = BigInt(entry!.promptTokens) * INPUT_MICRO + BigInt(entry!.completionTokens) * OUTPUT_MICRO;
    expect(record.billed_micro).toBe(expected.toString());
    expect(record.metered_micro).toBe(record.billed_micro);
    expect(expected).toBeLessThanOrEqual(1_500_000_000n);
    expect((await writtenOff()) - before).toBe(0n);
    const audit = await t.admin("GET", "/admin/ledger/audit");
    expect(audit.body.ok).toBe(true);
  } finally {
    sim.options.thoughtTokens = THOUGHTS;
  }
});
