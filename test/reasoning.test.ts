/**
 * Hidden reasoning: a Gemini stream without max_tokens whose thinking tokens the upstream reports
 * only in its usage figures. The meter sees every figure, so the hold grows with the thoughts; the
 * charge is the upstream's whole usage up to what the wallet has, and the rest is written off and
 * counted in /metrics.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sql } from "drizzle-orm";
import OpenAI from "openai";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { ADMIN_TOKEN, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";

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
  const deadline = Date.now() + RECORD_WAIT_MS_MAX;
  for (;;) {
    const [record] = await t.gw.deps.db.rows<{ output_units: string; metered_micro: string; billed_micro: string }>(sql`
      SELECT output_units::text AS output_units, metered_micro::text AS metered_micro, billed_micro::text AS billed_micro
      FROM usage_records WHERE request_id = ${requestId}`);
    if (record || Date.now() > deadline) return record!;
    await Bun.sleep(20);
  }
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

test("past the wallet, the thinking is charged up to what the wallet has and the rest is written off and counted", async () => {
  const before = await writtenOff();
  const { key } = await t.fundedKey(100); // 100 toman: about 440 output tokens
  const { requestId, finish } = await stream(key);
  expect(finish).toBe("length"); // cut: the hold could not follow the thoughts
  const record = await usageRecord(requestId);
  const billed = BigInt(record.billed_micro);
  const metered = BigInt(record.metered_micro);
  expect(metered).toBeGreaterThanOrEqual(BigInt(THOUGHTS) * OUTPUT_MICRO);
  // Up to the wallet: what is left could not pay for the smallest extension (16 tokens).
  expect(billed).toBeLessThanOrEqual(100_000_000n);
  expect(billed).toBeGreaterThan(100_000_000n - 16n * OUTPUT_MICRO);
  expect((await writtenOff()) - before).toBe(metered - billed);
  const audit = await t.admin("GET", "/admin/ledger/audit");
  expect(audit.body.ok).toBe(true);
  // The audit names the key with its write-off.
  const keyId = ((await t.gw.deps.keys.authenticate(key)) as { id: string }).id;
  expect(audit.body.write_offs_by_key).toContainEqual({ key_id: keyId, requests: 1, write_off_micro: (metered - billed).toString() });
});
