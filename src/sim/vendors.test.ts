/**
 * The simulator's Anthropic and Gemini wire formats, driven by the vendors' own SDKs: if the
 * SDKs parse every reply, stream and error without complaint, the simulator speaks the formats.
 */
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { ApiError, FunctionCallingConfigMode, GoogleGenAI } from "@google/genai";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { optionsFromArgs } from "./main.ts";
import { startSimulator, type Simulator } from "./server.ts";
import { simCompletion } from "./text.ts";
import { simCountTokens, simPromptTokens } from "./tokens.ts";
import { anthropicCount } from "../providers/anthropic/request.ts";
import { geminiCount } from "../providers/gemini/request.ts";

let sim: Simulator;
const KEY = "sim-test-key";
const weatherSchema = { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } }, required: ["city"] };

beforeAll(async () => {
  sim = await startSimulator({ apiKey: KEY, outputTokens: 6, seed: 3 });
});
afterAll(() => sim.stop());

/** The SDKs' promises run lazily on `then`: resolve to the rejection, or null. */
const failure = (promise: PromiseLike<unknown>) =>
  promise.then(
    () => null,
    (error: unknown) => error,
  );
const lastLog = () => sim.log.entries().at(-1)!;
const expectedText = (promptText: string, tokens = 6) => simCompletion({ seed: 3, promptText, tokens }).join("");

describe("Anthropic Messages via @anthropic-ai/sdk", () => {
  const client = () => new Anthropic({ apiKey: KEY, baseURL: sim.url, maxRetries: 0 });

  test("non-stream: text, stop reason and usage equal to the log", async () => {
    const message = await client().messages.create({
      model: "claude-sim",
      max_tokens: 100,
      system: "Be brief.",
      messages: [{ role: "user", content: "Hello there" }],
    });
    expect(message.type).toBe("message");
    expect(message.content).toEqual([{ type: "text", text: expectedText("Be brief.\nHello there") } as never]);
    expect(message.stop_reason).toBe("end_turn");
    const prompt = simPromptTokens([{ content: "Be brief." }, { content: "Hello there" }]);
    expect(message.usage.input_tokens).toBe(prompt);
    expect(message.usage.output_tokens).toBe(6);
    expect(lastLog()).toMatchObject({ model: "claude-sim", stream: false, promptTokens: prompt, completionTokens: 6, status: 200 });
  });

  test("stream: the SDK assembles the same message; max_tokens cuts it", async () => {
    const stream = client().messages.stream({ model: "claude-sim", max_tokens: 4, messages: [{ role: "user", content: "Hello there" }] });
    const types = new Set<string>();
    stream.on("streamEvent", (event) => types.add(event.type));
    const message = await stream.finalMessage();
    expect([...types]).toEqual([
      "message_start",
      "content_block_start",
      "content_block_delta",
      "content_block_stop",
      "message_delta",
      "message_stop",
    ]);
    expect(message.content[0]).toMatchObject({ type: "text", text: expectedText("Hello there", 4) });
    expect(message.stop_reason).toBe("max_tokens");
    expect(message.usage.output_tokens).toBe(4);
    expect(lastLog()).toMatchObject({ stream: true, completionTokens: 4, finishReason: "length" });
  });

  test("tools: a required tool is called, its arguments streamed in pieces and reassembled", async () => {
    const params = {
      model: "claude-sim",
      max_tokens: 100,
      messages: [{ role: "user" as const, content: "What is the weather?" }],
      tools: [{ name: "get_weather", input_schema: weatherSchema as Anthropic.Tool.InputSchema }],
      tool_choice: { type: "any" as const },
    };
    const whole = await client().messages.create(params);
    expect(whole.stop_reason).toBe("tool_use");
    expect(whole.content).toEqual([
      { type: "tool_use", id: expect.any(String), name: "get_weather", input: { city: "sim", days: 1 } } as never,
    ]);
    const deltas: string[] = [];
    const stream = client().messages.stream(params);
    stream.on("inputJson", (partial) => deltas.push(partial));
    const streamed = await stream.finalMessage();
    expect(deltas.length).toBeGreaterThan(1);
    expect(streamed.content[0]).toMatchObject({ type: "tool_use", name: "get_weather", input: { city: "sim", days: 1 } });
    expect(streamed.usage.output_tokens).toBe(lastLog().completionTokens);
  });

  test("after a tool result the reply is text", async () => {
    const message = await client().messages.create({
      model: "claude-sim",
      max_tokens: 100,
      tools: [{ name: "get_weather", input_schema: weatherSchema as Anthropic.Tool.InputSchema }],
      tool_choice: { type: "any" },
      messages: [
        { role: "user", content: "get_weather please" },
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "sim" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "18C" }] },
      ],
    });
    expect(message.content[0]?.type).toBe("text");
  });

  test("errors are Anthropic's: wrong key 401, injected 429 and 500", async () => {
    const wrong = new Anthropic({ apiKey: "wrong", baseURL: sim.url, maxRetries: 0 });
    const params = { model: "claude-sim", max_tokens: 10, messages: [{ role: "user" as const, content: "x" }] };
    expect(await failure(wrong.messages.create(params))).toBeInstanceOf(Anthropic.AuthenticationError);
    sim.options.rateLimitRate = 1;
    try {
      expect(await failure(client().messages.create(params))).toBeInstanceOf(Anthropic.RateLimitError);
    } finally {
      sim.options.rateLimitRate = 0;
    }
    sim.options.failRate = 1;
    try {
      expect(await failure(client().messages.create(params))).toBeInstanceOf(Anthropic.InternalServerError);
    } finally {
      sim.options.failRate = 0;
    }
  });

  test("a stream dropped mid-way fails in the SDK and is logged as an error", async () => {
    sim.options.failAfterChunks = 2;
    try {
      const stream = client().messages.stream({ model: "claude-sim", max_tokens: 100, messages: [{ role: "user", content: "drop" }] });
      expect(await failure(stream.finalMessage())).toBeInstanceOf(Error);
      await stream.done().catch(() => {});
    } finally {
      sim.options.failAfterChunks = null;
    }
    expect(lastLog()).toMatchObject({ finishReason: "error", completionTokens: 2 });
  });
});

describe("Gemini generateContent via @google/genai", () => {
  const client = (apiVersion = "v1beta") => new GoogleGenAI({ apiKey: KEY, httpOptions: { baseUrl: sim.url, apiVersion } });

  test("non-stream: text, finish reason and usage equal to the log, on v1beta and v1", async () => {
    for (const version of ["v1beta", "v1"]) {
      const reply = await client(version).models.generateContent({
        model: "gemini-sim",
        contents: "Hello there",
        config: { systemInstruction: "Be brief." },
      });
      expect(reply.text).toBe(expectedText("Be brief.\nHello there"));
      expect(reply.candidates?.[0]?.finishReason).toBe("STOP" as never);
      const prompt = simPromptTokens([{ content: "Be brief." }, { content: "Hello there" }]);
      expect(reply.usageMetadata).toMatchObject({ promptTokenCount: prompt, candidatesTokenCount: 6, totalTokenCount: prompt + 6 });
      expect(lastLog()).toMatchObject({ model: "gemini-sim", stream: false, promptTokens: prompt, completionTokens: 6 });
    }
  });

  test("stream: the chunks join to the same text, the last has the finish reason and the total usage", async () => {
    const chunks = [];
    for await (const chunk of await client().models.generateContentStream({
      model: "gemini-sim",
      contents: "Hello there",
      config: { maxOutputTokens: 3 },
    })) {
      chunks.push(chunk);
    }
    expect(chunks.map((c) => c.text ?? "").join("")).toBe(expectedText("Hello there", 3));
    expect(chunks.at(-1)?.candidates?.[0]?.finishReason).toBe("MAX_TOKENS" as never);
    expect(chunks.at(-1)?.usageMetadata?.candidatesTokenCount).toBe(3);
    expect(lastLog()).toMatchObject({ stream: true, completionTokens: 3, finishReason: "length" });
  });

  test("thinking tokens are reported as thoughtsTokenCount and logged as served", async () => {
    sim.options.thoughtTokens = 11;
    try {
      const reply = await client().models.generateContent({ model: "gemini-sim", contents: "Think" });
      expect(reply.usageMetadata?.thoughtsTokenCount).toBe(11);
      expect(lastLog().completionTokens).toBe(6 + 11);
    } finally {
      sim.options.thoughtTokens = 0;
    }
  });

  test("tools: a function call, whole and streamed", async () => {
    const config = {
      tools: [{ functionDeclarations: [{ name: "get_weather", parametersJsonSchema: weatherSchema }] }],
      toolConfig: { functionCallingConfig: { mode: FunctionCallingConfigMode.ANY } },
    };
    const reply = await client().models.generateContent({ model: "gemini-sim", contents: "Weather?", config });
    expect(reply.functionCalls).toEqual([{ name: "get_weather", args: { city: "sim", days: 1 } }]);
    const calls = [];
    for await (const chunk of await client().models.generateContentStream({ model: "gemini-sim", contents: "Weather?", config })) {
      calls.push(...(chunk.functionCalls ?? []));
    }
    expect(calls).toEqual([{ name: "get_weather", args: { city: "sim", days: 1 } }]);
  });

  test("a tool named in the last user message is called without a tool choice", async () => {
    const reply = await client().models.generateContent({
      model: "gemini-sim",
      contents: "please use get_weather",
      config: { tools: [{ functionDeclarations: [{ name: "get_weather", parametersJsonSchema: weatherSchema }] }] },
    });
    expect(reply.functionCalls?.[0]?.name).toBe("get_weather");
  });

  test("errors are Google's: wrong key, injected 429", async () => {
    const wrong = new GoogleGenAI({ apiKey: "wrong", httpOptions: { baseUrl: sim.url, apiVersion: "v1beta" } });
    const refused = await wrong.models.generateContent({ model: "gemini-sim", contents: "x" }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ApiError);
    expect((refused as ApiError).status).toBe(400);
    sim.options.rateLimitRate = 1;
    try {
      const limited = await client()
        .models.generateContent({ model: "gemini-sim", contents: "x" })
        .catch((e: unknown) => e);
      expect((limited as ApiError).status).toBe(429);
    } finally {
      sim.options.rateLimitRate = 0;
    }
  });
});

test("a flavored simulator serves only its own wire format", async () => {
  const only = await startSimulator({ flavor: "anthropic" });
  try {
    const openai = await fetch(`${only.url}/v1/chat/completions`, { method: "POST", body: "{}" });
    expect(openai.status).toBe(404);
    const gemini = await fetch(`${only.url}/v1beta/models/g:generateContent`, { method: "POST", body: "{}" });
    expect(gemini.status).toBe(404);
    const anthropic = await fetch(`${only.url}/v1/messages`, {
      method: "POST",
      body: JSON.stringify({ model: "c", max_tokens: 5, messages: [{ role: "user", content: "hi" }] }),
    });
    expect(anthropic.status).toBe(200);
  } finally {
    await only.stop();
  }
});

test("--flavor and --thought-tokens parse; a bad flavor is refused by name", () => {
  expect(optionsFromArgs(["--flavor", "gemini", "--thought-tokens", "12"])).toMatchObject({ flavor: "gemini", thoughtTokens: 12 });
  expect(optionsFromArgs([]).flavor).toBe("all");
  expect(() => optionsFromArgs(["--flavor", "mistral"])).toThrow("--flavor");
});

test("vendor requests count in the vLLM-style /metrics like OpenAI ones", async () => {
  const anthropic = new Anthropic({ apiKey: KEY, baseURL: sim.url, maxRetries: 0 });
  await anthropic.messages.create({ model: "metrics-claude", max_tokens: 10, messages: [{ role: "user", content: "Hello there" }] });
  const gemini = new GoogleGenAI({ apiKey: KEY, httpOptions: { baseUrl: sim.url, apiVersion: "v1beta" } });
  await gemini.models.generateContent({ model: "metrics-gemini", contents: "Hello there" });
  const metrics = await (await fetch(`${sim.url}/metrics`)).text();
  const prompt = simPromptTokens([{ content: "Hello there" }]);
  for (const model of ["metrics-claude", "metrics-gemini"]) {
    expect(metrics).toContain(`vllm:request_success_total{model_name="${model}"} 1`);
    expect(metrics).toContain(`vllm:prompt_tokens_total{model_name="${model}"} ${prompt}`);
    expect(metrics).toContain(`vllm:generation_tokens_total{model_name="${model}"} 6`);
  }
});

describe("OpenAI chat via openai: the same tool-call rule", () => {
  const client = () => new OpenAI({ apiKey: KEY, baseURL: `${sim.url}/v1`, maxRetries: 0 });
  const tools = [{ type: "function" as const, function: { name: "get_weather", parameters: weatherSchema } }];

  test("a required tool is called, whole and streamed, with usage equal to the log", async () => {
    const whole = await client().chat.completions.create({
      model: "gpt-sim",
      messages: [{ role: "user", content: "Weather?" }],
      tools,
      tool_choice: "required",
    });
    const choice = whole.choices[0]!;
    expect(choice.finish_reason).toBe("tool_calls");
    expect(choice.message.content).toBeNull();
    const call = choice.message.tool_calls![0] as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
    expect(call.function.name).toBe("get_weather");
    expect(JSON.parse(call.function.arguments)).toEqual({ city: "sim", days: 1 });
    expect(whole.usage?.completion_tokens).toBe(lastLog().completionTokens);

    const stream = await client().chat.completions.create({
      model: "gpt-sim",
      messages: [{ role: "user", content: "Weather?" }],
      tools,
      tool_choice: { type: "function", function: { name: "get_weather" } },
      stream: true,
      stream_options: { include_usage: true },
    });
    let args = "";
    let pieces = 0;
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        finish = c.finish_reason ?? finish;
        for (const d of c.delta.tool_calls ?? []) {
          args += d.function?.arguments ?? "";
          if (d.function?.arguments) pieces++;
        }
      }
      usage = chunk.usage ?? usage;
    }
    expect(pieces).toBeGreaterThan(1);
    expect(JSON.parse(args)).toEqual({ city: "sim", days: 1 });
    expect(finish).toBe("tool_calls");
    expect(usage?.completion_tokens).toBe(lastLog().completionTokens);
  });

  test("after a tool result, or without tools, the reply is text", async () => {
    const reply = await client().chat.completions.create({
      model: "gpt-sim",
      tools,
      tool_choice: "required",
      messages: [
        { role: "user", content: "Weather?" },
        {
          role: "assistant",
          content: null,
          tool_calls: [{ id: "c1", type: "function", function: { name: "get_weather", arguments: "{}" } }],
        },
        { role: "tool", tool_call_id: "c1", content: "18C" },
      ],
    });
    expect(reply.choices[0]!.finish_reason).toBe("stop");
    expect(reply.choices[0]!.message.content!.length).toBeGreaterThan(0);
  });
});

describe("the vendors' free count endpoints, through the gateway's adapters", () => {
  const text = "Hello, world! naïve café";
  const logged = () => sim.log.entries().length;

  test("Anthropic's count_tokens: the text as one message by the prompt rule, nothing logged (a count is free)", async () => {
    const before = logged();
    const count = anthropicCount(KEY);
    const request = count.buildCountRequest(text, "claude-sim");
    const response = await fetch(sim.url + request.path, { method: "POST", headers: request.headers, body: request.body });
    expect(count.parseCountResponse(await response.text())).toBe(simPromptTokens([{ content: text }]));
    expect(logged()).toBe(before);
    // The SDK's own count call reads the same reply.
    const sdk = await new Anthropic({ apiKey: KEY, baseURL: sim.url, maxRetries: 0 }).messages.countTokens({
      model: "claude-sim",
      messages: [{ role: "user", content: text }],
    });
    expect(sdk.input_tokens).toBe(simPromptTokens([{ content: text }]));
  });

  test("Gemini's countTokens: the parts' text as it counts what it generates", async () => {
    const count = geminiCount(KEY);
    const request = count.buildCountRequest(text, "gemini-sim");
    const response = await fetch(sim.url + request.path, { method: "POST", headers: request.headers, body: request.body });
    expect(count.parseCountResponse(await response.text())).toBe(simCountTokens(text));
    const sdk = await new GoogleGenAI({ apiKey: KEY, httpOptions: { baseUrl: sim.url } }).models.countTokens({
      model: "gemini-sim",
      contents: text,
    });
    expect(sdk.totalTokens).toBe(simCountTokens(text));
  });

  test("a count refused (a wrong key) or unreadable is null: the caller falls back", async () => {
    const request = anthropicCount("wrong").buildCountRequest(text, "claude-sim");
    const response = await fetch(sim.url + request.path, { method: "POST", headers: request.headers, body: request.body });
    expect(response.status).toBe(401);
    expect(anthropicCount(KEY).parseCountResponse("{}")).toBeNull();
    expect(geminiCount(KEY).parseCountResponse("not json")).toBeNull();
  });
});
