/**
 * POST /v1/responses through the official `openai` SDK (`responses.create`, `responses.stream`)
 * for an OpenAI-compatible, an Anthropic and a Gemini backend (the simulator speaks all three):
 * the replies and every stream event conform to OpenAI's spec, and each request is billed exactly
 * the simulator's logged tokens × the published price.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import type { Simulator } from "../src/sim/server.ts";
import { SETUP_MS_MAX, type TestGateway } from "./helpers.ts";
import { responseProblems, streamEventProblems } from "./openaiSchema.ts";
import {
  expectBilledAsLogged,
  expectBilledCoveringLogged,
  expectedText,
  OUTPUT_TOKENS,
  PIXEL_PNG,
  expectLeftAndBilled,
  startWireSuite,
  simEntry,
  usageRecord,
  withSimOptions,
  VENDORS,
  WEATHER_PARAMETERS,
} from "./wires.ts";

const INSTRUCTIONS = "Be brief.";
const QUESTION = "Hello, world!";
/** The same conversation as the simulator sees it (the instructions become a system message). */
const AS_CHAT = [
  { role: "system", content: INSTRUCTIONS },
  { role: "user", content: QUESTION },
];
const WEATHER_TOOL = {
  type: "function" as const,
  name: "get_weather",
  description: "Current weather",
  parameters: WEATHER_PARAMETERS,
  strict: false,
};

let sim: Simulator;
let t: TestGateway;
let client: OpenAI;

beforeAll(async () => {
  const suite = await startWireSuite();
  sim = suite.sim;
  t = suite.t;
  client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: suite.key, maxRetries: 0 });
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  await sim?.stop();
}, SETUP_MS_MAX);

/** Streams a request, checks every event against the spec and their sequence numbers; returns them. */
async function streamed(params: Parameters<OpenAI["responses"]["stream"]>[0]) {
  const stream = client.responses.stream(params);
  const events: OpenAI.Responses.ResponseStreamEvent[] = [];
  for await (const event of stream) events.push(event);
  const final = await stream.finalResponse();
  for (const event of events)
    expect({ type: event.type, problems: streamEventProblems(event) }).toEqual({ type: event.type, problems: [] });
  expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
  return { events, final, requestId: final.id.replace(/^resp_/, "") };
}

describe.each(VENDORS)("$model ($kind backend) through the Responses API", (vendor) => {
  test("create: the text, status completed and usage, as the spec says, billed as logged", async () => {
    const { data, response } = await client.responses
      .create({ model: vendor.model, instructions: INSTRUCTIONS, input: QUESTION, max_output_tokens: 100 })
      .withResponse();
    const requestId = response.headers.get("x-request-id")!;
    expect(responseProblems(data)).toEqual([]);
    expect(data).toMatchObject({ id: `resp_${requestId}`, object: "response", status: "completed", model: vendor.model, store: false });
    expect(data.output_text).toBe(expectedText(AS_CHAT));
    const entry = await expectBilledAsLogged({ sim, t }, requestId, vendor);
    expect(data.usage).toMatchObject({
      input_tokens: entry.promptTokens,
      output_tokens: OUTPUT_TOKENS,
      total_tokens: entry.promptTokens + OUTPUT_TOKENS,
    });
  });

  test("stream: typed events in order, the final response's text and usage, billed as logged", async () => {
    const { events, final, requestId } = await streamed({ model: vendor.model, instructions: INSTRUCTIONS, input: QUESTION });
    const types = events.map((e) => e.type);
    expect(types.slice(0, 4)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
    ]);
    expect(types.slice(-4)).toEqual([
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ]);
    const deltas = events
      .filter((e) => e.type === "response.output_text.delta")
      .map((e) => (e as OpenAI.Responses.ResponseTextDeltaEvent).delta);
    expect(deltas.join("")).toBe(expectedText(AS_CHAT));
    expect(final.status).toBe("completed");
    expect(final.output_text).toBe(expectedText(AS_CHAT));
    expect(responseProblems(final)).toEqual([]);
    const entry = await expectBilledAsLogged({ sim, t }, requestId, vendor);
    expect(final.usage).toMatchObject({ input_tokens: entry.promptTokens, output_tokens: entry.completionTokens });
  });

  test("a function call round trip: the call item, then its output answered in text", async () => {
    const { data: first, response } = await client.responses
      .create({ model: vendor.model, input: QUESTION, tools: [WEATHER_TOOL], tool_choice: "required" })
      .withResponse();
    expect(responseProblems(first)).toEqual([]);
    const call = first.output.find((item) => item.type === "function_call") as OpenAI.Responses.ResponseFunctionToolCall;
    expect(call).toMatchObject({ type: "function_call", name: "get_weather", status: "completed" });
    expect(JSON.parse(call.arguments)).toEqual({ city: "sim", days: 1 });
    await expectBilledAsLogged({ sim, t }, response.headers.get("x-request-id")!, vendor);

    const second = await client.responses.create({
      model: vendor.model,
      tools: [WEATHER_TOOL],
      input: [
        { role: "user", content: QUESTION },
        { type: "function_call", call_id: call.call_id, name: call.name, arguments: call.arguments },
        { type: "function_call_output", call_id: call.call_id, output: "18 degrees" },
      ],
    });
    expect(second.status).toBe("completed");
    expect(second.output.some((item) => item.type === "function_call")).toBe(false);
    expect(second.output_text.length).toBeGreaterThan(0);
  });

  test("a function call streamed: the arguments arrive as deltas and reassemble", async () => {
    const { events, final, requestId } = await streamed({
      model: vendor.model,
      input: QUESTION,
      tools: [WEATHER_TOOL],
      tool_choice: "required",
    });
    const done = events.find(
      (e) => e.type === "response.function_call_arguments.done",
    ) as OpenAI.Responses.ResponseFunctionCallArgumentsDoneEvent;
    expect(JSON.parse(done.arguments)).toEqual({ city: "sim", days: 1 });
    const deltas = events
      .filter((e) => e.type === "response.function_call_arguments.delta")
      .map((e) => (e as OpenAI.Responses.ResponseFunctionCallArgumentsDeltaEvent).delta);
    expect(deltas.join("")).toBe(done.arguments);
    const call = final.output.find((item) => item.type === "function_call") as OpenAI.Responses.ResponseFunctionToolCall;
    expect(call.name).toBe("get_weather");
    await expectBilledAsLogged({ sim, t }, requestId, vendor);
  });

  test("an image input: answered and billed as logged", async () => {
    const { data, response } = await client.responses
      .create({
        model: vendor.model,
        input: [
          {
            role: "user",
            content: [
              { type: "input_text", text: "What is this?" },
              { type: "input_image", image_url: `data:image/png;base64,${PIXEL_PNG}`, detail: "auto" },
            ],
          },
        ],
      })
      .withResponse();
    expect(data.status).toBe("completed");
    expect(data.output_text.length).toBeGreaterThan(0);
    await expectBilledAsLogged({ sim, t }, response.headers.get("x-request-id")!, vendor);
  });

  test("a cut at the output budget: status incomplete (max_output_tokens), whole and streamed", async () => {
    // A thinking Gemini model is sent half the limit as its thinking budget and the rest for the reply.
    const replyTokens = vendor.model === "gemini-2.5-flash" ? 2 : 3;
    const whole = await client.responses.create({ model: vendor.model, instructions: INSTRUCTIONS, input: QUESTION, max_output_tokens: 3 });
    expect(responseProblems(whole)).toEqual([]);
    expect(whole).toMatchObject({ status: "incomplete", incomplete_details: { reason: "max_output_tokens" } });
    expect(whole.output_text).toBe(expectedText(AS_CHAT, replyTokens));
    const { events, final, requestId } = await streamed({
      model: vendor.model,
      instructions: INSTRUCTIONS,
      input: QUESTION,
      max_output_tokens: 3,
    });
    expect(events.at(-1)!.type).toBe("response.incomplete");
    expect(final).toMatchObject({
      status: "incomplete",
      incomplete_details: { reason: "max_output_tokens" },
      output_text: expectedText(AS_CHAT, replyTokens),
    });
    await expectBilledAsLogged({ sim, t }, requestId, vendor);
  });

  test("an upstream that dies mid-stream: response.failed with the error after the text so far; billed those tokens", async () => {
    // Tokens apart, so the three reach the gateway before the connection drops.
    await withSimOptions(sim, { failAfterChunks: 3, itlMs: 5 }, async () => {
      const { events, final, requestId } = await streamed({ model: vendor.model, instructions: INSTRUCTIONS, input: QUESTION });
      expect(events.at(-1)!.type).toBe("response.failed");
      expect(final.status).toBe("failed");
      expect(final.error?.code).toBe("server_error");
      expect(final.error?.message).toContain("upstream");
      expect(final.output_text).toBe(expectedText(AS_CHAT, 3));
      await expectBilledCoveringLogged({ sim, t }, requestId, vendor, 502);
    });
  });

  test("a client that leaves mid-stream: nothing more is relayed, the upstream is cut and billed what it generated until then, within the allowance", async () => {
    await withSimOptions(sim, { outputTokens: 100, itlMs: 20 }, async () => {
      const { data: stream, response } = await client.responses
        .create({ model: vendor.model, input: QUESTION, stream: true })
        .withResponse();
      const requestId = response.headers.get("x-request-id")!;
      let deltas = 0;
      for await (const event of stream) {
        if (event.type === "response.output_text.delta" && ++deltas === 5) {
          stream.controller.abort();
          break;
        }
      }
      const entry = await expectLeftAndBilled({ sim, t }, requestId, vendor);
      expect(entry.completionTokens).toBeLessThan(100);
    });
  });
});

describe("the wallet's edge", () => {
  test("a stream without max_output_tokens the wallet cannot cover: told the limit the wallet covers, response.incomplete, billed what the vendor generated", async () => {
    const vendor = VENDORS[0];
    const walletMicro = 300_000_000n; // the prompt and about 5,500 output tokens at gpt-4o-mini's prices
    const funded = await t.fundedKey(300);
    const poor = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: funded.key, maxRetries: 0 });
    await withSimOptions(sim, { outputTokens: 20_000 }, async () => {
      const stream = poor.responses.stream({ model: vendor.model, input: QUESTION });
      const events: OpenAI.Responses.ResponseStreamEvent[] = [];
      for await (const event of stream) events.push(event);
      const final = await stream.finalResponse();
      expect(events.at(-1)!.type).toBe("response.incomplete");
      expect(final).toMatchObject({ status: "incomplete", incomplete_details: { reason: "max_output_tokens" } });
      const delivered = events.filter((e) => e.type === "response.output_text.delta").length;
      expect(delivered).toBeGreaterThanOrEqual(4_096);
      expect(delivered).toBeLessThan(16_384);
      const requestId = final.id.replace(/^resp_/, "");
      const record = await usageRecord(t, requestId);
      expect(record.billed).toBeLessThanOrEqual(walletMicro);
      // The simulator's words are one token each: it generated exactly what was delivered, and that was billed.
      expect(record.output).toBe(BigInt((await simEntry(sim, requestId)).completionTokens));
      expect(record.billed).toBe(record.input * vendor.inputMicro + BigInt(delivered) * vendor.outputMicro);
    });
  });
});

describe("what a stateless gateway refuses", () => {
  test.each([
    [{ store: true }, "store"],
    [{ previous_response_id: "resp_earlier" }, "previous_response_id"],
  ] as const)("%j: a 400 naming %s, nothing sent upstream", async (extra, param) => {
    const error = await client.responses
      .create({ model: "gpt-4o-mini", input: QUESTION, ...(extra as object) } as OpenAI.Responses.ResponseCreateParamsNonStreaming)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    const apiError = error as InstanceType<typeof OpenAI.BadRequestError>;
    expect(apiError.param).toBe(param);
    expect(sim.log.byRequestId(apiError.requestID!)).toHaveLength(0);
  });

  test("a hosted tool (web_search) is left out, not refused: the reply is answered without it", async () => {
    const tools = [{ type: "web_search" }] as OpenAI.Responses.ResponseCreateParamsNonStreaming["tools"];
    const response = await client.responses.create({ model: "gpt-4o-mini", input: QUESTION, tools });
    expect(response.status).toBe("completed");
    expect(response.output_text).toBe(expectedText([{ role: "user", content: QUESTION }]));
  });

  test("an unknown model: a 404 in OpenAI's shape", async () => {
    const error = await client.responses.create({ model: "no-such-model", input: QUESTION }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.NotFoundError);
  });
});
