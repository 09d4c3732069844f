import { describe, expect, test } from "bun:test";
import { chunksOf, decodeAll, fixture } from "../../../test/decoders.ts";
import { anthropicAdapter } from "./index.ts";
import { JSON_OBJECT_INSTRUCTION, openAIToAnthropicRequest } from "./request.ts";
import { anthropicStopToFinishReason, anthropicUsageToUsage } from "./response.ts";
import { AnthropicStreamDecoder } from "./stream.ts";

const context = { requestId: "req1", model: "claude-test", created: 1732000000 };
const adapter = anthropicAdapter("sk-ant-test");

describe("request", () => {
  const build = (body: Record<string, unknown>, stream = false) =>
    adapter.chat!.buildChatRequest({ body, upstreamModel: "claude-sonnet-4-5", maxTokens: 300, stream })!;

  test("system messages become `system`, the budget `max_tokens`, and auth the Anthropic headers", () => {
    const request = build(
      {
        model: "ours",
        messages: [
          { role: "system", content: "Be brief." },
          { role: "developer", content: [{ type: "text", text: "Answer in Persian." }] },
          { role: "user", content: "Hi" },
        ],
        temperature: 1.5,
        stop: "END",
        max_tokens: 9999,
      },
      true,
    );
    expect(request.path).toBe("/v1/messages");
    expect(request.headers["x-api-key"]).toBe("sk-ant-test");
    expect(request.headers["anthropic-version"]).toBe("2023-06-01");
    expect(request.headers.authorization).toBeUndefined();
    const body = JSON.parse(request.body);
    expect(body).toEqual({
      model: "claude-sonnet-4-5",
      max_tokens: 300,
      system: "Be brief.\n\nAnswer in Persian.",
      messages: [{ role: "user", content: [{ type: "text", text: "Hi" }] }],
      stream: true,
      temperature: 1,
      stop_sequences: ["END"],
    });
  });

  test("multi-turn with tool calls, tool results and images", () => {
    const body = JSON.parse(
      build({
        model: "ours",
        messages: [
          {
            role: "user",
            content: [
              { type: "text", text: "Weather here?" },
              { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } },
            ],
          },
          {
            role: "assistant",
            content: null,
            tool_calls: [{ id: "toolu_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Tehran"}' } }],
          },
          { role: "tool", tool_call_id: "toolu_1", content: "18C" },
          { role: "user", content: [{ type: "image_url", image_url: { url: "https://example.com/a.jpg" } }] },
        ],
        tools: [
          {
            type: "function",
            function: {
              name: "get_weather",
              description: "Weather",
              parameters: { type: "object", properties: { city: { type: "string" } } },
            },
          },
        ],
        tool_choice: "required",
        parallel_tool_calls: false,
      }).body,
    );
    expect(body.messages).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: "Weather here?" },
          { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } },
        ],
      },
      { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Tehran" } }] },
      {
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: "toolu_1", content: "18C" },
          { type: "image", source: { type: "url", url: "https://example.com/a.jpg" } },
        ],
      },
    ]);
    expect(body.tools).toEqual([
      { name: "get_weather", description: "Weather", input_schema: { type: "object", properties: { city: { type: "string" } } } },
    ]);
    expect(body.tool_choice).toEqual({ type: "any", disable_parallel_tool_use: true });
  });

  test("a field the adapter cannot translate is dropped alone", () => {
    const body = JSON.parse(
      build({ model: "m", messages: [{ role: "user", content: "x" }], tools: [{ type: "custom", custom: {} }], temperature: 0.5 }).body,
    );
    expect(body.tools).toBeUndefined();
    expect(body.temperature).toBe(0.5);
    expect(body.messages).toEqual([{ role: "user", content: [{ type: "text", text: "x" }] }]);
  });

  test("a named tool choice and `none`", () => {
    const tools = [{ type: "function", function: { name: "f" } }];
    const named = JSON.parse(
      build({ model: "m", messages: [{ role: "user", content: "x" }], tools, tool_choice: { type: "function", function: { name: "f" } } })
        .body,
    );
    expect(named.tool_choice).toEqual({ type: "tool", name: "f" });
    const none = JSON.parse(build({ model: "m", messages: [{ role: "user", content: "x" }], tools, tool_choice: "none" }).body);
    expect(none.tools).toBeUndefined();
  });

  test("response_format json_schema becomes structured output; json_object an instruction after the system text", () => {
    const schema = { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false };
    const messages = [
      { role: "system", content: "Be brief." },
      { role: "user", content: "x" },
    ];
    const structured = JSON.parse(
      build({ model: "m", messages, response_format: { type: "json_schema", json_schema: { name: "place", schema, strict: true } } }).body,
    );
    expect(structured.output_config).toEqual({ format: { type: "json_schema", schema } });
    expect(structured.system).toBe("Be brief.");
    const object = JSON.parse(build({ model: "m", messages, response_format: { type: "json_object" } }).body);
    expect(object.output_config).toBeUndefined();
    expect(object.system).toBe(`Be brief.\n\n${JSON_OBJECT_INSTRUCTION}`);
    const alone = JSON.parse(
      build({ model: "m", messages: [{ role: "user", content: "x" }], response_format: { type: "json_object" } }).body,
    );
    expect(alone.system).toBe(JSON_OBJECT_INSTRUCTION);
    const text = JSON.parse(build({ model: "m", messages, response_format: { type: "text" } }).body);
    expect([text.system, text.output_config]).toEqual(["Be brief.", undefined]);
  });
});

describe("response", () => {
  test("a message without usage (a proxy that drops it) is read, its usage null: billed as unreported", () => {
    const message = JSON.parse(fixture("anthropic", "message-tool-use.json"));
    delete message.usage;
    const reply = adapter.chat!.parseChatResponse(JSON.stringify(message), context);
    if ("code" in reply) throw new Error(reply.message);
    expect(reply.usage).toBeNull();
    expect(JSON.parse(reply.body).usage).toBeUndefined();
  });

  test("a message in which the vendor searched keeps its content beside the chat shape, and its searches in usage", () => {
    const reply = adapter.chat!.parseChatResponse(fixture("anthropic", "message-web-search.json"), context);
    if ("code" in reply) throw new Error(reply.message);
    expect(reply.usage).toMatchObject({ hosted_call: 1 });
    const message = JSON.parse(reply.body).choices[0].message;
    expect(message.anthropic_content).toEqual(JSON.parse(fixture("anthropic", "message-web-search.json")).content);
    expect(message.content).toBe(
      "I'll check the current weather in New York City for you.Today in New York City it is partly cloudy, around 68°F.",
    );
  });

  test("a tool-use message becomes an OpenAI completion with tool calls and usage", () => {
    const reply = adapter.chat!.parseChatResponse(fixture("anthropic", "message-tool-use.json"), context);
    if ("code" in reply) throw new Error(reply.message);
    expect(reply.usage).toEqual({ input: 384, output: 58 });
    const body = JSON.parse(reply.body);
    expect(body).toMatchObject({ id: "chatcmpl-req1", object: "chat.completion", created: 1732000000, model: "claude-test" });
    expect(body.choices[0].finish_reason).toBe("tool_calls");
    expect(body.choices[0].message.content).toBe("I will look that up.");
    expect(body.choices[0].message.tool_calls).toEqual([
      {
        id: "toolu_01A09q90qw90lq917835lq9",
        type: "function",
        function: { name: "get_weather", arguments: '{"city":"Tehran","unit":"celsius"}' },
      },
    ]);
    expect(body.usage).toEqual({ prompt_tokens: 384, completion_tokens: 58, total_tokens: 442 });
  });

  test("a reply that is not a message is an upstream error", () => {
    expect(adapter.chat!.parseChatResponse('{"choices":[]}', context)).toMatchObject({ code: "upstream_error" });
    expect(adapter.chat!.parseChatResponse("<html>", context)).toMatchObject({ code: "upstream_error" });
  });

  test("stop reasons", () => {
    expect(anthropicStopToFinishReason("end_turn")).toBe("stop");
    expect(anthropicStopToFinishReason("stop_sequence")).toBe("stop");
    expect(anthropicStopToFinishReason("max_tokens")).toBe("length");
    expect(anthropicStopToFinishReason("tool_use")).toBe("tool_calls");
    expect(anthropicStopToFinishReason("refusal")).toBe("content_filter");
    expect(anthropicStopToFinishReason(null)).toBeNull();
  });
});

describe("errors", () => {
  test("529 overloaded is worth another backend; a too-long prompt is the client's", () => {
    expect(adapter.errorToFailure(529, fixture("anthropic", "error-overloaded.json"))).toMatchObject({
      code: "upstream_error",
      retryable: true,
    });
    const tooLong = adapter.errorToFailure(400, fixture("anthropic", "error-prompt-too-long.json"));
    expect(tooLong).toMatchObject({ code: "context_length_exceeded", retryable: false });
    expect(tooLong.message).toContain("prompt is too long");
  });
});

describe.each([1, 13, 100_000])("stream decoder, fed %i characters at a time", (size) => {
  const decode = (name: string) => decodeAll(new AnthropicStreamDecoder(context), fixture("anthropic", name), size);

  test("text: OpenAI chunks, a finish chunk, a usage-only chunk, then done", () => {
    const out = decode("text.sse");
    expect(out.done).toBe(true);
    const chunks = chunksOf(out);
    for (const chunk of chunks)
      expect(chunk).toMatchObject({ id: "chatcmpl-req1", object: "chat.completion.chunk", created: 1732000000, model: "claude-test" });
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? null).join("")).toBe("Hello! How can I help?");
    expect(chunks[0]!.choices[0]!.delta).toEqual({ role: "assistant", content: "" });
    expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe("stop");
    expect(chunks.at(-1)!.choices).toEqual([]);
    expect(chunks.at(-1)!.usage).toEqual({ prompt_tokens: 25, completion_tokens: 12, total_tokens: 37 });
    expect(out.frames.map((f) => f.usageOnly)).toEqual([false, false, false, false, true]);
    expect(out.frames.map((f) => f.text).join("")).toBe("Hello! How can I help?");
    expect(out.usage).toEqual({ input: 25, output: 12 });
  });

  test("tool use: a tool call opens with id and name, its arguments stream in pieces", () => {
    const out = decode("tool-use.sse");
    const calls = chunksOf(out).flatMap(
      (c) => (c.choices[0]?.delta.tool_calls as { index: number; id?: string; function: { name?: string; arguments: string } }[]) ?? [],
    );
    expect(calls[0]).toEqual({
      index: 0,
      id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
      type: "function",
      function: { name: "get_weather", arguments: "" },
    } as never);
    expect(calls.every((c) => c.index === 0)).toBe(true);
    expect(calls.map((c) => c.function.arguments).join("")).toBe('{"city": "Tehran"}');
    expect(chunksOf(out).at(-2)!.choices[0]!.finish_reason).toBe("tool_calls");
    expect(out.usage).toEqual({ input: 472, output: 89 });
  });

  test("thinking and cumulative usage: the last output_tokens wins, cache reads are part of the prompt, reported apart", () => {
    const out = decode("thinking.sse");
    const chunks = chunksOf(out);
    expect(chunks.map((c) => c.choices[0]?.delta.reasoning_content ?? "").join("")).toBe("27 * 453 = 12231");
    expect(chunks.filter((c) => c.choices[0]?.finish_reason === "length").length).toBeGreaterThan(0);
    expect(out.usage).toEqual({ input: 52, output: 31, cache_read: 12 });
    expect(out.done).toBe(true);
  });

  test("an error event becomes a failure after the frames before it", () => {
    const out = decode("error-midstream.sse");
    expect(out.frames.map((f) => f.text).join("")).toBe("Once upon");
    expect(out.error?.code).toBe("upstream_error");
    expect(out.error?.message).toContain("overloaded_error: Overloaded");
    expect(out.done).toBe(false);
  });

  test("a stream cut mid-way is not done, and its usage so far is known", () => {
    const out = decode("broken-midstream.sse");
    expect(out.done).toBe(false);
    expect(out.error).toBeUndefined();
    expect(out.frames.map((f) => f.text).join("")).toBe("Once upon a");
  });
});

test("a malformed event is a failure, not a crash", () => {
  expect(new AnthropicStreamDecoder(context).push("event: x\ndata: {nope\n\n").error?.code).toBe("upstream_error");
});

describe("reasoning_effort as extended thinking", () => {
  const build = (effort: string | undefined, maxTokens: number) =>
    JSON.parse(
      openAIToAnthropicRequest(
        {
          body: { messages: [{ role: "user", content: "Hi" }], reasoning_effort: effort, temperature: 0.3 },
          upstreamModel: "claude-sonnet-4-5",
          maxTokens,
          stream: false,
        },
        "k",
      ).body,
    );

  test("an effort becomes a thinking budget below max_tokens, and the temperature gives way", () => {
    expect(build("medium", 8_192)).toMatchObject({ thinking: { type: "enabled", budget_tokens: 4_096 }, max_tokens: 8_192 });
    expect(build("high", 8_192).thinking).toEqual({ type: "enabled", budget_tokens: 8_191 });
    expect(build("high", 8_192).temperature).toBeUndefined();
  });

  test("no effort, or no room for the least budget: no thinking, the temperature kept", () => {
    expect(build(undefined, 8_192)).toMatchObject({ temperature: 0.3 });
    expect(build(undefined, 8_192).thinking).toBeUndefined();
    expect(build("low", 1_024).thinking).toBeUndefined();
  });
});

test("1-hour cache writes are read apart from 5-minute ones, never more than the writes", () => {
  const usage = { input_tokens: 20, cache_creation_input_tokens: 1000, cache_read_input_tokens: 3000, output_tokens: 7 };
  expect(anthropicUsageToUsage({ ...usage, cache_creation: { ephemeral_5m_input_tokens: 400, ephemeral_1h_input_tokens: 600 } })).toEqual({
    input: 4020,
    output: 7,
    cache_read: 3000,
    cache_write: 1000,
    cache_write_1h: 600,
  });
  // A reply claiming more 1-hour writes than writes is held to the writes.
  expect(anthropicUsageToUsage({ ...usage, cache_creation: { ephemeral_1h_input_tokens: 5000 } }).cache_write_1h).toBe(1000);
});

describe("web search", () => {
  const search = { type: "web_search_20250305", name: "web_search", max_uses: 2, allowed_domains: ["example.com"] };
  const build = (extra: Record<string, unknown>) =>
    JSON.parse(
      adapter.chat!.buildChatRequest({
        body: { model: "ours", messages: [{ role: "user", content: "News?" }], anthropic: { web_search: search }, ...extra },
        upstreamModel: "claude-sonnet-4-5",
        maxTokens: 300,
        stream: false,
      })!.body,
    ) as { tools?: unknown[] };

  test("the tool is sent as given, after the function tools; `tool_choice: none` sends neither", () => {
    const weather = { type: "function", function: { name: "weather", parameters: { type: "object" } } };
    expect(build({}).tools).toEqual([search]);
    expect(build({ tools: [weather] }).tools).toEqual([{ name: "weather", input_schema: { type: "object" } }, search]);
    expect(build({ tools: [weather], tool_choice: "none" }).tools).toBeUndefined();
  });

  test("the searches a reply reports are its hosted calls, whole or streamed", () => {
    expect(anthropicUsageToUsage({ input_tokens: 900, output_tokens: 7, server_tool_use: { web_search_requests: 2 } })).toEqual({
      input: 900,
      output: 7,
      hosted_call: 2,
    });
    expect(anthropicUsageToUsage({ input_tokens: 9, output_tokens: 7 }).hosted_call).toBeUndefined();
    const decoder = new AnthropicStreamDecoder({ requestId: "r", model: "m", created: 1 });
    const events = [
      { type: "message_start", message: { usage: { input_tokens: 900, output_tokens: 1 } } },
      {
        type: "message_delta",
        delta: { stop_reason: "end_turn" },
        usage: { output_tokens: 7, server_tool_use: { web_search_requests: 2 } },
      },
      { type: "message_stop" },
    ];
    const piece = decoder.push(events.map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`).join(""));
    expect(piece.usage).toEqual({ input: 900, output: 7, hosted_call: 2 });
  });
});
