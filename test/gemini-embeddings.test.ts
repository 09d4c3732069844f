/**
 * Gemini embeddings end to end: a pool of one `gemini` backend (the simulator's Gemini route,
 * which wants its key in `x-goog-api-key`), called with the official `openai` client. Gemini
 * reports no token count, so the gateway bills its own js-tiktoken count.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { simEmbedding } from "../src/sim/embeddings.ts";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { countTokens } from "../src/tokens/count.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";

const MODEL = "gemini-embedding-001"; // $0.15/1M tokens: 13,500 micro-toman a token
const MICRO_PER_TOKEN = 13_500n;

let sim: Simulator;
let t: TestGateway;
let client: OpenAI;
let key: string;

beforeAll(async () => {
  sim = await startSimulator({ apiKey: "gemini-secret" });
  const file = join(mkdtempSync(join(tmpdir(), "darvaze-gemini-")), "pools.json");
  const backend = { name: "gemini", kind: "gemini", url: `${sim.url}/v1beta`, api_key_env: "GEMINI_TEST_KEY", region: "abroad" };
  writeFileSync(file, JSON.stringify({ pools: { [MODEL]: { backends: [backend] } } }));
  t = await startTestGateway({ DARVAZE_CONFIG: file, GEMINI_TEST_KEY: "gemini-secret" });
  ({ key } = await t.fundedKey(1000));
  client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
}, SETUP_MS_MAX);

afterAll(async () => {
  await t.stop();
  await sim.stop();
}, SETUP_MS_MAX);

async function balanceMicro(): Promise<bigint> {
  const response = await fetch(`${t.url}/v1/credits`, { headers: { authorization: `Bearer ${key}` } });
  return BigInt(((await response.json()) as { balance_micro_toman: string }).balance_micro_toman);
}

test("texts go through batchEmbedContents; vectors come back in both encodings; billed by our own count", async () => {
  const input = ["Salaam, donya!", "Hello"];
  const before = await balanceMicro();
  const { data, response } = await client.embeddings.create({ model: MODEL, input, dimensions: 16 }).withResponse();
  expect(data.data.map((d) => d.embedding)).toEqual(input.map((text) => simEmbedding(MODEL, text, 16)));
  const tokens = (await countTokens(input[0]!)) + (await countTokens(input[1]!));
  expect(data.usage.prompt_tokens).toBe(tokens);
  expect(before - (await balanceMicro())).toBe(BigInt(tokens) * MICRO_PER_TOKEN);
  const [entry] = sim.log.byRequestId(response.headers.get("x-request-id")!);
  expect([entry!.operation, entry!.status, entry!.model]).toEqual(["embeddings", 200, MODEL]);

  const floats = await client.embeddings.create({ model: MODEL, input: "Hello", encoding_format: "float", dimensions: 4 });
  expect(floats.data[0]!.embedding).toEqual(simEmbedding(MODEL, "Hello", 4));
});

test("token arrays cannot go to Gemini: a 400 naming `input`, nothing billed, no upstream call", async () => {
  const before = await balanceMicro();
  const requests = sim.log.totals.requests;
  const error = await client.embeddings.create({ model: MODEL, input: [1, 2, 3] }).catch((e) => e);
  expect([error.status, error.param]).toEqual([400, "input"]);
  expect(sim.log.totals.requests).toBe(requests);
  expect(await balanceMicro()).toBe(before);
});

test("more than 100 texts, Gemini's batch limit: a 400 naming `input` and the limit, nothing billed, no upstream call", async () => {
  const before = await balanceMicro();
  const requests = sim.log.totals.requests;
  const error = await client.embeddings.create({ model: MODEL, input: Array.from({ length: 101 }, (_, i) => `text ${i}`) }).catch((e) => e);
  expect(error).toBeInstanceOf(OpenAI.BadRequestError);
  expect([error.status, error.param, error.type]).toEqual([400, "input", "invalid_request_error"]);
  expect(error.message).toContain("at most 100 inputs");
  expect(sim.log.totals.requests).toBe(requests);
  expect(await balanceMicro()).toBe(before);
  // 100 is within the limit.
  const hundred = await client.embeddings.create({
    model: MODEL,
    input: Array.from({ length: 100 }, (_, i) => `text ${i}`),
    encoding_format: "float",
    dimensions: 4,
  });
  expect(hundred.data).toHaveLength(100);
});
