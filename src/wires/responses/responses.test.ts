import { describe, expect, test } from "bun:test";
import { responseProblems, streamEventProblems } from "../../../test/openaiSchema.ts";
import { isFailure } from "../../errors.ts";
import { anthropicToOpenAIResponse } from "../../providers/anthropic/response.ts";
import { AnthropicStreamDecoder } from "../../providers/anthropic/stream.ts";
import { fixture } from "../../../test/decoders.ts";
import { chatCompletionOf } from "../chat.ts";
import { chatFixtureFrames, decodedFixtureFrames, sseEvents } from "../../../test/wireFixtures.ts";
import { responsesToChat } from "./request.ts";
import { chatToResponse, type ResponsesContext } from "./response.ts";
import { ResponsesStream } from "./stream.ts";

const request = (body: Record<string, unknown>) => {
  const out = responsesToChat({ model: "gpt-4o", ...body });
  if (isFailure(out)) throw new Error(out.message);
  return out;
};

describe("responsesToChat", () => {
  test("instructions and a string input: a system and a user message; the budget and effort carried", () => {
    const { chat } = request({
      model: "o3",
      instructions: "Be brief.",
      input: "Hi",
      max_output_tokens: 64,
      reasoning: { effort: "low" },
      temperature: 0.2,
    });
    expect(chat).toEqual({
      model: "o3",
      messages: [
        { role: "system", content: "Be brief." },
        { role: "user", content: "Hi" },
      ],
      max_completion_tokens: 64,
      reasoning_effort: "low",
      temperature: 0.2,
    });
  });

  test("a function call round trip: the calls share one assistant message, each output a tool message", () => {
    const { chat } = request({
      input: [
        {
          role: "user",
          content: [
            { type: "input_text", text: "Weather?" },
            { type: "input_image", image_url: "data:image/png;base64,AAAA", detail: "low" },
          ],
        },
        { type: "reasoning", id: "rs_1", summary: [] },
        { type: "function_call", call_id: "call_1", name: "get_weather", arguments: '{"city":"Tehran"}' },
        { type: "function_call", call_id: "call_2", name: "get_weather", arguments: '{"city":"Tabriz"}' },
        { type: "function_call_output", call_id: "call_1", output: "18" },
        { type: "function_call_output", call_id: "call_2", output: [{ type: "input_text", text: "12" }] },
      ],
      tools: [{ type: "function", name: "get_weather", parameters: { type: "object" }, strict: true }],
      tool_choice: { type: "function", name: "get_weather" },
      stream: true,
    });
    expect(chat.messages).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: "Weather?" },
          { type: "image_url", image_url: { url: "data:image/png;base64,AAAA", detail: "low" } },
        ],
      },
      {
        role: "assistant",
        content: null,
        tool_calls: [
          { id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Tehran"}' } },
          { id: "call_2", type: "function", function: { name: "get_weather", arguments: '{"city":"Tabriz"}' } },
        ],
      },
      { role: "tool", tool_call_id: "call_1", content: "18" },
      { role: "tool", tool_call_id: "call_2", content: "12" },
    ]);
    expect(chat.tools).toEqual([{ type: "function", function: { name: "get_weather", parameters: { type: "object" }, strict: true } }]);
    expect(chat.tool_choice).toEqual({ type: "function", function: { name: "get_weather" } });
    expect(chat.stream_options).toEqual({ include_usage: true });
  });

  test("a reasoning effort for a model without reasoning is dropped, not sent to fail upstream", () => {
    expect(request({ input: "Hi", reasoning: { effort: "high" } }).chat.reasoning_effort).toBeUndefined();
  });

  test("text.format json_schema becomes response_format", () => {
    const { chat } = request({
      input: "Hi",
      text: { format: { type: "json_schema", name: "answer", schema: { type: "object" }, strict: true } },
    });
    expect(chat.response_format).toEqual({
      type: "json_schema",
      json_schema: { name: "answer", schema: { type: "object" }, strict: true },
    });
  });

  test.each([
    [{ store: true }, "store"],
    [{ previous_response_id: "resp_1" }, "previous_response_id"],
    [{ background: true }, "background"],
    [{ input: [{ role: "user", content: [{ type: "input_image", file_id: "file_1" }] }] }, "input.0.content.0"],
    [{ input: [{ type: "item_reference", id: "msg_1" }] }, "input.0.type"],
    [{ max_output_tokens: 0 }, "max_output_tokens"],
  ])("%j is refused, naming %s", (extra, param) => {
    const out = responsesToChat({ model: "gpt-4o", input: "Hi", ...extra });
    expect(isFailure(out) && out.code === "invalid_request" ? out.param : out).toBe(param);
  });
});

const ctx = (stream: boolean, extra: Record<string, unknown> = {}): ResponsesContext => ({
  requestId: "req_1",
  model: "gpt-4o",
  createdAt: 1_732_000_000,
  request: request({ input: "Hi", stream, ...extra }).request,
});

/** Runs frames through the translation; every event checked against the spec, numbered from 0. */
function translate(frames: ReturnType<typeof chatFixtureFrames>, context = ctx(true)) {
  const stream = new ResponsesStream(context, () => 1_732_000_009);
  const events = sseEvents(stream.start() + frames.map((f) => stream.frame(f)).join(""));
  for (const { event, data } of events) {
    expect(event).toBe(data.type as string);
    expect(streamEventProblems(data as { type: string })).toEqual([]);
  }
  expect(events.map((e) => e.data.sequence_number)).toEqual(events.map((_, i) => i));
  return events.map((e) => e.data);
}

describe("every Responses field is translated, known and without price, or refused", () => {
  test("Codex's fields: translated (the cache key, the tier, the verbosity for a model that reasons) or accepted with no effect", () => {
    const { chat } = request({
      model: "o3",
      input: "Hi",
      include: ["reasoning.encrypted_content"],
      client_metadata: { session_id: "s" },
      prompt_cache_key: "k",
      reasoning: { effort: "low", context: "all_turns", summary: "auto" },
      text: { verbosity: "low" },
      service_tier: "priority",
      truncation: "disabled",
    });
    expect(chat).toMatchObject({ prompt_cache_key: "k", verbosity: "low", service_tier: "priority", reasoning_effort: "low" });
    expect(request({ input: "Hi", text: { verbosity: "low" } }).chat.verbosity).toBeUndefined();
  });

  test.each([
    ["an unknown top-level field", { prompt: { id: "p" } }, "prompt"],
    ["an include value with no translation", { include: ["message.output_text.logprobs"] }, "include.0"],
    ["an unknown reasoning field", { reasoning: { effort: "low", budget: 3 } }, "reasoning.budget"],
    ["an unknown text field", { text: { verbosity: "low", style: "x" } }, "text.style"],
    ["truncation auto", { truncation: "auto" }, "truncation"],
    ["a function tool's field", { tools: [{ type: "function", name: "f", parameters: {}, defer: true }] }, "tools.0.defer"],
    ["a message item's field", { input: [{ role: "user", content: "Hi", name: "ali" }] }, "input.0.name"],
    ["a content part's field", { input: [{ role: "user", content: [{ type: "input_text", text: "Hi", x: 1 }] }] }, "input.0.content.0.x"],
    [
      "a function_call item's field",
      {
        input: [
          { type: "function_call", call_id: "c", name: "f", arguments: "{}", x: 1 },
          { role: "user", content: "Hi" },
        ],
      },
      "input.0.x",
    ],
    [
      "an additional_tools item's field",
      {
        input: [
          { type: "additional_tools", tools: [], x: 1 },
          { role: "user", content: "Hi" },
        ],
      },
      "input.0.x",
    ],
  ])("%s: a 400 naming it", (_name, fields, param) => {
    const out = responsesToChat({ model: "gpt-4o", input: "Hi", ...fields });
    if (isFailure(out)) expect(out.message).toContain(param.split(".").at(-1)!);
    expect(isFailure(out) && [out.code, out.param]).toEqual(["invalid_request", param]);
  });
});

describe("ResponsesStream", () => {
  test("a recorded text stream: the text in deltas, then a completed response with the usage", () => {
    const events = translate(chatFixtureFrames("openai", "basic-usage.sse"));
    const text = events
      .filter((e) => e.type === "response.output_text.delta")
      .map((e) => e.delta)
      .join("");
    const done = events.at(-1)!;
    expect(done.type).toBe("response.completed");
    const response = done.response as Record<string, any>;
    expect(responseProblems(response)).toEqual([]);
    expect(response.output[0].content[0].text).toBe(text);
    expect(response.usage.input_tokens).toBeGreaterThan(0);
  });

  test("a recorded tool-call stream: a function_call item whose argument deltas make its arguments", () => {
    const events = translate(chatFixtureFrames("openai", "tool-calls.sse"));
    expect(events.map((e) => e.type)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.completed",
    ]);
    const response = events.at(-1)!.response as Record<string, any>;
    expect(response.output).toEqual([
      {
        type: "function_call",
        id: "fc_call_a1b2",
        call_id: "call_a1b2",
        name: "get_weather",
        arguments: '{"city":"Tehran"}',
        status: "completed",
      },
    ]);
    expect(response.usage).toMatchObject({ input_tokens: 61, output_tokens: 15, total_tokens: 76 });
  });

  test("an Anthropic stream with a web search: a web_search_call item added, searching, completed and done in order, the text one message around it", () => {
    const frames = decodedFixtureFrames(
      "anthropic",
      "web-search.sse",
      new AnthropicStreamDecoder({ requestId: "req_1", model: "claude-sonnet-4", created: 1 }),
    );
    const events = translate(frames);
    const search = events.filter((e) => JSON.stringify(e).includes("ws_srvtoolu_014hJH82Qum7Td6UV8gDXThB"));
    expect(search.map((e) => e.type)).toEqual([
      "response.output_item.added",
      "response.web_search_call.in_progress",
      "response.web_search_call.searching",
      "response.web_search_call.completed",
      "response.output_item.done",
      "response.completed",
    ]);
    expect(search.slice(0, 5).map((e) => e.output_index)).toEqual([1, 1, 1, 1, 1]);
    const response = events.at(-1)!.response as Record<string, any>;
    expect(responseProblems(response)).toEqual([]);
    expect(response.output[1]).toEqual(WEATHER_SEARCH);
    expect(response.output[0].content[0].text).toBe(
      "I'll check the current weather in New York City for you.Today in New York City it is partly cloudy, around 68°F.",
    );
  });

  test("a search that gets no result by the end is done as failed", () => {
    const frames = decodedFixtureFrames(
      "anthropic",
      "web-search.sse",
      new AnthropicStreamDecoder({ requestId: "req_1", model: "claude-sonnet-4", created: 1 }),
    ).filter((f) => !(f.kind === "chunk" && f.chunk.choices[0]?.delta?.anthropic_block?.type === "web_search_tool_result"));
    const events = translate(frames);
    const done = events.find((e) => e.type === "response.output_item.done" && (e.item as { type: string }).type === "web_search_call");
    expect(done!.item).toMatchObject({ status: "failed" });
    expect(events.some((e) => e.type === "response.web_search_call.completed")).toBe(false);
  });

  test("an Anthropic stream cut at max_tokens ends as response.incomplete", () => {
    const frames = decodedFixtureFrames(
      "anthropic",
      "text.sse",
      new AnthropicStreamDecoder({ requestId: "req_1", model: "claude-sonnet-4", created: 1 }),
    );
    const cut = frames.map((f) =>
      f.kind === "chunk" && f.chunk.choices[0]?.finish_reason
        ? { ...f, chunk: { ...f.chunk, choices: [{ ...f.chunk.choices[0], finish_reason: "length" }] } }
        : f,
    );
    const events = translate(cut);
    expect(events.at(-1)).toMatchObject({
      type: "response.incomplete",
      response: { status: "incomplete", incomplete_details: { reason: "max_output_tokens" } },
    });
  });

  test("a failure mid-stream: the text so far, then response.failed", () => {
    const frames = chatFixtureFrames("openai", "basic-usage.sse").slice(0, 2);
    const events = translate([
      ...frames,
      { kind: "error", failure: { code: "upstream_error", message: "The upstream stream broke off." } },
    ]);
    expect(events.at(-1)).toMatchObject({
      type: "response.failed",
      response: { status: "failed", error: { code: "server_error", message: "The upstream stream broke off." } },
    });
    expect((events.at(-1)!.response as any).output[0].status).toBe("incomplete");
  });

  test("a keep-alive passes as an SSE comment", () => {
    expect(new ResponsesStream(ctx(true), () => 0).frame({ kind: "keepAlive" })).toBe(": keep-alive\n\n");
  });
});

/** The fixture's search as OpenAI's Responses API shows one. */
const WEATHER_SEARCH = {
  type: "web_search_call",
  id: "ws_srvtoolu_014hJH82Qum7Td6UV8gDXThB",
  status: "completed",
  action: {
    type: "search",
    query: "weather NYC today",
    sources: [
      { type: "url", url: "https://www.weather.gov/okx/" },
      { type: "url", url: "https://www.accuweather.com/en/us/new-york/10021/weather-today/349727" },
    ],
  },
};

describe("chatToResponse", () => {
  test("a whole Anthropic reply with a web search: a web_search_call item after the message its text began, conforming to the spec", () => {
    const chat = anthropicToOpenAIResponse(fixture("anthropic", "message-web-search.json"), {
      requestId: "req_1",
      model: "claude-sonnet-4",
      created: 1,
    });
    if ("code" in chat) throw new Error(chat.message);
    const response = chatToResponse(chatCompletionOf(chat.json)!, ctx(false), 1_732_000_001) as Record<string, any>;
    expect(responseProblems(response)).toEqual([]);
    expect(response.output.map((item: { type: string }) => item.type)).toEqual(["message", "web_search_call"]);
    expect(response.output[1]).toEqual(WEATHER_SEARCH);
  });

  test("a whole reply with text and a tool call conforms to the spec", () => {
    const reply = chatCompletionOf({
      choices: [
        {
          message: { content: "Checking.", tool_calls: [{ id: "call_1", type: "function", function: { name: "f", arguments: "{}" } }] },
          finish_reason: "tool_calls",
        },
      ],
      usage: { prompt_tokens: 10, completion_tokens: 5, completion_tokens_details: { reasoning_tokens: 2 } },
    })!;
    const response = chatToResponse(reply, ctx(false), 1_732_000_001);
    expect(responseProblems(response)).toEqual([]);
    expect(response).toMatchObject({
      id: "resp_req_1",
      status: "completed",
      completed_at: 1_732_000_001,
      output: [
        { type: "message", content: [{ type: "output_text", text: "Checking." }] },
        { type: "function_call", call_id: "call_1", name: "f", arguments: "{}" },
      ],
      usage: { input_tokens: 10, output_tokens: 5, total_tokens: 15, output_tokens_details: { reasoning_tokens: 2 } },
    });
  });
});
