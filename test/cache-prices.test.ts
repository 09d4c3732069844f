/**
 * Every price component, through the official clients: prompt tokens the upstream reports as
 * read from its cache (OpenAI's `cached_tokens`, Gemini's `cachedContentTokenCount`) and
 * Anthropic's cache writes and reads are billed at their own catalog prices, checked against
 * constants worked out by hand from the published USD prices × 90,000 toman per USD.
 *
 * The prompt is 143 simulator tokens (asserted against the simulator's log), the output 8.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { microToToman } from "../src/catalog/prices.ts";
import type { Simulator } from "../src/sim/server.ts";
import { promptTokensUpperBound } from "../src/tokens/count.ts";
import { ADMIN_TOKEN, SETUP_MS_MAX, startSimGateway, type SimGateway, type TestGateway } from "./helpers.ts";
import { untilValue } from "./until.ts";

const PROMPT_TOKENS = 143;
const OUTPUT_TOKENS = 8;
const DOC = "The gateway prices every prompt token as the vendor does. ".repeat(12);
/** A long system document marked for Anthropic's cache, then a short question. */
const MESSAGES = [
  { role: "system", content: [{ type: "text", text: DOC, cache_control: { type: "ephemeral" } }] },
  { role: "user", content: "Summarise." },
] as OpenAI.ChatCompletionMessageParam[];

function poolsFile(sim: Simulator): string {
  const path = join(mkdtempSync(join(tmpdir(), "darvaze-pools-")), "pools.json");
  // OpenAI-style backends are named by their `/v1` base, as their clients name them.
  const backend = (name: string, kind: string, upstream_model: string) => ({
    backends: [{ name, kind, url: kind === "openai" ? `${sim.url}/v1` : sim.url, upstream_model, region: "abroad" }],
  });
  const pools = {
    "gpt-4.1": backend("openai-sim", "openai", "gpt-4.1"),
    "deepseek-v3": backend("deepseek-sim", "openai", "deepseek-chat"),
    "claude-sonnet-4": backend("anthropic-sim", "anthropic", "claude-sonnet-4-20250514"),
    "gemini-2.5-flash": backend("gemini-sim", "gemini", "gemini-2.5-flash"),
  };
  writeFileSync(path, JSON.stringify({ pools }));
  return path;
}

let setup: SimGateway | undefined;
let sim: Simulator;
let t: TestGateway;
let accountId: string;
let client: OpenAI;

beforeAll(async () => {
  setup = await startSimGateway({ outputTokens: OUTPUT_TOKENS }, poolsFile);
  ({ sim, t, accountId, client } = setup);
}, SETUP_MS_MAX);

afterAll(() => setup?.stop(), SETUP_MS_MAX);

const RECORD_WAIT_MS_MAX = 10_000;

/** The request's usage record, as the admin account view shows it, once the group commit wrote it. */
async function usageRecord(requestId: string): Promise<Record<string, unknown>> {
  const read = async () => {
    const account = await t.admin("GET", `/admin/accounts/${accountId}`);
    return account.body.recent_usage.find((u: { request_id: string }) => u.request_id === requestId) as Record<string, unknown> | undefined;
  };
  return untilValue(read, { msMax: RECORD_WAIT_MS_MAX, what: `the usage record of ${requestId}`, pollMs: 20 });
}

async function create(model: string, stream: boolean): Promise<{ requestId: string; usage: OpenAI.CompletionUsage }> {
  if (!stream) {
    const { data, response } = await client.chat.completions.create({ model, messages: MESSAGES, max_tokens: 100 }).withResponse();
    return { requestId: response.headers.get("x-request-id")!, usage: data.usage! };
  }
  const { data, response } = await client.chat.completions
    .create({ model, messages: MESSAGES, max_tokens: 100, stream: true, stream_options: { include_usage: true } })
    .withResponse();
  let usage: OpenAI.CompletionUsage | undefined;
  for await (const chunk of data) if (chunk.usage) usage = chunk.usage;
  return { requestId: response.headers.get("x-request-id")!, usage: usage! };
}

/**
 * One request per case: the cache figures the simulator reports, what the client sees, and the
 * usage record, whose charge is worked out by hand in the case's comment.
 */
const CASES = [
  {
    name: "OpenAI shape: 128 cached of 143 prompt tokens on gpt-4.1 ($2 input, $0.50 cached, $8 output)",
    model: "gpt-4.1",
    cache: { read: 128, write: 0 },
    usage: { prompt_tokens_details: { cached_tokens: 128 } },
    // 15 × 180,000 + 128 × 45,000 + 8 × 720,000 = 2,700,000 + 5,760,000 + 5,760,000
    record: {
      input_units: "15",
      cache_read_units: "128",
      cache_write_units: "0",
      output_units: "8",
      prices_toman_per_1m: { input: "180000", output: "720000", cache_read: "45000", cache_write: "0" },
      metered_micro_toman: "14220000",
      billed_micro_toman: "14220000",
    },
  },
  {
    name: "Anthropic: 64 written and 64 read of 143 on claude-sonnet-4 ($3 input, $3.75 5-minute write, $0.30 read, $15 output)",
    model: "claude-sonnet-4",
    cache: { read: 64, write: 64 },
    usage: { prompt_tokens_details: { cached_tokens: 64, cache_write_tokens: 64 } },
    // 15 × 270,000 + 64 × 27,000 + 64 × 337,500 + 8 × 1,350,000 = 4,050,000 + 1,728,000 + 21,600,000 + 10,800,000
    record: {
      input_units: "15",
      cache_read_units: "64",
      cache_write_units: "64",
      output_units: "8",
      prices_toman_per_1m: { input: "270000", output: "1350000", cache_read: "27000", cache_write: "337500" },
      billed_micro_toman: "38178000",
    },
  },
  {
    name: "Gemini: cachedContentTokenCount 128 of 143 on gemini-2.5-flash ($0.30 input, $0.03 cached, $2.50 output)",
    model: "gemini-2.5-flash",
    cache: { read: 128, write: 0 },
    usage: { prompt_tokens_details: { cached_tokens: 128 } },
    // 15 × 27,000 + 128 × 2,700 + 8 × 225,000 = 405,000 + 345,600 + 1,800,000
    record: { input_units: "15", cache_read_units: "128", output_units: "8", billed_micro_toman: "2550600" },
  },
  {
    name: "a model without a cache price bills cached tokens as input: deepseek-v3 ($0.27 input, $1.10 output)",
    model: "deepseek-v3",
    cache: { read: 128, write: 0 },
    usage: { prompt_tokens_details: { cached_tokens: 128 } },
    // 143 × 24,300 + 8 × 99,000 = 3,474,900 + 792,000
    record: { input_units: "143", cache_read_units: "0", output_units: "8", billed_micro_toman: "4266900" },
  },
];

describe.each([false, true])("stream: %p", (stream) => {
  test.each(CASES)("$name", async (c) => {
    sim.options.cacheReadTokens = c.cache.read;
    sim.options.cacheWriteTokens = c.cache.write;
    const { requestId, usage } = await create(c.model, stream);
    const entries = sim.log.byRequestId(requestId);
    expect(entries).toHaveLength(1);
    expect(entries[0]).toMatchObject({ promptTokens: PROMPT_TOKENS, completionTokens: OUTPUT_TOKENS });
    expect(usage).toMatchObject({ prompt_tokens: PROMPT_TOKENS, completion_tokens: OUTPUT_TOKENS, ...c.usage });
    expect(await usageRecord(requestId)).toMatchObject(c.record);
  });
});

test("/v1/key sums whole prompts and their cached parts over the eight requests above", async () => {
  const response = await fetch(`${t.url}/v1/key`, { headers: { authorization: `Bearer ${client.apiKey}` } });
  const body = (await response.json()) as { usage: Record<string, unknown> };
  // Per run: 128 + 64 + 128 read (deepseek-v3's are input), 64 written; two runs.
  expect(body.usage).toMatchObject({
    requests: 8,
    input_tokens: 8 * PROMPT_TOKENS,
    cached_tokens: 640,
    cache_write_tokens: 128,
    output_tokens: 8 * OUTPUT_TOKENS,
  });
});

test("/v1/models shows the cache prices in toman per 1M tokens; a model without them shows none", async () => {
  const models = await client.models.list();
  const pricing = (id: string) => (models.data.find((m) => m.id === id) as unknown as { pricing: Record<string, unknown> }).pricing;
  expect(pricing("gpt-4.1")).toMatchObject({ input: 180_000, cache_read: 45_000, output: 720_000 });
  expect(pricing("claude-sonnet-4")).toMatchObject({ input: 270_000, cache_read: 27_000, cache_write: 337_500, output: 1_350_000 });
  expect(pricing("deepseek-v3").cache_read).toBeUndefined();
});

test("/metrics counts prompt tokens by kind: input, cache_read, cache_write", async () => {
  const text = await (await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).text();
  const count = (model: string, direction: string) => {
    const line = text
      .split("\n")
      .find((l) => l.startsWith("darvaze_tokens_total{") && l.includes(`model="${model}"`) && l.includes(`direction="${direction}"`));
    return line ? Number(line.split(" ").at(-1)) : 0;
  };
  // Two requests each (whole and streamed).
  expect(count("claude-sonnet-4", "cache_write")).toBe(128);
  expect(count("claude-sonnet-4", "cache_read")).toBe(128);
  expect(count("claude-sonnet-4", "input")).toBe(30);
  expect(count("deepseek-v3", "input")).toBe(2 * PROMPT_TOKENS);
});

test("the ledger audit passes: every record is metered at its units × prices", async () => {
  const audit = await t.admin("GET", "/admin/ledger/audit");
  expect(audit.body.checks.find((c: { name: string }) => c.name.startsWith("every usage record is metered"))).toMatchObject({ ok: true });
  expect(audit.body.ok).toBe(true);
});

test("at the wallet's edge a prompt marked for caching is reserved at the cache-write price, an unmarked one at the input price", async () => {
  const text = "Reserve me at the price I may cost. ".repeat(20);
  const part = { type: "text" as const, text };
  // `cache_control` is Anthropic's field, beyond the openai client's types.
  const marked = [
    { role: "user", content: [{ ...part, cache_control: { type: "ephemeral" } }] },
  ] as unknown as OpenAI.ChatCompletionMessageParam[];
  const plain: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: [part] }];
  // A Claude model's prompt is reserved at the gateway's byte bound (o200k counts do not bound
  // Claude's tokenizer), the same for both bodies but for the mark's few bytes.
  const bound = BigInt(promptTokensUpperBound({ model: "claude-sonnet-4", messages: plain, max_tokens: 10 } as never));
  // claude-sonnet-4: input 270,000, cache write 337,500, output 1,350,000 micro-toman per token.
  // The wallet covers the plain prompt's bound at the input price and 10 output tokens, plus less
  // than the cache-write premium (67,500 per token): enough unmarked, not enough marked.
  const walletMicro = bound * 270_000n + 10n * 1_350_000n + bound * 30_000n;
  const funded = await t.fundedKey(microToToman(walletMicro));
  const edge = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: funded.key, maxRetries: 0 });
  sim.options.cacheReadTokens = 0;
  sim.options.cacheWriteTokens = 0;
  const refused = await edge.chat.completions.create({ model: "claude-sonnet-4", messages: marked, max_tokens: 10 }).then(
    () => null,
    (e: unknown) => e,
  );
  expect(refused).toBeInstanceOf(OpenAI.APIError);
  expect((refused as InstanceType<typeof OpenAI.APIError>).status).toBe(402);
  const served = await edge.chat.completions.create({ model: "claude-sonnet-4", messages: plain, max_tokens: 10 });
  expect(served.usage?.completion_tokens).toBe(OUTPUT_TOKENS);
});

test.each([false, true])("Anthropic 1-hour cache writes are priced apart from 5-minute ones (stream: %p)", async (stream) => {
  sim.options.cacheReadTokens = 64;
  sim.options.cacheWriteTokens = 64;
  sim.options.cacheWrite1hTokens = 40;
  try {
    const { requestId, usage } = await create("claude-sonnet-4", stream);
    expect(usage).toMatchObject({ prompt_tokens: PROMPT_TOKENS, prompt_tokens_details: { cached_tokens: 64, cache_write_tokens: 64 } });
    // $3 input, $0.30 read, $3.75 5-minute write, $6 1-hour write, $15 output × 90,000:
    // 15 × 270,000 + 64 × 27,000 + 24 × 337,500 + 40 × 540,000 + 8 × 1,350,000
    // = 4,050,000 + 1,728,000 + 8,100,000 + 21,600,000 + 10,800,000
    expect(await usageRecord(requestId)).toMatchObject({
      input_units: "15",
      cache_read_units: "64",
      cache_write_units: "24",
      cache_write_1h_units: "40",
      output_units: "8",
      prices_toman_per_1m: { cache_write: "337500", cache_write_1h: "540000" },
      billed_micro_toman: "46278000",
    });
    const audit = await t.admin("GET", "/admin/ledger/audit");
    expect(audit.body.checks.find((c: { name: string }) => c.name.startsWith("every usage record is metered"))).toMatchObject({ ok: true });
  } finally {
    sim.options.cacheWrite1hTokens = 0;
  }
});
