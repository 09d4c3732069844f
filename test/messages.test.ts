/**
 * POST /v1/messages through `@anthropic-ai/sdk` (`messages.create`, `messages.stream`) for an
 * OpenAI-compatible, an Anthropic and a Gemini backend (the simulator speaks all three): the
 * replies and the event sequence are Anthropic's, `finalMessage()` resolves with the content and
 * usage, and each request is billed exactly the simulator's logged tokens × the published price.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import type { Simulator } from "../src/sim/server.ts";
import { countsExactly } from "../src/admission/model.ts";
import { isFailure } from "../src/errors.ts";
import { exactPromptTokens } from "../src/operations/chat/budget.ts";
import { chatRequest } from "../src/operations/chat/schema.ts";
import { countPromptTokens, promptTokensUpperBound } from "../src/tokens/count.ts";
import { messagesToChat } from "../src/wires/messages/request.ts";
import { SETUP_MS_MAX, type TestGateway } from "./helpers.ts";
import {
  expectBilledAsLogged,
  expectBilledCoveringLogged,
  expectedText,
  OUTPUT_TOKENS,
  PIXEL_PNG,
  expectLeftAndBilled,
  simEntry,
  startWireSuite,
  withSimOptions,
  VENDORS,
  WEATHER_PARAMETERS,
  SYSTEM,
  QUESTION,
  AS_CHAT,
} from "./wires.ts";

const MESSAGES: Anthropic.MessageParam[] = [{ role: "user", content: QUESTION }];
const WEATHER_TOOL: Anthropic.Tool = {
  name: "get_weather",
  description: "Current weather",
  input_schema: WEATHER_PARAMETERS as Anthropic.Tool.InputSchema,
};

let sim: Simulator;
let t: TestGateway;
let key: string;
let client: Anthropic;

beforeAll(async () => {
  const suite = await startWireSuite();
  sim = suite.sim;
  t = suite.t;
  key = suite.key;
  client = new Anthropic({ baseURL: t.url, apiKey: key, maxRetries: 0 });
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  await sim?.stop();
}, SETUP_MS_MAX);

/**
 * The gateway's count of a Messages request's input, as admission takes it: the prompt's byte
 * bound, or for a model whose vendor's tokenizer the gateway has (OpenAI's) the exact count within it.
 */
async function gatewayInputCount(sent: Record<string, unknown>): Promise<number> {
  const translated = messagesToChat(sent, new Headers());
  if (isFailure(translated)) throw new Error(translated.message);
  const chat = chatRequest.parse(translated.chat);
  const bound = promptTokensUpperBound(chat, () => Buffer.byteLength(JSON.stringify(translated.chat), "utf8"));
  return countsExactly(t.gw.deps.catalog.get(chat.model)!) ? Math.min(bound, await exactPromptTokens(chat)) : bound;
}

/** The content's blocks, each as its text when it is a text block (then nothing else is in it). */
const textOf = (content: Anthropic.ContentBlock[]) => content.map((b) => (b.type === "text" ? b.text : b));

/** Streams a request; its events and the final message. */
async function streamed(params: Anthropic.MessageStreamParams) {
  const stream = client.messages.stream(params);
  const events: Anthropic.MessageStreamEvent[] = [];
  stream.on("streamEvent", (event) => events.push(event));
  const final = await stream.finalMessage();
  return { events, final, requestId: final.id.replace(/^msg_/, "") };
}

describe.each(VENDORS)("$model ($kind backend) through the Messages API", (vendor) => {
  test("create: the text, stop reason and usage in Anthropic's shape, billed as logged", async () => {
    const { data, response } = await client.messages
      .create({ model: vendor.model, system: SYSTEM, messages: MESSAGES, max_tokens: 100 })
      .withResponse();
    const requestId = response.headers.get("request-id")!;
    expect(data).toMatchObject({
      id: `msg_${requestId}`,
      type: "message",
      role: "assistant",
      model: vendor.model,
      stop_reason: "end_turn",
      stop_sequence: null,
    });
    expect(textOf(data.content)).toEqual([expectedText(AS_CHAT)]);
    const entry = await expectBilledAsLogged({ sim, t }, requestId, vendor);
    expect(data.usage).toMatchObject({ input_tokens: entry.promptTokens, output_tokens: OUTPUT_TOKENS });
  });

  test("stream: Anthropic's event sequence; finalMessage() has the text and the usage, billed as logged", async () => {
    const { events, final, requestId } = await streamed({ model: vendor.model, system: SYSTEM, messages: MESSAGES, max_tokens: 100 });
    const types = events.map((e) => e.type);
    expect(types[0]).toBe("message_start");
    expect(types[1]).toBe("content_block_start");
    expect(types.slice(-3)).toEqual(["content_block_stop", "message_delta", "message_stop"]);
    expect(new Set(types.slice(2, -3))).toEqual(new Set(["content_block_delta"]));
    expect(textOf(final.content)).toEqual([expectedText(AS_CHAT)]);
    expect(final.stop_reason).toBe("end_turn");
    const entry = await expectBilledAsLogged({ sim, t }, requestId, vendor);
    expect(final.usage).toMatchObject({ input_tokens: entry.promptTokens, output_tokens: entry.completionTokens });
  });

  test("stream: message_start states an Anthropic backend's own input count, else the gateway's (the cost value's input)", async () => {
    const sent = { model: vendor.model, messages: MESSAGES, max_tokens: 100, stream: true };
    // Read raw: the SDK updates the message_start object it handed out with later usage.
    const response = await fetch(`${t.url}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": key, "content-type": "application/json", "anthropic-version": "2023-06-01" },
      body: JSON.stringify(sent),
    });
    const text = await response.text();
    const start = JSON.parse(
      text
        .split("\n")
        .find((line) => line.startsWith("data: "))!
        .slice("data: ".length),
    );
    expect(start.type).toBe("message_start");
    const entry = await simEntry(sim, response.headers.get("request-id")!);
    expect(start.message.usage.input_tokens).toBe(vendor.kind === "anthropic" ? entry.promptTokens : await gatewayInputCount(sent));
  });

  test("a tool call round trip: tool_use with its input, then the tool_result answered in text", async () => {
    const { data: first, response } = await client.messages
      .create({ model: vendor.model, messages: MESSAGES, max_tokens: 100, tools: [WEATHER_TOOL], tool_choice: { type: "any" } })
      .withResponse();
    expect(first.stop_reason).toBe("tool_use");
    const use = first.content.find((b) => b.type === "tool_use") as Anthropic.ToolUseBlock;
    expect(use).toMatchObject({ type: "tool_use", name: "get_weather", input: { city: "sim", days: 1 } });
    await expectBilledAsLogged({ sim, t }, response.headers.get("request-id")!, vendor);

    const second = await client.messages.create({
      model: vendor.model,
      max_tokens: 100,
      tools: [WEATHER_TOOL],
      messages: [
        ...MESSAGES,
        { role: "assistant", content: first.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "18 degrees" }] },
      ],
    });
    expect(second.stop_reason).toBe("end_turn");
    expect(second.content.some((b) => b.type === "tool_use")).toBe(false);
    expect((second.content[0] as Anthropic.TextBlock).text.length).toBeGreaterThan(0);
  });

  test("a tool call streamed: input_json_delta pieces make the tool_use input", async () => {
    const { events, final, requestId } = await streamed({
      model: vendor.model,
      messages: MESSAGES,
      max_tokens: 100,
      tools: [WEATHER_TOOL],
      tool_choice: { type: "any" },
    });
    expect(events.some((e) => e.type === "content_block_delta" && e.delta.type === "input_json_delta")).toBe(true);
    expect(final.stop_reason).toBe("tool_use");
    expect(final.content.find((b) => b.type === "tool_use")).toMatchObject({ name: "get_weather", input: { city: "sim", days: 1 } });
    await expectBilledAsLogged({ sim, t }, requestId, vendor);
  });

  test("an image block: answered and billed as logged", async () => {
    const { data, response } = await client.messages
      .create({
        model: vendor.model,
        max_tokens: 100,
        messages: [
          {
            role: "user",
            content: [
              { type: "text", text: "What is this?" },
              { type: "image", source: { type: "base64", media_type: "image/png", data: PIXEL_PNG } },
            ],
          },
        ],
      })
      .withResponse();
    expect(data.stop_reason).toBe("end_turn");
    expect((data.content[0] as Anthropic.TextBlock).text.length).toBeGreaterThan(0);
    await expectBilledAsLogged({ sim, t }, response.headers.get("request-id")!, vendor);
  });

  test("a cut at max_tokens: stop_reason max_tokens, whole and streamed", async () => {
    // A thinking Gemini model is sent half the limit as its thinking budget and the rest for the reply.
    const replyTokens = vendor.model === "gemini-2.5-flash" ? 2 : 3;
    const whole = await client.messages.create({ model: vendor.model, system: SYSTEM, messages: MESSAGES, max_tokens: 3 });
    expect(whole.stop_reason).toBe("max_tokens");
    expect(textOf(whole.content)).toEqual([expectedText(AS_CHAT, replyTokens)]);
    const { final, requestId } = await streamed({ model: vendor.model, system: SYSTEM, messages: MESSAGES, max_tokens: 3 });
    expect(final.stop_reason).toBe("max_tokens");
    expect(textOf(final.content)).toEqual([expectedText(AS_CHAT, replyTokens)]);
    const entry = await expectBilledAsLogged({ sim, t }, requestId, vendor);
    expect(final.usage.output_tokens).toBe(entry.completionTokens);
  });

  test("an upstream that dies mid-stream: an error event the SDK raises, after the text so far; billed those tokens", async () => {
    // Tokens apart, so the three reach the gateway before the connection drops.
    await withSimOptions(sim, { failAfterChunks: 3, itlMs: 5 }, async () => {
      const stream = client.messages.stream({ model: vendor.model, system: SYSTEM, messages: MESSAGES, max_tokens: 100 });
      let text = "";
      stream.on("text", (delta) => (text += delta));
      const error = await stream.finalMessage().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(Anthropic.APIError);
      expect((error as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({ type: "error", error: { type: "api_error" } });
      expect(text).toBe(expectedText(AS_CHAT, 3));
      const requestId = (await stream.withResponse()).response.headers.get("request-id")!;
      await expectBilledCoveringLogged({ sim, t }, requestId, vendor, 502);
    });
  });

  test("a client that leaves mid-stream: nothing more is relayed, the upstream is cut and billed what it generated until then, within the allowance", async () => {
    await withSimOptions(sim, { outputTokens: 100, itlMs: 20 }, async () => {
      const stream = client.messages.stream({ model: vendor.model, messages: MESSAGES, max_tokens: 2_000 });
      const requestId = (await stream.withResponse()).response.headers.get("request-id")!;
      let deltas = 0;
      await new Promise<void>((resolve) => {
        stream.on("text", () => {
          if (++deltas === 5) {
            stream.abort();
            resolve();
          }
        });
        stream.on("error", () => resolve());
        stream.on("abort", () => resolve());
      });
      const entry = await expectLeftAndBilled({ sim, t }, requestId, vendor);
      expect(entry.completionTokens).toBeLessThan(100);
    });
  });
});

describe("what Claude Code sends", () => {
  const anthropic = VENDORS.find((v) => v.kind === "anthropic")!;

  test("a dated model id, `?beta=true`, Claude Code's headers and a Bearer key: served and billed as the catalog model", async () => {
    const response = await fetch(`${t.url}/v1/messages?beta=true`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${key}`,
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14",
        "content-type": "application/json",
      },
      body: JSON.stringify({
        model: "claude-3-5-haiku-20241022",
        system: [{ type: "text", text: SYSTEM, cache_control: { type: "ephemeral" } }],
        messages: MESSAGES,
        max_tokens: 100,
        metadata: { user_id: "user_abc" },
      }),
    });
    expect(response.status).toBe(200);
    const data = (await response.json()) as Anthropic.Message;
    expect(data.model).toBe("claude-3-5-haiku-20241022");
    expect(textOf(data.content)).toEqual([expectedText(AS_CHAT)]);
    await expectBilledAsLogged({ sim, t }, response.headers.get("request-id")!, anthropic);
  });

  test("a max_tokens over the model's window: lowered to the room left and answered (chat completions refuses it)", async () => {
    // The model's limit is within the window: an operator's window at that limit leaves the prompt no room for it.
    const entry = ((await t.admin("GET", "/admin/catalog")).body.data as { id: string }[]).find((m) => m.id === anthropic.model)!;
    const { id: _, ...fields } = entry as Record<string, unknown>;
    const outputMax = t.gw.deps.catalog.get(anthropic.model)!.outputMax!;
    const narrowed = await t.admin("PUT", `/admin/catalog/models/${anthropic.model}`, { ...fields, context_window: outputMax });
    expect(narrowed.status).toBe(200);
    try {
      // Streamed, as Claude Code asks (the SDK refuses a whole reply this long).
      const { final, requestId } = await streamed({ model: anthropic.model, system: SYSTEM, messages: MESSAGES, max_tokens: outputMax });
      expect(textOf(final.content)).toEqual([expectedText(AS_CHAT)]);
      await expectBilledAsLogged({ sim, t }, requestId, anthropic);
      const chat = await fetch(`${t.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: anthropic.model, messages: AS_CHAT, max_tokens: outputMax }),
      });
      expect(chat.status).toBe(400);
      expect(((await chat.json()) as { error: { code: string } }).error.code).toBe("context_length_exceeded");
    } finally {
      expect((await t.admin("PUT", `/admin/catalog/models/${anthropic.model}`, fields)).status).toBe(200);
    }
  });

  test("count_tokens: the gateway's own count of the prompt, tools included", async () => {
    const plain = await client.messages.countTokens({ model: "claude-sonnet-4-20250514", system: SYSTEM, messages: MESSAGES });
    expect(plain.input_tokens).toBe(await countPromptTokens(AS_CHAT));
    const withTools = await client.messages.countTokens({
      model: "claude-sonnet-4",
      system: SYSTEM,
      messages: MESSAGES,
      tools: [WEATHER_TOOL],
    });
    expect(withTools.input_tokens).toBeGreaterThan(plain.input_tokens);
  });
});

describe("errors in Anthropic's shape", () => {
  const expectError = async (promise: Promise<unknown>, status: number, type: string) => {
    const error = await promise.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Anthropic.APIError);
    const apiError = error as InstanceType<typeof Anthropic.APIError>;
    expect(apiError.status).toBe(status);
    expect(apiError.error).toMatchObject({ type: "error", error: { type } });
    return apiError;
  };

  test("a max_tokens above the model's output limit: Anthropic's 400 invalid_request_error, nothing sent upstream", async () => {
    const error = await expectError(
      client.messages.create({ model: "claude-3-5-haiku-20241022", messages: MESSAGES, max_tokens: 8_193 }),
      400,
      "invalid_request_error",
    );
    expect(error.error).toEqual({
      type: "error",
      error: {
        type: "invalid_request_error",
        message: "max_tokens: 8193 > 8192, which is the maximum allowed number of output tokens for claude-3-5-haiku",
      },
    });
    expect(sim.log.byRequestId(error.requestID!)).toHaveLength(0);
  });

  test("no max_tokens: a 400 invalid_request_error naming it, nothing sent upstream", async () => {
    const error = await expectError(
      client.messages.create({ model: "gpt-4o-mini", messages: MESSAGES } as unknown as Anthropic.MessageCreateParamsNonStreaming),
      400,
      "invalid_request_error",
    );
    expect(error.message).toContain("max_tokens");
    expect(sim.log.byRequestId(error.requestID!)).toHaveLength(0);
  });

  test("an anthropic-beta not on the gateway's list, or one it refuses: a 400 naming it, nothing sent upstream; Claude Code's pass", async () => {
    for (const beta of ["claude-code-20250219,made-up-beta-2031-01-01", "fast-mode-2026-02-01"]) {
      const name = beta.split(",").at(-1)!;
      const error = await expectError(
        client.messages.create({ model: "claude-3-5-haiku", messages: MESSAGES, max_tokens: 10 }, { headers: { "anthropic-beta": beta } }),
        400,
        "invalid_request_error",
      );
      expect(error.message).toContain(name);
      expect(sim.log.byRequestId(error.requestID!)).toHaveLength(0);
    }
    const claudeCode = "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,effort-2025-11-24";
    const reply = await client.messages.create(
      { model: "claude-3-5-haiku", messages: MESSAGES, max_tokens: 10 },
      { headers: { "anthropic-beta": claudeCode } },
    );
    expect(reply.type).toBe("message");
  });

  test("a body shaped like one of the gateway's failures is a request like any other: a 400 naming what it lacks", async () => {
    for (const path of ["/v1/messages", "/v1/messages/count_tokens"]) {
      const response = await fetch(`${t.url}${path}`, {
        method: "POST",
        headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
        body: JSON.stringify({ code: "not_found", message: "echo me" }),
      });
      const body = (await response.json()) as { error: { type: string; message: string } };
      expect(response.status).toBe(400);
      expect(body.error.type).toBe("invalid_request_error");
      expect(body.error.message).not.toContain("echo me");
    }
  });

  test("a wrong key: 401 authentication_error", async () => {
    const stranger = new Anthropic({ baseURL: t.url, apiKey: "sk-dvz-not-a-key", maxRetries: 0 });
    await expectError(stranger.messages.create({ model: "gpt-4o-mini", messages: MESSAGES, max_tokens: 10 }), 401, "authentication_error");
  });

  test("a wallet that cannot cover the reserve: 402 billing_error, with x-should-retry: false", async () => {
    const poor = new Anthropic({ baseURL: t.url, apiKey: (await t.fundedKey("0.01")).key, maxRetries: 0 });
    const error = await expectError(
      poor.messages.create({ model: "claude-3-5-haiku", messages: MESSAGES, max_tokens: 4_000 }),
      402,
      "billing_error",
    );
    expect(error.headers?.get("x-should-retry")).toBe("false");
  });

  test("an unknown model: 404 not_found_error", async () => {
    await expectError(client.messages.create({ model: "claude-unknown-1", messages: MESSAGES, max_tokens: 10 }), 404, "not_found_error");
  });

  test("a server tool other than web search: a 400 that names it", async () => {
    const error = await expectError(
      client.messages.create({
        model: "gpt-4o-mini",
        messages: MESSAGES,
        max_tokens: 10,
        tools: [{ type: "code_execution_20250522", name: "code_execution" } as never],
      }),
      400,
      "invalid_request_error",
    );
    expect(error.message).toContain("code_execution");
  });
});
