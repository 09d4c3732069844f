import { describe, expect, test } from "bun:test";
import { isFailure } from "../../errors.ts";
import { anthropicToOpenAIResponse } from "../../providers/anthropic/response.ts";
import { AnthropicStreamDecoder } from "../../providers/anthropic/stream.ts";
import { chatCompletionOf } from "../chat.ts";
import { decodeAll, fixture } from "../../../test/decoders.ts";
import { chatFixtureFrames, decodedFixtureFrames, sseEvents } from "../../../test/wireFixtures.ts";
import { anthropicErrorType, failureToAnthropicError } from "./errors.ts";
import { messagesToChat } from "./request.ts";
import { chatToMessage } from "./response.ts";
import { MessagesStream } from "./stream.ts";

const translated = (body: Record<string, unknown>) => {
  const out = messagesToChat({ model: "claude-sonnet-4", max_tokens: 256, ...body });
  if (isFailure(out)) throw new Error(out.message);
  return out.chat;
};

describe("messagesToChat", () => {
  test("system blocks, a tool_use turn and its tool_result before the user's text, images as data URLs", () => {
    const chat = translated({
      system: [
        { type: "text", text: "You are Claude Code.", cache_control: { type: "ephemeral" } },
        { type: "text", text: "Be brief." },
      ],
      messages: [
        {
          role: "user",
          content: [
            { type: "text", text: "Weather?" },
            { type: "image", source: { type: "base64", media_type: "image/png", data: "AAAA" } },
          ],
        },
        {
          role: "assistant",
          content: [
            { type: "thinking", thinking: "…", signature: "sig" },
            { type: "text", text: "Checking." },
            { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Tehran" } },
          ],
        },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "text", text: "18" }] },
            { type: "text", text: "And tomorrow?" },
          ],
        },
      ],
      stop_sequences: ["END"],
      tools: [{ name: "get_weather", description: "Weather", input_schema: { type: "object" } }],
      tool_choice: { type: "any", disable_parallel_tool_use: true },
      thinking: { type: "enabled", budget_tokens: 8_000 },
      metadata: { user_id: "u1" },
      stream: true,
    });
    expect(chat).toEqual({
      model: "claude-sonnet-4",
      max_tokens: 256,
      messages: [
        {
          role: "system",
          content: [
            { type: "text", text: "You are Claude Code.", cache_control: { type: "ephemeral" } },
            { type: "text", text: "Be brief." },
          ],
        },
        {
          role: "user",
          content: [
            { type: "text", text: "Weather?" },
            { type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } },
          ],
        },
        {
          role: "assistant",
          content: "Checking.",
          tool_calls: [{ id: "toolu_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Tehran"}' } }],
        },
        { role: "tool", tool_call_id: "toolu_1", content: "18" },
        { role: "user", content: [{ type: "text", text: "And tomorrow?" }] },
      ],
      tools: [{ type: "function", function: { name: "get_weather", description: "Weather", parameters: { type: "object" } } }],
      tool_choice: "required",
      parallel_tool_calls: false,
      stop: ["END"],
      reasoning_effort: "medium",
      anthropic: { thinking: { type: "enabled", budget_tokens: 8_000 } },
      user: "u1",
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  test("a tool result's image follows the tool message, in the turn's user message", () => {
    const image = { type: "image", source: { type: "url", url: "https://x/shot.png" } };
    const chat = translated({
      messages: [
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "screenshot", input: {} }] },
        {
          role: "user",
          content: [{ type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "text", text: "taken" }, image], is_error: false }],
        },
      ],
    });
    expect((chat.messages as unknown[]).slice(1)).toEqual([
      { role: "tool", tool_call_id: "toolu_1", content: "taken" },
      { role: "user", content: [{ type: "image_url", image_url: { url: "https://x/shot.png" } }] },
    ]);
  });

  test.each([
    [{ tool_choice: { type: "tool", name: "f" } }, { type: "function", function: { name: "f" } }],
    [{ tool_choice: { type: "none" } }, "none"],
    [{ tool_choice: { type: "auto" } }, "auto"],
  ])("tool_choice %j", (extra, expected) => {
    expect(
      translated({ messages: [{ role: "user", content: "Hi" }], tools: [{ name: "f", input_schema: { type: "object" } }], ...extra })
        .tool_choice,
    ).toEqual(expected);
  });

  test.each([
    [{ max_tokens: undefined }, "max_tokens"],
    [{ tools: [{ type: "code_execution_20250522", name: "code_execution" }] }, "tools.0"],
    [{ messages: [{ role: "user", content: [{ type: "document", source: {} }] }] }, "messages.0.content.0.type"],
    [{ messages: [] }, "messages"],
  ])("%j is refused, naming %s", (extra, param) => {
    const out = messagesToChat({ model: "claude-sonnet-4", max_tokens: 256, messages: [{ role: "user", content: "Hi" }], ...extra });
    expect(isFailure(out) ? out.param : out).toBe(param);
  });
});

describe("every Messages field is translated, known and without price, or refused", () => {
  const user = (content: unknown) => [{ role: "user", content }];
  test.each([
    ["a top-level field", { service_tier: "auto" }, "service_tier"],
    ["a top-level server feature", { mcp_servers: [{ type: "url", url: "https://x.io", name: "x" }] }, "mcp_servers"],
    ["a message field", { messages: [{ role: "user", content: "Hi", name: "ali" }] }, "messages.0.name"],
    ["a text block's field", { messages: user([{ type: "text", text: "Hi", extra: 1 }]) }, "messages.0.content.0.extra"],
    [
      "a tool_result's field",
      { messages: user([{ type: "tool_result", tool_use_id: "t", content: "ok", x: 1 }]) },
      "messages.0.content.0.x",
    ],
    ["a system block's field", { system: [{ type: "text", text: "Be brief.", extra: 1 }], messages: user("Hi") }, "system.0.extra"],
    [
      "a client tool's field",
      { messages: user("Hi"), tools: [{ name: "get", input_schema: { type: "object" }, input_examples: [{}] }] },
      "tools.0.input_examples",
    ],
    [
      "image source's field",
      { messages: user([{ type: "image", source: { type: "url", url: "https://x.io/a.png", file: "f" } }]) },
      "messages.0.content.0.source.file",
    ],
    ["metadata beyond user_id", { messages: user("Hi"), metadata: { user_id: "u", tag: "t" } }, "metadata.tag"],
  ])("an unknown %s: a 400 naming it", (_name, fields, param) => {
    const out = messagesToChat({ model: "claude-sonnet-4", max_tokens: 256, messages: user("Hi"), ...fields });
    expect(isFailure(out) && [out.code, out.param]).toEqual(["invalid_request", param]);
  });

  test("what Claude Code sends beside them is accepted: a turn's effort, deferred tools, top_k, citations", () => {
    const chat = translated({
      top_k: 5,
      messages: [{ role: "user", content: [{ type: "text", text: "Hi", citations: [] }], output_config: { effort: "low" } }],
      tools: [{ name: "get", input_schema: { type: "object" }, defer_loading: true, strict: true }],
    });
    expect(chat.messages).toEqual([{ role: "user", content: [{ type: "text", text: "Hi" }] }]);
    expect((chat.tools as { function: { name: string } }[])[0]!.function.name).toBe("get");
  });
});

describe("the web search tool", () => {
  const base = { model: "claude-sonnet-4", max_tokens: 256, messages: [{ role: "user", content: "News?" }] };
  const search = { type: "web_search_20250305", name: "web_search", max_uses: 3, allowed_domains: ["example.com"] };

  test("becomes `anthropic.web_search` as sent, beside the client's own tools; a choice naming it leaves the model free", () => {
    const weather = { name: "weather", input_schema: { type: "object" } };
    const out = messagesToChat({ ...base, tools: [weather, search], tool_choice: { type: "tool", name: "web_search" } });
    if (isFailure(out)) throw new Error(out.message);
    expect(out.chat.anthropic).toEqual({ web_search: search });
    expect((out.chat.tools as unknown[]).length).toBe(1);
    expect(out.chat.tool_choice).toBeUndefined();
  });

  test("alone, it sends no function tools; with thinking, both extras are kept", () => {
    const out = messagesToChat({ ...base, tools: [search], thinking: { type: "enabled", budget_tokens: 1024 } });
    if (isFailure(out)) throw new Error(out.message);
    expect(out.chat.tools).toBeUndefined();
    expect(out.chat.anthropic).toEqual({ web_search: search, thinking: { type: "enabled", budget_tokens: 1024 } });
  });
});

const ctx = { requestId: "req_1", model: "claude-sonnet-4-20250514" };

function translate(frames: ReturnType<typeof chatFixtureFrames>, inputTokensAtStart: number | null = null, hostedCallsBilled = 0) {
  const stream = new MessagesStream(ctx);
  const events = sseEvents(stream.start() + frames.map((f) => stream.frame(f, { inputTokensAtStart, hostedCallsBilled })).join(""));
  for (const { event, data } of events) expect(event).toBe(data.type as string);
  return events.map((e) => e.data);
}

const types = (events: Record<string, unknown>[]) => events.map((e) => e.type).filter((t) => t !== "ping");

describe("MessagesStream", () => {
  test.each(["text.sse", "tool-use.sse", "thinking.sse"])("Anthropic's %s → chat → Anthropic: the same events and content", (name) => {
    const decoder = new AnthropicStreamDecoder({ requestId: "req_1", model: "claude-sonnet-4", created: 1 });
    const atStart = decodeAll(
      new AnthropicStreamDecoder({ requestId: "req_1", model: "claude-sonnet-4", created: 1 }),
      fixture("anthropic", name),
      64,
    );
    const events = translate(decodedFixtureFrames("anthropic", name, decoder), atStart.inputTokensAtStart ?? null);
    const original = sseEvents(fixture("anthropic", name)).map((e) => e.data);
    // The deltas of one block may come split differently; the blocks, their order and content may not.
    const blocks = (list: Record<string, any>[]) => {
      const out: string[] = [];
      for (const e of list) {
        if (e.type === "content_block_start") out.push(`${e.content_block.type}:`);
        if (e.type === "content_block_delta") out[out.length - 1] += e.delta.text ?? e.delta.thinking ?? e.delta.partial_json ?? "";
      }
      return out;
    };
    expect(blocks(events)).toEqual(blocks(original));
    expect(types(events).at(0)).toBe("message_start");
    // The backend's own input count, at the start, where LangChain and others read it: the same as at the end.
    const startInput = (events[0] as Record<string, any>).message.usage.input_tokens;
    expect(startInput).toBeGreaterThan(0);
    expect(startInput).toBe((events.at(-2) as Record<string, any>).usage.input_tokens);
    expect(types(events).slice(-2)).toEqual(["message_delta", "message_stop"]);
    const delta = events.at(-2) as Record<string, any>;
    const originalDelta = original.findLast((e) => e.type === "message_delta") as Record<string, any>;
    expect(delta.delta.stop_reason).toBe(originalDelta.delta.stop_reason);
    expect(delta.usage.output_tokens).toBe(originalDelta.usage.output_tokens);
  });

  test("Anthropic's web search stream → chat → Anthropic: its server_tool_use and web_search_tool_result blocks as sent, in order, indices right; usage tells the searches billed", () => {
    const decoder = new AnthropicStreamDecoder({ requestId: "req_1", model: "claude-sonnet-4", created: 1 });
    const events = translate(decodedFixtureFrames("anthropic", "web-search.sse", decoder), null, 1) as Record<string, any>[];
    const original = sseEvents(fixture("anthropic", "web-search.sse")).map((e) => e.data) as Record<string, any>[];
    const starts = (list: Record<string, any>[]) => list.filter((e) => e.type === "content_block_start");
    // Every block as the vendor started it, at the vendor's index.
    expect(starts(events)).toEqual(starts(original));
    // Each block's events in order: start, its deltas, stop, on its own index.
    const byIndex = (list: Record<string, any>[]) =>
      list.filter((e) => e.type.startsWith("content_block_")).map((e) => `${e.index}:${e.type.slice("content_block_".length)}`);
    expect(byIndex(events).filter((e) => !e.endsWith("delta"))).toEqual(byIndex(original).filter((e) => !e.endsWith("delta")));
    for (const e of events.filter((e) => e.type === "content_block_delta")) {
      const open = events.findLast((s) => s.type === "content_block_start" && events.indexOf(s) < events.indexOf(e));
      expect(e.index).toBe(open!.index);
    }
    // The call's input, streamed whole.
    const input = (list: Record<string, any>[]) =>
      JSON.parse(
        list
          .filter((e) => e.type === "content_block_delta" && e.index === 1)
          .map((e) => e.delta.partial_json)
          .join(""),
      );
    expect(input(events)).toEqual({ query: "weather NYC today" });
    expect(input(events)).toEqual(input(original));
    const text = (list: Record<string, any>[]) =>
      list.filter((e) => e.delta?.type === "text_delta").map((e) => `${e.index}:${e.delta.text}`);
    expect(text(events)).toEqual(text(original));
    expect(events.at(-2)!.usage).toEqual({ input_tokens: 10_682, output_tokens: 510, server_tool_use: { web_search_requests: 1 } });
  });

  test("no search billed: message_delta's usage has no server_tool_use", () => {
    const decoder = new AnthropicStreamDecoder({ requestId: "req_1", model: "claude-sonnet-4", created: 1 });
    const events = translate(decodedFixtureFrames("anthropic", "text.sse", decoder), null, 0) as Record<string, any>[];
    expect(events.at(-2)!.usage.server_tool_use).toBeUndefined();
  });

  test("a recorded OpenAI tool-call stream: one tool_use block with its input in pieces, stop_reason tool_use, the usage", () => {
    const events = translate(chatFixtureFrames("openai", "tool-calls.sse"));
    expect(types(events)).toEqual([
      "message_start",
      "content_block_start",
      "content_block_delta",
      "content_block_delta",
      "content_block_stop",
      "message_delta",
      "message_stop",
    ]);
    expect(events[2]).toMatchObject({ content_block: { type: "tool_use", id: "call_a1b2", name: "get_weather", input: {} } });
    expect(events.at(-2)).toEqual({
      type: "message_delta",
      delta: { stop_reason: "tool_use", stop_sequence: null },
      usage: { input_tokens: 61, output_tokens: 15 },
    });
  });

  test("a failure mid-stream: an error event in Anthropic's shape; a keep-alive is a ping once the message started", () => {
    const stream = new MessagesStream(ctx);
    expect(stream.frame({ kind: "keepAlive" })).toBe(": keep-alive\n\n");
    const chunk = { choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] };
    expect(sseEvents(stream.frame({ kind: "chunk", chunk })).map((e) => e.event)).toEqual(["message_start", "ping"]);
    expect(stream.frame({ kind: "keepAlive" })).toBe('event: ping\ndata: {"type":"ping"}\n\n');
    const [error] = sseEvents(stream.frame({ kind: "error", failure: { code: "upstream_timeout", message: "The upstream stalled." } }));
    expect(error).toEqual({ event: "error", data: { type: "error", error: { type: "timeout_error", message: "The upstream stalled." } } });
  });
});

describe("chatToMessage and errors", () => {
  test("a whole reply: thinking, text and tool_use blocks, stop reason and usage", () => {
    const reply = chatCompletionOf({
      choices: [
        {
          message: {
            content: "Checking.",
            reasoning_content: "Hmm.",
            tool_calls: [{ id: "call_1", type: "function", function: { name: "f", arguments: '{"a":1}' } }],
          },
          finish_reason: "tool_calls",
        },
      ],
      usage: { prompt_tokens: 10, completion_tokens: 5 },
    })!;
    expect(chatToMessage(reply, ctx)).toEqual({
      id: "msg_req_1",
      type: "message",
      role: "assistant",
      model: "claude-sonnet-4-20250514",
      content: [
        { type: "thinking", thinking: "Hmm.", signature: "" },
        { type: "text", text: "Checking." },
        { type: "tool_use", id: "call_1", name: "f", input: { a: 1 } },
      ],
      stop_reason: "tool_use",
      stop_sequence: null,
      usage: { input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
    });
  });

  test("a whole reply in which Anthropic searched: the vendor's content as sent (its search blocks, the text's citations), the searches billed in usage", () => {
    const vendor = JSON.parse(fixture("anthropic", "message-web-search.json"));
    const chat = anthropicToOpenAIResponse(fixture("anthropic", "message-web-search.json"), {
      requestId: "req_1",
      model: "claude-sonnet-4",
      created: 1,
    });
    if ("code" in chat) throw new Error(chat.message);
    const message = chatToMessage(chatCompletionOf(chat.json)!, ctx, 1);
    expect(message.content).toEqual(vendor.content);
    expect(message.usage).toEqual({
      input_tokens: 10_682,
      output_tokens: 510,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      server_tool_use: { web_search_requests: 1 },
    });
  });

  test.each([
    ["invalid_request", 400, "invalid_request_error"],
    ["invalid_api_key", 401, "authentication_error"],
    ["insufficient_quota", 402, "billing_error"],
    ["model_forbidden", 403, "permission_error"],
    ["model_not_found", 404, "not_found_error"],
    ["request_too_large", 413, "request_too_large"],
    ["rate_limit_exceeded", 429, "rate_limit_error"],
    ["upstream_error", 502, "api_error"],
    ["no_healthy_backend", 503, "overloaded_error"],
    ["upstream_timeout", 504, "timeout_error"],
  ] as const)("%s: %d %s", (code, status, type) => {
    expect(anthropicErrorType(code)).toBe(type);
    expect(failureToAnthropicError({ code, message: "m", param: "max_tokens" })).toEqual({
      status,
      body: { type: "error", error: { type, message: "max_tokens: m" } },
    });
  });
});
