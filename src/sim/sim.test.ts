import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import OpenAI, { APIError, AuthenticationError, RateLimitError } from "openai";
import { SimLog, type SimLogEntry } from "./log.ts";
import { optionsFromArgs } from "./main.ts";
import { SimOptionsSchema, startSimulator, type Simulator } from "./server.ts";
import { simCompletion, simVocabulary } from "./text.ts";
import { untilValue } from "../../test/until.ts";
import { anthropicSimMessages, parseAnthropicRequest, simAnthropicExtraTokens } from "./anthropic.ts";
import { geminiSimMessages, parseGeminiRequest, simGeminiExtraTokens } from "./gemini.ts";
import { SIM_IMAGE_TOKENS, simChatPromptTokens, simCountTokens, simPromptTokens, simValueTokens } from "./tokens.ts";

// Counted by hand with the rule in tokens.ts:
//   "You are terse." → You | are | terse | .   = 4
//   "Hello, world!"  → Hello | , | world | !   = 4
//   prompt = (3 + 4) + (3 + 4) + 3             = 17
const messages = [
  { role: "system" as const, content: "You are terse." },
  { role: "user" as const, content: "Hello, world!" },
];
const messagesPromptTokens = 17;
/** How late the simulator may log a request its client left. */
const LOGGED_MS_MAX = 2_000;

describe("simCountTokens / simPromptTokens", () => {
  test("counts word runs and single symbols, never whitespace", () => {
    expect(simCountTokens("Hello, world!")).toBe(4);
    expect(simCountTokens("naïve café 123_abc — ok?")).toBe(6); // naïve café 123_abc — ok ?
    expect(simCountTokens("a+b=c")).toBe(5);
    expect(simCountTokens("日本語")).toBe(1);
    expect(simCountTokens("👍👍")).toBe(2);
    expect(simCountTokens(" \n\t ")).toBe(0);
    expect(simCountTokens("")).toBe(0);
  });

  test("prompt = Σ(3 + message tokens) + 3, content parts concatenated", () => {
    expect(simPromptTokens(messages)).toBe(messagesPromptTokens);
    expect(simPromptTokens([{ role: "user", content: "Hello, world!" }])).toBe(10);
    const parts = [{ type: "text", text: "foo" }, { type: "image_url" }, { type: "text", text: "bar!" }];
    // "foobar!" = 2, and the image its fixed price
    expect(simPromptTokens([{ role: "user", content: parts }])).toBe(8 + SIM_IMAGE_TOKENS);
    expect(simPromptTokens([{ role: "assistant", content: null }])).toBe(6);
  });

  test("everything else the model reads costs its tokens: names, tool calls, part data, tools, schemas", () => {
    expect(simPromptTokens([{ role: "user", content: "hi", name: "ali" }])).toBe(3 + 1 + 1 + 3);
    // {"a":"b"} → { " a " : " b " } = 9
    expect(simValueTokens({ a: "b" })).toBe(9);
    expect(simPromptTokens([{ role: "user", content: [{ type: "text", text: "", data: { a: "b" } }] }])).toBe(3 + 9 + 3);
    const tools = [{ type: "function", function: { name: "f" } }];
    expect(
      simChatPromptTokens({ model: "m", messages: [{ role: "user", content: "Hello, world!" }], tools, max_tokens: 5, temperature: 1 }),
    ).toBe(10 + 25);
    const schema = { type: "json_schema", json_schema: { name: "x", schema: { type: "object" } } };
    expect(simChatPromptTokens({ model: "m", messages: [{ role: "user", content: "" }], response_format: schema })).toBe(
      6 + simValueTokens(schema),
    );
    expect(
      simChatPromptTokens({ model: "m", messages: [{ role: "user", content: "" }], function_call: "auto", functions: [{ name: "g" }] }),
    ).toBe(6 + 1 + 11);
  });
});

describe("the vendor flavours bill the same way", () => {
  test("Anthropic: tools, tool calls and images beyond the text", () => {
    const tools = [{ name: "f", input_schema: { type: "object" } }];
    const body = parseAnthropicRequest({
      model: "c",
      max_tokens: 5,
      temperature: 1,
      tools,
      messages: [
        {
          role: "user",
          content: [
            { type: "text", text: "Hello, world!" },
            { type: "image", source: { type: "url", url: "u" } },
          ],
        },
        { role: "assistant", content: [{ type: "tool_use", id: "t", name: "f", input: {} }] },
      ],
    });
    if (typeof body === "string") throw new Error(body);
    const image = SIM_IMAGE_TOKENS + simValueTokens({ type: "url", url: "u" });
    const call = simCountTokens("t") + simCountTokens("f") + simValueTokens({});
    expect(simAnthropicExtraTokens(body)).toBe(simValueTokens(tools) + image + call);
    expect(simPromptTokens(anthropicSimMessages(body))).toBe(3 + (3 + 4) + 3);
  });

  test("Gemini: declarations, function calls and responses, inline data beyond the text", () => {
    const tools = [{ functionDeclarations: [{ name: "f", parametersJsonSchema: { type: "object" } }] }];
    const body = parseGeminiRequest({
      tools,
      generationConfig: { maxOutputTokens: 5, responseJsonSchema: { type: "string" } },
      contents: [
        { role: "user", parts: [{ text: "Hello, world!" }, { inlineData: { mimeType: "image/png", data: "AAAA" } }] },
        { role: "model", parts: [{ functionCall: { name: "f", args: {} } }] },
        { role: "user", parts: [{ functionResponse: { name: "f", response: { content: "sunny" } } }] },
      ],
    });
    if (typeof body === "string") throw new Error(body);
    const image = SIM_IMAGE_TOKENS + simValueTokens({ mimeType: "image/png", data: "AAAA" });
    const call = simValueTokens({ name: "f", args: {} });
    const response = simValueTokens({ name: "f", response: {} }); // its content is text
    expect(simGeminiExtraTokens(body)).toBe(simValueTokens(tools) + simValueTokens({ type: "string" }) + image + call + response);
    expect(simPromptTokens(geminiSimMessages(body))).toBe(3 + (3 + 4) + 3 + (3 + 1));
  });
});

describe("simCompletion", () => {
  test("is deterministic, one token per delta, and cut replies are prefixes", () => {
    const full = simCompletion({ seed: 1, promptText: "Hi", tokens: 16 });
    expect(simCompletion({ seed: 1, promptText: "Hi", tokens: 16 })).toEqual(full);
    expect(simCompletion({ seed: 1, promptText: "Hi", tokens: 5 })).toEqual(full.slice(0, 5));
    expect(simCompletion({ seed: 2, promptText: "Hi", tokens: 16 })).not.toEqual(full);
    expect(full[0]?.startsWith(" ")).toBe(false);
    for (const [i, delta] of full.entries()) {
      expect(simCountTokens(delta)).toBe(1);
      expect(delta).toBe(i === 0 ? delta.trim() : ` ${delta.trim()}`);
    }
    expect(simCountTokens(full.join(""))).toBe(16);
  });

  test("vocabulary words are single plain tokens", () => {
    for (const word of simVocabulary) expect(word).toMatch(/^[a-z]+$/);
    expect(new Set(simVocabulary).size).toBe(simVocabulary.length);
  });
});

describe("SimLog", () => {
  test("keeps the newest entries, totals still count evicted ones", () => {
    const log = new SimLog(3);
    for (let i = 0; i < 5; i++) {
      const seq = log.begin();
      log.record(entry({ seq, requestId: i % 2 === 0 ? "even" : "odd", completionTokens: 1 }));
    }
    expect(log.entries().map((e) => e.seq)).toEqual([3, 4, 5]);
    expect(log.byRequestId("even").map((e) => e.seq)).toEqual([3, 5]);
    expect(log.byRequestId("odd").map((e) => e.seq)).toEqual([4]);
    expect(log.totals).toEqual({ requests: 5, promptTokens: 50, completionTokens: 5 });
    expect(log.inFlight).toBe(0);
    log.clear();
    expect(log.entries()).toEqual([]);
    expect(log.byRequestId("even")).toEqual([]);
    expect(log.totals.requests).toBe(0);
  });
});

describe("main.ts flags", () => {
  test("parses flags and rejects bad ones", () => {
    const options = optionsFromArgs(["--ttft-ms", "30", "--itl-ms", "5", "--omit-usage", "--fail-after-chunks", "2"]);
    expect(options).toMatchObject({ ttftMs: 30, itlMs: 5, omitUsage: true, failAfterChunks: 2, seed: 1 });
    expect(() => optionsFromArgs(["--bogus"])).toThrow();
    expect(() => optionsFromArgs(["--fail-rate", "2"])).toThrow("--fail-rate");
    expect(() => optionsFromArgs(["--itl-ms", "abc"])).toThrow("not a number");
  });
});

describe("simulator over HTTP", () => {
  let sim: Simulator;
  let client: OpenAI;

  beforeAll(async () => {
    sim = await startSimulator({ port: 0 });
    client = new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: "x", maxRetries: 0 });
  });
  afterAll(() => sim.stop());
  beforeEach(() => {
    Object.assign(sim.options, SimOptionsSchema.parse({}));
    sim.log.clear();
  });

  test("non-stream usage matches the hand count", async () => {
    const reply = await client.chat.completions.create({ model: "m1", messages });
    const content = reply.choices[0]?.message.content ?? "";
    expect(reply.id).toMatch(/^chatcmpl-sim-\d+$/);
    expect(reply.object).toBe("chat.completion");
    expect(reply.choices[0]?.finish_reason).toBe("stop");
    expect(simCountTokens(content)).toBe(16);
    expect(content).toBe(simCompletion({ seed: 1, promptText: "You are terse.\nHello, world!", tokens: 16 }).join(""));
    expect(reply.usage).toEqual({ prompt_tokens: 17, completion_tokens: 16, total_tokens: 33 });
    expect(sim.log.totals).toEqual({ requests: 1, promptTokens: 17, completionTokens: 16 });
  });

  test("max_tokens cuts the reply with finish_reason length", async () => {
    const reply = await client.chat.completions.create({ model: "m1", messages, max_tokens: 5 });
    expect(reply.choices[0]?.finish_reason).toBe("length");
    expect(simCountTokens(reply.choices[0]?.message.content ?? "")).toBe(5);
    expect(reply.usage?.completion_tokens).toBe(5);
    const atLimit = await client.chat.completions.create({ model: "m1", messages, max_completion_tokens: 16 });
    expect(atLimit.choices[0]?.finish_reason).toBe("stop");
  });

  test("omitUsage drops usage from non-stream replies", async () => {
    sim.options.omitUsage = true;
    const reply = await client.chat.completions.create({ model: "m1", messages });
    expect(reply.usage).toBeUndefined();
    expect(sim.log.entries()[0]?.promptTokens).toBe(messagesPromptTokens);
  });

  test("stream equals non-stream and ends with a usage chunk", async () => {
    const reply = await client.chat.completions.create({ model: "m1", messages });
    const stream = await client.chat.completions.create({
      model: "m1",
      messages,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? "").join("");
    expect(text).toBe(reply.choices[0]?.message.content ?? "");
    expect(chunks[0]?.choices[0]?.delta).toEqual({ role: "assistant", content: "" });
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe("stop");
    const last = chunks.at(-1);
    expect(last?.choices).toEqual([]);
    expect(last?.usage).toEqual({ prompt_tokens: 17, completion_tokens: 16, total_tokens: 33 });
    for (const chunk of chunks.slice(0, -1)) expect(chunk.usage).toBeNull();
    expect(chunks.length).toBe(1 + 16 + 1 + 1);
  });

  test("paced stream sends the same frames as the instant one", async () => {
    const body = { model: "m1", messages, stream: true, stream_options: { include_usage: true } };
    const instant = await postText(sim, body);
    sim.options.ttftMs = 5;
    sim.options.itlMs = 1;
    const paced = await postText(sim, body);
    expect(withoutIds(paced)).toBe(withoutIds(instant));
    expect(paced.endsWith("data: [DONE]\n\n")).toBe(true);
  });

  test("continuous_usage_stats puts usage so far on every chunk", async () => {
    const text = await postText(sim, {
      model: "m1",
      messages,
      stream: true,
      max_tokens: 2,
      stream_options: { continuous_usage_stats: true },
    });
    const usages = dataFrames(text).map((frame) => frame.usage);
    expect(usages.map((u) => u?.completion_tokens)).toEqual([0, 1, 2, 2]);
    expect(usages.every((u) => u?.prompt_tokens === messagesPromptTokens)).toBe(true);
  });

  test("stream without include_usage has no usage field", async () => {
    const text = await postText(sim, { model: "m1", messages, stream: true });
    for (const frame of dataFrames(text)) expect("usage" in frame).toBe(false);
  });

  test("failAfterChunks makes the SDK stream throw mid-way", async () => {
    sim.options.failAfterChunks = 3;
    const stream = await client.chat.completions.create({ model: "m1", messages, stream: true });
    const seen: string[] = [];
    const consume = async () => {
      for await (const chunk of stream) seen.push(chunk.choices[0]?.delta.content ?? "");
    };
    const error = await consume().then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(Error);
    expect(seen.filter((content) => content !== "").length).toBe(3);
    const [logged] = sim.log.entries();
    expect(logged).toMatchObject({ finishReason: "error", completionTokens: 3, status: 200, aborted: false });
  });

  test("failRate 1 answers 500", async () => {
    sim.options.failRate = 1;
    const error = await client.chat.completions.create({ model: "m1", messages }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(APIError);
    expect((error as APIError).status).toBe(500);
    expect(sim.log.entries()[0]).toMatchObject({ status: 500, finishReason: "error", promptTokens: 0 });
  });

  test("rateLimitRate 1 answers 429 with retry-after", async () => {
    sim.options.rateLimitRate = 1;
    const error = await client.chat.completions.create({ model: "m1", messages }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RateLimitError);
    expect((error as RateLimitError).headers?.get("retry-after")).toBe("1");
  });

  test("failRate 0.5 is a seeded, repeatable pattern", async () => {
    const pattern = async () => {
      const restarted = await startSimulator({ failRate: 0.5, seed: 7 });
      const statuses = [];
      for (let i = 0; i < 8; i++) statuses.push((await post(restarted, { model: "m", messages })).status);
      await restarted.stop();
      return statuses;
    };
    const first = await pattern();
    expect(await pattern()).toEqual(first);
    expect(first).toContain(200);
    expect(first).toContain(500);
  });

  test("client abort stops generation and is logged", async () => {
    sim.options.itlMs = 20;
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      { model: "m1", messages, stream: true },
      { signal: controller.signal, headers: { "x-request-id": "abort-1" } },
    );
    let contentChunks = 0;
    try {
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta.content) contentChunks++;
        if (contentChunks === 3) controller.abort();
      }
    } catch {
      // the SDK reports the abort as an error; that is the point
    }
    const logged = await untilValue(() => sim.log.byRequestId("abort-1")[0], { msMax: LOGGED_MS_MAX }); // the simulator logs aborts asynchronously
    expect(logged).toMatchObject({ aborted: true, finishReason: "aborted", stream: true });
    expect(logged.completionTokens).toBeGreaterThanOrEqual(3);
    expect(logged.completionTokens).toBeLessThanOrEqual(5);
    expect(sim.log.inFlight).toBe(0);
  });

  test("stallAfterChunks goes silent until the client gives up", async () => {
    sim.options.stallAfterChunks = 2;
    const controller = new AbortController();
    const res = await post(sim, { model: "m1", messages, stream: true }, { "x-request-id": "stall-1" }, controller);
    const reader = res.body?.getReader();
    if (!reader) throw new Error("no body");
    let text = "";
    const readMore = async () => {
      const { value } = await reader.read();
      text += new TextDecoder().decode(value);
    };
    while (dataFrames(text).length < 3) await readMore();
    // A negative check: no frame within 100 ms (this simulator sends the next one at once, itlMs 0).
    const silent = await Promise.race([readMore().then(() => false), Bun.sleep(100).then(() => true)]);
    expect(silent).toBe(true);
    expect(sim.log.inFlight).toBe(1);
    controller.abort();
    const logged = await untilValue(() => sim.log.byRequestId("stall-1")[0], { msMax: LOGGED_MS_MAX });
    expect(logged).toMatchObject({ finishReason: "stalled", aborted: true, completionTokens: 2 });
  });

  test("ttft delays a non-stream reply; inFlightMax sees concurrency", async () => {
    sim.options.ttftMs = 50;
    const startedAt = performance.now();
    await Promise.all([1, 2, 3, 4, 5].map(() => client.chat.completions.create({ model: "m1", messages })));
    expect(performance.now() - startedAt).toBeGreaterThanOrEqual(45);
    expect(sim.log.inFlightMax).toBe(5);
    expect(sim.log.inFlight).toBe(0);
  });

  test("invalid bodies get OpenAI 400 errors", async () => {
    const missing = await post(sim, { model: "m1" });
    expect(missing.status).toBe(400);
    const body = (await missing.json()) as { error: Record<string, unknown> };
    expect(body.error).toMatchObject({ type: "invalid_request_error", param: "messages", code: null });
    const n = await post(sim, { model: "m1", messages, n: 129 });
    expect(((await n.json()) as { error: { param: string } }).error.param).toBe("n");
    const broken = await fetch(`${sim.url}/v1/chat/completions`, { method: "POST", body: "{" });
    expect(broken.status).toBe(400);
  });

  test("n choices: each generated in full, streamed in turn by index, all billed", async () => {
    sim.options.outputTokens = 4;
    const whole = await post(sim, { model: "m1", messages, n: 3 });
    const reply = (await whole.json()) as {
      choices: { index: number; message: { content: string } }[];
      usage: { completion_tokens: number };
    };
    expect(reply.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    expect(new Set(reply.choices.map((c) => c.message.content)).size).toBe(1);
    expect(reply.usage.completion_tokens).toBe(12);
    const streamed = await post(sim, { model: "m1", messages, n: 2, max_tokens: 3, stream: true, stream_options: { include_usage: true } });
    const chunks = (await streamed.text())
      .split("\n\n")
      .filter((f) => f.startsWith("data: {"))
      .map(
        (f) =>
          JSON.parse(f.slice(6)) as { choices: { index: number; delta: { content?: string } }[]; usage?: { completion_tokens: number } },
      );
    const contents = chunks.flatMap((c) => c.choices.filter((x) => x.delta.content).map((x) => x.index));
    expect(contents).toEqual([0, 1, 0, 1, 0, 1]);
    expect(chunks.at(-1)!.usage!.completion_tokens).toBe(6);
    expect(sim.log.entries().at(-1)!.completionTokens).toBe(6);
  });

  test("apiKey is enforced with an OpenAI 401", async () => {
    sim.options.apiKey = "secret";
    const error = await client.chat.completions.create({ model: "m1", messages }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AuthenticationError);
    const keyed = new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: "secret", maxRetries: 0 });
    expect((await keyed.chat.completions.create({ model: "m1", messages })).object).toBe("chat.completion");
  });

  test("/metrics, /v1/models and /sim/log", async () => {
    await client.chat.completions.create({ model: "metrics-model", messages }, { headers: { "x-request-id": "r-42" } });
    const metrics = await (await fetch(`${sim.url}/metrics`)).text();
    expect(metrics).toContain('vllm:request_success_total{model_name="metrics-model"} 1');
    expect(metrics).toContain(`vllm:prompt_tokens_total{model_name="metrics-model"} ${messagesPromptTokens}`);
    expect(metrics).toContain('vllm:generation_tokens_total{model_name="metrics-model"} 16');
    for (const name of ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"]) {
      expect(metrics).toContain(`# TYPE ${name} gauge`);
    }
    const ids = (await client.models.list()).data.map((m) => m.id);
    expect(ids).toContain("sim-model");
    expect(ids).toContain("metrics-model");
    const [logged] = sim.log.byRequestId("r-42");
    expect(logged).toMatchObject({ model: "metrics-model", promptTokens: 17, completionTokens: 16, status: 200 });
    const served = (await (await fetch(`${sim.url}/sim/log`)).json()) as SimLogEntry[];
    expect(served.map((e) => e.requestId)).toEqual(["r-42"]);
  });

  test("stop() closes a stalled stream and logs it", async () => {
    const own = await startSimulator({ stallAfterChunks: 1 });
    const res = await post(own, { model: "m", messages, stream: true }, { "x-request-id": "s" });
    await res.body?.getReader().read();
    await own.stop();
    expect(own.log.byRequestId("s")[0]).toMatchObject({ finishReason: "stalled", aborted: false });
    expect(own.log.inFlight).toBe(0);
  });
});

function entry(fields: Partial<SimLogEntry> & { seq: number }): SimLogEntry {
  return {
    requestId: null,
    model: "m",
    stream: false,
    promptTokens: 10,
    completionTokens: 0,
    finishReason: "stop",
    status: 200,
    aborted: false,
    startedAt: 0,
    endedAt: 0,
    ...fields,
  };
}

function post(sim: Simulator, body: unknown, headers: Record<string, string> = {}, controller?: AbortController): Promise<Response> {
  return fetch(`${sim.url}/v1/chat/completions`, {
    method: "POST",
    body: JSON.stringify(body),
    headers: { "content-type": "application/json", ...headers },
    signal: controller?.signal,
  });
}

async function postText(sim: Simulator, body: unknown): Promise<string> {
  return (await post(sim, body)).text();
}

type Frame = { usage?: { prompt_tokens: number; completion_tokens: number } | null };

/** Parses every `data:` frame except [DONE]. */
function dataFrames(text: string): Frame[] {
  return text
    .split("\n\n")
    .filter((block) => block.startsWith("data: ") && block !== "data: [DONE]")
    .map((block) => JSON.parse(block.slice("data: ".length)) as Frame);
}

function withoutIds(text: string): string {
  return text.replace(/chatcmpl-sim-\d+/g, "ID").replace(/"created":\d+/g, '"created":0');
}
