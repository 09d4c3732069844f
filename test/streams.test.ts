/**
 * Streams metered live, cut cleanly and billed exactly, checked with the official `openai`
 * client against the simulator's own log (tokens it generated per request, aborted ones too).
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import { Tiktoken } from "js-tiktoken/lite";
import o200k from "js-tiktoken/ranks/o200k_base";
import OpenAI from "openai";
import { METER_EVENTS, type MeterEvent } from "../actors/protocol.ts";
import { OUTPUT_TOKENS_LOWERED_MIN, STREAM_OUTPUT_TOKENS_DEFAULT } from "../src/operations/chat/budget.ts";
import { STREAM_READ_BYTES_MAX, STREAM_RELAY_BUFFER_CHARS_MAX } from "../src/operations/chat/relay.ts";
import { relayQueue } from "../src/metrics/metrics.ts";
import { simCompletion, simPromptText } from "../src/sim/text.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { until, untilValue } from "./until.ts";
import { simEntry as simEntryOf } from "./wires.ts";

/** How long a settled request may take to reach the usage records (group commit). */
const RECORD_WAIT_MS_MAX = 10_000;

const HELLO = [{ role: "user" as const, content: "Hello, world!" }];
const PROMPT_TOKENS = 10; // the simulator's count of HELLO, which it reports as usage
// gpt-4o-mini: micro-toman per token, in and out.
const IN_MICRO = 13_500n;
const OUT_MICRO = 54_000n;

let t: TestGateway;
const tiktoken = new Tiktoken(o200k);
const defaults = { ttftMs: 0, itlMs: 0, outputTokens: 16, failAfterChunks: null, stallAfterChunks: null, omitUsage: false };

beforeAll(async () => {
  t = await startTestGateway();
}, SETUP_MS_MAX);
afterAll(async () => t.stop(), SETUP_MS_MAX);
afterEach(() => Object.assign(t.sim!.options, defaults));

const sim = () => t.sim!;

async function usageRecord(requestId: string) {
  await t.gw.deps.writer.flush();
  const read = async () => {
    const audit = await t.admin("GET", "/admin/ledger/audit"); // writes pending usage first
    expect(audit.body.ok).toBe(true);
    const rows = await t.gw.deps.db.rows<{
      input_units: unknown;
      output_units: unknown;
      billed_micro: unknown;
      metered_micro: unknown;
      status: number;
    }>(sql`SELECT input_units, output_units, billed_micro, metered_micro, status FROM usage_records WHERE request_id = ${requestId}`);
    return rows[0];
  };
  const r = await untilValue(read, { msMax: RECORD_WAIT_MS_MAX, what: `the usage record of ${requestId}`, pollMs: 50 });
  return {
    input: BigInt(String(r.input_units)),
    output: BigInt(String(r.output_units)),
    billed: BigInt(String(r.billed_micro)),
    metered: BigInt(String(r.metered_micro)),
    status: Number(r.status),
  };
}

const simEntry = (requestId: string) => simEntryOf(sim(), requestId);

async function balance(accountId: string): Promise<bigint> {
  const account = await t.admin("GET", `/admin/accounts/${accountId}`);
  return BigInt(account.body.balance_micro_toman);
}

describe("live metering", () => {
  test("a wallet below the default limit: the upstream is told the limit the wallet covers and stops there itself, nothing written off", async () => {
    Object.assign(sim().options, { outputTokens: 20_000 });
    const funded = await t.fundedKey(300);
    const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: funded.key, maxRetries: 0 });
    const { data: stream, response } = await client.chat.completions
      .create({ model: "gpt-4o-mini", messages: HELLO, stream: true, stream_options: { include_usage: true } })
      .withResponse();
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | null = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    const requestId = response.headers.get("x-request-id")!;
    const entry = await simEntry(requestId);
    // The hold is the prompt's bound at the input price and the lowered limit at the output price.
    const record = await usageRecord(requestId);
    expect(finish).toBe("length"); // the vendor's own stop: it was told the lowered limit
    expect(entry.completionTokens).toBeGreaterThanOrEqual(OUTPUT_TOKENS_LOWERED_MIN);
    expect(entry.completionTokens).toBeLessThan(STREAM_OUTPUT_TOKENS_DEFAULT);
    expect(BigInt(entry.completionTokens + 1) * OUT_MICRO).toBeGreaterThan(300_000_000n - record.input * IN_MICRO);
    expect(usage).toMatchObject({ prompt_tokens: PROMPT_TOKENS, completion_tokens: entry.completionTokens });
    expect(record.billed).toBe(BigInt(PROMPT_TOKENS) * IN_MICRO + BigInt(entry.completionTokens) * OUT_MICRO);
    expect(record.metered).toBe(record.billed);
    expect(await balance(funded.accountId)).toBe(300_000_000n - record.billed);
  });

  test("a wallet that cannot cover 4,096 output tokens is refused 402 before any upstream call", async () => {
    const funded = await t.fundedKey(100); // about 1,850 output tokens of gpt-4o-mini
    const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: funded.key, maxRetries: 0 });
    const before = sim().log.totals.requests;
    const error = await client.chat.completions.create({ model: "gpt-4o-mini", messages: HELLO, stream: true }).catch((e) => e);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect(error.status).toBe(402);
    expect(sim().log.totals.requests).toBe(before);
  });

  test("a stream without max_tokens holds for the limit it sends and is billed the upstream's usage", async () => {
    Object.assign(sim().options, { outputTokens: 1_000 });
    const funded = await t.fundedKey(1_000);
    const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: funded.key, maxRetries: 0 });
    const { data: stream, response } = await client.chat.completions
      .create({ model: "gpt-4o-mini", messages: HELLO, stream: true, stream_options: { include_usage: true } })
      .withResponse();
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | null = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(finish).toBe("stop");
    expect(usage).toMatchObject({ prompt_tokens: PROMPT_TOKENS, completion_tokens: 1_000 });
    const record = await usageRecord(response.headers.get("x-request-id")!);
    expect(record.billed).toBe(BigInt(PROMPT_TOKENS) * IN_MICRO + 1_000n * OUT_MICRO);
    expect(t.gw.keyHost.inFlight(funded.keyId)).toBe(0);
  });

  test("meter events go to the bus at a bounded rate, the last one saying how the stream ended", async () => {
    Object.assign(sim().options, { outputTokens: 300, itlMs: 5 });
    const events: MeterEvent[] = [];
    const unsubscribe = t.gw.deps.bus.subscribe(METER_EVENTS, t.gw.deps.subjects.meter("gpt-4o-mini"), (e) => events.push(e));
    try {
      const funded = await t.fundedKey(1_000);
      const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: funded.key, maxRetries: 0 });
      const { data: stream, response } = await client.chat.completions
        .create({ model: "gpt-4o-mini", messages: HELLO, stream: true })
        .withResponse();
      const startedMs = performance.now();
      for await (const _ of stream);
      const elapsedS = (performance.now() - startedMs) / 1000;
      const requestId = response.headers.get("x-request-id")!;
      await until(() => events.some((e) => e.requestId === requestId && e.end), { what: "the stream's end on the usage stream" });
      const ours = events.filter((e) => e.requestId === requestId);
      expect(ours.at(-1)).toMatchObject({ end: "done", keyId: funded.keyId, outputTokens: 300 });
      expect(ours.at(-1)!.coveredTokens).toBe(STREAM_OUTPUT_TOKENS_DEFAULT); // the hold covers the limit sent
      expect(ours.length).toBeLessThanOrEqual(Math.ceil(elapsedS) + 2); // about one a second, not one per token
    } finally {
      unsubscribe();
    }
  });
});

describe("ends of a stream", () => {
  test("a client that leaves after 10 chunks: the upstream is cut at once, the slot freed, billed what was read until the cut and the allowance", async () => {
    Object.assign(sim().options, { outputTokens: 200, itlMs: 10 });
    const funded = await t.fundedKey(1_000);
    const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: funded.key, maxRetries: 0 });
    const { data: stream, response } = await client.chat.completions
      .create({ model: "gpt-4o-mini", messages: HELLO, stream: true })
      .withResponse();
    const requestId = response.headers.get("x-request-id")!;
    let chunks = 0;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta.content) chunks++;
      if (chunks === 10) {
        stream.controller.abort();
        break;
      }
    }
    const entry = await simEntry(requestId);
    expect(entry.aborted).toBe(true); // the simulator saw its connection close
    expect(entry.completionTokens).toBeLessThan(200);
    await until(() => t.gw.keyHost.inFlight(funded.keyId) === 0);
    const record = await usageRecord(requestId);
    expect(record.status).toBe(499);
    expect(record.billed).toBeGreaterThanOrEqual(BigInt(PROMPT_TOKENS) * IN_MICRO + BigInt(entry.completionTokens) * OUT_MICRO);
    expect(record.billed).toBeLessThan(BigInt(PROMPT_TOKENS) * IN_MICRO + 200n * OUT_MICRO);
  });

  test("an upstream that dies after 5 chunks: the client's stream raises an APIError with our error; billed those chunks", async () => {
    Object.assign(sim().options, { outputTokens: 100, failAfterChunks: 5 });
    const funded = await t.fundedKey(1_000);
    const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: funded.key, maxRetries: 0 });
    const { data: stream, response } = await client.chat.completions
      .create({ model: "gpt-4o-mini", messages: HELLO, stream: true })
      .withResponse();
    let text = "";
    const error = await (async () => {
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    })().catch((e) => e);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect(String(error.message)).toContain("upstream");
    const requestId = response.headers.get("x-request-id")!;
    const entry = await simEntry(requestId);
    expect(entry.completionTokens).toBe(5);
    expect(tiktoken.encode(text).length).toBe(5);
    const record = await usageRecord(requestId);
    expect(record.status).toBe(502);
    expect(record.billed).toBe(BigInt(PROMPT_TOKENS) * IN_MICRO + 5n * OUT_MICRO);
  });

  test("an upstream that reports no usage: billed by the js-tiktoken count of the delivered text", async () => {
    Object.assign(sim().options, { outputTokens: 40, omitUsage: true });
    const funded = await t.fundedKey(1_000);
    const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: funded.key, maxRetries: 0 });
    const { data: stream, response } = await client.chat.completions
      .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Tell me, in many words, about rivers." }], stream: true })
      .withResponse();
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    const record = await usageRecord(response.headers.get("x-request-id")!);
    const output = BigInt(tiktoken.encode(text).length);
    expect(record.output).toBe(output);
    expect(record.billed).toBe(record.input * IN_MICRO + output * OUT_MICRO);
  });
});

describe("backpressure", () => {
  test("a client that stops reading for 10 s: the relay's buffer stays under its bound and the stream resumes intact", async () => {
    const tokens = 100_000; // o4-mini's output_max (gpt-4o-mini's vendor refuses more than 16,384)
    Object.assign(sim().options, { outputTokens: tokens, ttftMs: 1 });
    const funded = await t.fundedKey(60_000); // 100,000 output tokens cost 39,600 toman
    const response = await fetch(`${t.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${funded.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "o4-mini", messages: HELLO, stream: true, max_completion_tokens: tokens }),
    });
    expect(response.status).toBe(200);
    const requestId = response.headers.get("x-request-id")!;
    const reader = response.body!.getReader();
    let raw = "";
    const decoder = new TextDecoder();
    const first = await reader.read();
    raw += decoder.decode(first.value, { stream: true });
    // Whether the upstream itself pauses depends on the kernel's socket buffers (here up to
    // 32 MiB per receiving socket, more than this whole stream); what the gateway holds does not.
    let queuedMax = 0;
    for (let i = 0; i < 100; i++) {
      // The client not reading for 10 s is the behaviour under test; the gateway's queue is sampled meanwhile.
      await Bun.sleep(100);
      queuedMax = Math.max(queuedMax, relayQueue.chars);
    }
    expect(queuedMax).toBeGreaterThan(0);
    // One network read of the upstream may land on a full queue.
    expect(queuedMax).toBeLessThanOrEqual(STREAM_RELAY_BUFFER_CHARS_MAX + STREAM_READ_BYTES_MAX);
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      raw += decoder.decode(value, { stream: true });
    }
    let text = "";
    for (const line of raw.split("\n")) {
      if (!line.startsWith("data: {")) continue;
      text += (JSON.parse(line.slice(6)) as { choices: { delta?: { content?: string } }[] }).choices[0]?.delta?.content ?? "";
    }
    expect(raw.slice(-300)).toEndWith("data: [DONE]\n\n");
    expect(text).toBe(simCompletion({ seed: 1, promptText: simPromptText(HELLO), tokens }).join(""));
    expect((await simEntry(requestId)).completionTokens).toBe(tokens);
  }, 120_000);
});
