/**
 * Anthropic- and Gemini-backed models answering the official `openai` client through the
 * gateway: the simulator speaks each vendor's wire format, the adapters translate, and the
 * charge is checked against the simulator's own log (the tokens it served) × the price.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import type { Simulator } from "../src/sim/server.ts";
import { simCompletion, simPromptText } from "../src/sim/text.ts";
import { SETUP_MS_MAX, startSimGateway, type SimGateway, type TestGateway } from "./helpers.ts";
import { untilValue } from "./until.ts";

const UPSTREAM_KEY = "upstream-secret";
const UPSTREAM_KEY_ENV = "DARVAZE_TEST_UPSTREAM_KEY";
const SEED = 5;
const OUTPUT_TOKENS = 8;

/** A pools file sending one model to the simulator's Anthropic route and one to its Gemini route. */
function vendorPoolsFile(sim: Simulator): string {
  const path = join(mkdtempSync(join(tmpdir(), "darvaze-pools-")), "pools.json");
  const backend = (name: string, kind: string, upstream_model: string) => ({
    backends: [{ name, kind, url: sim.url, api_key_env: UPSTREAM_KEY_ENV, upstream_model, region: "abroad" }],
  });
  writeFileSync(
    path,
    JSON.stringify({
      pools: {
        "claude-3-5-haiku": backend("anthropic-sim", "anthropic", "claude-3-5-haiku-20241022"),
        "gemini-2.5-flash": backend("gemini-sim", "gemini", "gemini-2.5-flash"),
      },
    }),
  );
  return path;
}

/** Catalog prices in micro-toman per token (toman per 1M tokens), as published. */
const VENDORS = [
  { model: "claude-3-5-haiku", upstream: "claude-3-5-haiku-20241022", inputMicro: 72_000n, outputMicro: 360_000n },
  { model: "gemini-2.5-flash", upstream: "gemini-2.5-flash", inputMicro: 27_000n, outputMicro: 225_000n },
] as const;

const SYSTEM = "Be brief.";
const MESSAGES = [
  { role: "system" as const, content: SYSTEM },
  { role: "user" as const, content: "Hello, world!" },
];
const WEATHER_TOOL = {
  type: "function" as const,
  function: {
    name: "get_weather",
    description: "Current weather",
    parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } }, required: ["city"] },
  },
};

let setup: SimGateway | undefined;
let sim: Simulator;
let t: TestGateway;
let accountId: string;
let client: OpenAI;

beforeAll(async () => {
  setup = await startSimGateway({ apiKey: UPSTREAM_KEY, seed: SEED, outputTokens: OUTPUT_TOKENS }, vendorPoolsFile, 10_000, {
    [UPSTREAM_KEY_ENV]: UPSTREAM_KEY,
  });
  ({ sim, t, accountId, client } = setup);
}, SETUP_MS_MAX);

afterAll(() => setup?.stop(), SETUP_MS_MAX);

/** How long a settled request may take to reach the ledger (usage is written in group commits). */
const RECORD_WAIT_MS_MAX = 10_000;

/** The usage record of one request, the simulator's log entry for it, and the expected charge. */
async function billing(requestId: string, vendor: (typeof VENDORS)[number]) {
  const entries = sim.log.byRequestId(requestId);
  expect(entries).toHaveLength(1);
  const entry = entries[0]!;
  const read = async () => {
    const account = await t.admin("GET", `/admin/accounts/${accountId}`);
    return account.body.recent_usage.find((u: { request_id: string }) => u.request_id === requestId) as Record<string, unknown> | undefined;
  };
  const record = await untilValue(read, { msMax: RECORD_WAIT_MS_MAX, what: `the usage record of ${requestId}`, pollMs: 20 });
  const expectedMicro = BigInt(entry.promptTokens) * vendor.inputMicro + BigInt(entry.completionTokens) * vendor.outputMicro;
  return { entry, record, expectedMicro };
}

/**
 * The request's usage record (the charge) holds the simulator's token counts × the price. The
 * wallet balance is not compared per request: other requests' settlements land asynchronously.
 */
async function expectBilledAsLogged(requestId: string, vendor: (typeof VENDORS)[number]) {
  const { entry, record, expectedMicro } = await billing(requestId, vendor);
  expect(entry.model).toBe(vendor.upstream);
  expect(record).toMatchObject({
    model: vendor.model,
    input_units: String(entry.promptTokens),
    output_units: String(entry.completionTokens),
    billed_micro_toman: expectedMicro.toString(),
    status: 200,
  });
  return entry;
}

const expectedText = (tokens = OUTPUT_TOKENS) => simCompletion({ seed: SEED, promptText: simPromptText(MESSAGES), tokens }).join("");

describe.each(VENDORS)("$model through its vendor's wire format", (vendor) => {
  test("create: the text, finish reason and usage in OpenAI's format, charged as the simulator logged", async () => {
    const { data, response } = await client.chat.completions
      .create({ model: vendor.model, messages: MESSAGES, max_tokens: 100 })
      .withResponse();
    const requestId = response.headers.get("x-request-id")!;
    expect(data.object).toBe("chat.completion");
    expect(data.id).toBe(`chatcmpl-${requestId}`);
    expect(data.model).toBe(vendor.model);
    expect(data.choices[0]!.message.content).toBe(expectedText());
    expect(data.choices[0]!.finish_reason).toBe("stop");
    const entry = await expectBilledAsLogged(requestId, vendor);
    expect(data.usage).toMatchObject({ prompt_tokens: entry.promptTokens, completion_tokens: OUTPUT_TOKENS });
  });

  test("max_tokens cuts the reply: finish reason length", async () => {
    const data = await client.chat.completions.create({ model: vendor.model, messages: MESSAGES, max_tokens: 3 });
    // A thinking Gemini model is sent half the limit as its thinking budget and the rest for the reply.
    const replyLimit = vendor.model === "gemini-2.5-flash" ? 2 : 3;
    expect(data.choices[0]!.message.content).toBe(expectedText(replyLimit));
    expect(data.choices[0]!.finish_reason).toBe("length");
    expect(data.usage?.completion_tokens).toBe(replyLimit);
  });

  test("stream: the same text in chunks, a finish chunk, one usage-only chunk, charged as logged", async () => {
    const { data: stream, response } = await client.chat.completions
      .create({ model: vendor.model, messages: MESSAGES, max_tokens: 100, stream: true, stream_options: { include_usage: true } })
      .withResponse();
    const requestId = response.headers.get("x-request-id")!;
    let text = "";
    const finishes: string[] = [];
    const usageChunks = [];
    for await (const chunk of stream) {
      expect(chunk.object).toBe("chat.completion.chunk");
      expect(chunk.model).toBe(vendor.model);
      expect(chunk.id).toBe(`chatcmpl-${requestId}`);
      for (const choice of chunk.choices) {
        text += choice.delta.content ?? "";
        if (choice.finish_reason) finishes.push(choice.finish_reason);
      }
      if (chunk.usage) usageChunks.push(chunk);
    }
    expect(text).toBe(expectedText());
    expect(finishes).toEqual(["stop"]);
    expect(usageChunks).toHaveLength(1);
    expect(usageChunks[0]!.choices).toEqual([]);
    const entry = await expectBilledAsLogged(requestId, vendor);
    expect(usageChunks[0]!.usage).toMatchObject({ prompt_tokens: entry.promptTokens, completion_tokens: entry.completionTokens });
  });

  test("a stream without include_usage has no usage chunk and is still charged as logged", async () => {
    const { data: stream, response } = await client.chat.completions
      .create({ model: vendor.model, messages: MESSAGES, stream: true })
      .withResponse();
    let usageChunks = 0;
    for await (const chunk of stream) if (chunk.usage) usageChunks++;
    expect(usageChunks).toBe(0);
    await expectBilledAsLogged(response.headers.get("x-request-id")!, vendor);
  });

  test("tools: a required tool call with its arguments, finish reason tool_calls, charged as logged", async () => {
    const { data, response } = await client.chat.completions
      .create({ model: vendor.model, messages: MESSAGES, tools: [WEATHER_TOOL], tool_choice: "required" })
      .withResponse();
    const choice = data.choices[0]!;
    expect(choice.finish_reason).toBe("tool_calls");
    expect(choice.message.tool_calls).toHaveLength(1);
    const call = choice.message.tool_calls![0]! as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
    expect(call.type).toBe("function");
    expect(call.id.length).toBeGreaterThan(0);
    expect(call.function.name).toBe("get_weather");
    expect(JSON.parse(call.function.arguments)).toEqual({ city: "sim", days: 1 });
    await expectBilledAsLogged(response.headers.get("x-request-id")!, vendor);
  });

  test("tools, streamed: the arguments reassemble from the deltas, charged as logged", async () => {
    const { data: stream, response } = await client.chat.completions
      .create({
        model: vendor.model,
        messages: MESSAGES,
        tools: [WEATHER_TOOL],
        tool_choice: "required",
        stream: true,
        stream_options: { include_usage: true },
      })
      .withResponse();
    const calls = new Map<number, { id?: string; name?: string; arguments: string }>();
    let finish: string | null = null;
    for await (const chunk of stream) {
      for (const choice of chunk.choices) {
        finish = choice.finish_reason ?? finish;
        for (const delta of choice.delta.tool_calls ?? []) {
          const call = calls.get(delta.index) ?? { arguments: "" };
          call.id ??= delta.id;
          call.name ??= delta.function?.name;
          call.arguments += delta.function?.arguments ?? "";
          calls.set(delta.index, call);
        }
      }
    }
    expect(finish).toBe("tool_calls");
    expect([...calls.keys()]).toEqual([0]);
    expect(calls.get(0)!.name).toBe("get_weather");
    expect(calls.get(0)!.id).toBeString();
    expect(JSON.parse(calls.get(0)!.arguments)).toEqual({ city: "sim", days: 1 });
    await expectBilledAsLogged(response.headers.get("x-request-id")!, vendor);
  });

  test("multi-turn: after the tool's result the model answers in text", async () => {
    const first = await client.chat.completions.create({
      model: vendor.model,
      messages: MESSAGES,
      tools: [WEATHER_TOOL],
      tool_choice: "required",
    });
    const call = first.choices[0]!.message.tool_calls![0]! as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
    const second = await client.chat.completions.create({
      model: vendor.model,
      tools: [WEATHER_TOOL],
      tool_choice: "required",
      messages: [...MESSAGES, first.choices[0]!.message, { role: "tool", tool_call_id: call.id, content: "18 degrees" }],
    });
    expect(second.choices[0]!.finish_reason).toBe("stop");
    expect(second.choices[0]!.message.content!.length).toBeGreaterThan(0);
    expect(second.choices[0]!.message.tool_calls ?? []).toHaveLength(0);
  });

  test("an upstream that rate limits: an OpenAI-shaped 502, nothing charged", async () => {
    sim.options.rateLimitRate = 1;
    let error: unknown;
    try {
      error = await client.chat.completions.create({ model: vendor.model, messages: MESSAGES }).catch((e: unknown) => e);
    } finally {
      sim.options.rateLimitRate = 0;
    }
    expect(error).toBeInstanceOf(OpenAI.APIError);
    const apiError = error as InstanceType<typeof OpenAI.APIError>;
    expect(apiError.status).toBe(502);
    expect(apiError.type).toBe("api_error");
    const { entry, record } = await billing(apiError.requestID!, vendor);
    expect(entry).toMatchObject({ status: 429, promptTokens: 0, completionTokens: 0 });
    expect(record).toMatchObject({ billed_micro_toman: "0", status: 502 });
  });

  test("n = 2: a 400 naming n before anything is reserved or sent, since the vendor returns one choice", async () => {
    const error = await client.chat.completions.create({ model: vendor.model, messages: MESSAGES, n: 2 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    const apiError = error as InstanceType<typeof OpenAI.BadRequestError>;
    expect(apiError.param).toBe("n");
    expect(apiError.type).toBe("invalid_request_error");
    expect(apiError.message).toContain("at most 1 choice");
    expect(sim.log.byRequestId(apiError.requestID!)).toHaveLength(0);
    const account = await t.admin("GET", `/admin/accounts/${accountId}`);
    expect(account.body.recent_usage.some((u: { request_id: string }) => u.request_id === apiError.requestID)).toBe(false);
  });

  test("a stream dropped mid-way ends in an error event after the text so far", async () => {
    sim.options.failAfterChunks = 3;
    try {
      const stream = await client.chat.completions.create({ model: vendor.model, messages: MESSAGES, stream: true });
      let text = "";
      const error = await (async () => {
        for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
      })().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OpenAI.APIError);
      expect(text).toBe(expectedText(3));
    } finally {
      sim.options.failAfterChunks = null;
    }
  });
});

test("Gemini's thinking tokens are billed as output, as the simulator logged them", async () => {
  const vendor = VENDORS[1];
  sim.options.thoughtTokens = 7;
  try {
    const { data, response } = await client.chat.completions.create({ model: vendor.model, messages: MESSAGES }).withResponse();
    const entry = await expectBilledAsLogged(response.headers.get("x-request-id")!, vendor);
    expect(entry.completionTokens).toBe(OUTPUT_TOKENS + 7);
    expect(data.usage?.completion_tokens).toBe(OUTPUT_TOKENS + 7);
  } finally {
    sim.options.thoughtTokens = 0;
  }
});
