/** The Gemini wire's pure translations: request → chat, chat reply → Gemini, relay frames → Gemini's stream. */
import { describe, expect, test } from "bun:test";
import { fail, isFailure } from "../../errors.ts";
import { REASONING_MODELS } from "../../catalog/reasoning.ts";
import type { ChatFrame } from "../chat.ts";
import { failureToGoogleError } from "./errors.ts";
import { generateContentToChat } from "./request.ts";
import { schemaToJsonSchema } from "./schema.ts";
import { chatToGemini, usageToGemini } from "./response.ts";
import { GeminiStream } from "./stream.ts";

const ctx = { requestId: "req_1", model: "gemini-2.5-flash" };
const user = (text: string) => ({ role: "user", parts: [{ text }] });

describe("generateContentToChat", () => {
  test("system instruction, text and an inline image; limits and sampling as chat's fields", () => {
    const out = generateContentToChat(
      {
        systemInstruction: { parts: [{ text: "Be brief." }] },
        contents: [{ role: "user", parts: [{ text: "What is this?" }, { inlineData: { mimeType: "image/png", data: "AAAA" } }] }],
        generationConfig: { maxOutputTokens: 64, temperature: 0.5, topP: 0.9, topK: 40, stopSequences: ["END"], seed: 3 },
      },
      "gpt-4o-mini",
      true,
    );
    if (isFailure(out)) throw new Error(out.message);
    const { messages, ...rest } = out.chat;
    const image = { type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } };
    expect(messages).toEqual([
      { role: "system", content: "Be brief." },
      { role: "user", content: [{ type: "text", text: "What is this?" }, image] },
    ]);
    expect(rest).toEqual({
      model: "gpt-4o-mini",
      max_tokens: 64,
      temperature: 0.5,
      top_p: 0.9,
      stop: ["END"],
      seed: 3,
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  test("a function-call round trip: calls get ids, a response without one answers the earliest open call of its name", () => {
    const out = generateContentToChat(
      {
        contents: [
          user("Weather?"),
          { role: "model", parts: [{ functionCall: { name: "get_weather", args: { city: "Tehran" } } }] },
          { role: "user", parts: [{ functionResponse: { name: "get_weather", response: { output: "18 degrees" } } }] },
        ],
        tools: [
          { functionDeclarations: [{ name: "get_weather", parameters: { type: "OBJECT", properties: { city: { type: "STRING" } } } }] },
        ],
        toolConfig: { functionCallingConfig: { mode: "ANY", allowedFunctionNames: ["get_weather"] } },
      },
      "gpt-4o-mini",
      false,
    );
    if (isFailure(out)) throw new Error(out.message);
    expect(out.chat.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "Weather?" }] },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "call_0", type: "function", function: { name: "get_weather", arguments: '{"city":"Tehran"}' } }],
      },
      { role: "tool", tool_call_id: "call_0", content: "18 degrees" },
    ]);
    expect(out.chat.tools).toEqual([
      {
        type: "function",
        function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } },
      },
    ]);
    expect(out.chat.tool_choice).toEqual({ type: "function", function: { name: "get_weather" } });
  });

  test("a functionResponse that answers no call, a code part and cachedContent: 400s naming the field", () => {
    const orphan = generateContentToChat(
      { contents: [{ role: "user", parts: [{ functionResponse: { name: "f", response: {} } }] }] },
      "gpt-4o-mini",
      false,
    );
    expect(isFailure(orphan) && orphan.param).toBe("contents.0.parts.0.functionResponse");
    const code = generateContentToChat({ contents: [{ role: "user", parts: [{ executableCode: { code: "1" } }] }] }, "gpt-4o-mini", false);
    expect(isFailure(code) && code.param).toBe("contents.0.parts.0");
    const cached = generateContentToChat({ contents: [user("Hi")], cachedContent: "cachedContents/x" }, "gpt-4o-mini", false);
    expect(isFailure(cached) && cached.param).toBe("cachedContent");
  });

  test("thinkingBudget: an effort by the budget's band for a model that reasons, nothing for one that does not or for 0", () => {
    const reasoning = [...REASONING_MODELS][0]!;
    const effort = (model: string, thinkingBudget: number) => {
      const out = generateContentToChat({ contents: [user("Hi")], generationConfig: { thinkingConfig: { thinkingBudget } } }, model, false);
      return isFailure(out) ? out : out.chat.reasoning_effort;
    };
    expect(effort(reasoning, 1_024)).toBe("low");
    expect(effort(reasoning, 8_192)).toBe("medium");
    expect(effort(reasoning, 20_000)).toBe("high");
    expect(effort(reasoning, 0)).toBeUndefined();
    expect(effort("gpt-4o-mini", 8_192)).toBeUndefined();
  });

  test("Google's schema types in lower case, nested", () => {
    expect(schemaToJsonSchema({ type: "ARRAY", items: { type: "INTEGER" }, description: "TYPE" })).toEqual({
      type: "array",
      items: { type: "integer" },
      description: "TYPE",
    });
  });
});

describe("every Gemini field is translated, known and without price, or refused", () => {
  const ask = (fields: Record<string, unknown>) => generateContentToChat({ contents: [user("Hi")], ...fields }, "gemini-2.5-flash", false);
  test.each([
    ["a top-level field", { labels: { team: "a" } }, "labels"],
    [
      "a generationConfig field",
      { generationConfig: { maxOutputTokens: 10, mediaResolution: "MEDIA_RESOLUTION_HIGH" } },
      "generationConfig.mediaResolution",
    ],
    ["speech output", { generationConfig: { speechConfig: { voiceConfig: {} } } }, "generationConfig.speechConfig"],
    ["image output", { generationConfig: { responseModalities: ["IMAGE"] } }, "generationConfig.responseModalities.0"],
    [
      "a thinkingConfig field",
      { generationConfig: { thinkingConfig: { thinkingBudget: 10, extra: 1 } } },
      "generationConfig.thinkingConfig.extra",
    ],
    ["a tool Google runs itself", { tools: [{ googleSearch: {} }] }, "tools.0.googleSearch"],
    [
      "code execution beside functions",
      { tools: [{ functionDeclarations: [{ name: "f" }] }, { codeExecution: {} }] },
      "tools.1.codeExecution",
    ],
    ["an unknown tool", { tools: [{ someTool: {} }] }, "tools.0.someTool"],
    [
      "a function declaration's field",
      { tools: [{ functionDeclarations: [{ name: "f", behavior: "NON_BLOCKING" }] }] },
      "tools.0.functionDeclarations.0.behavior",
    ],
    ["a part's field", { contents: [{ role: "user", parts: [{ text: "Hi", videoMetadata: {} }] }] }, "contents.0.parts.0.videoMetadata"],
    ["a content's field", { contents: [{ role: "user", parts: [{ text: "Hi" }], id: "x" }] }, "contents.0.id"],
  ])("%s: a 400 naming it", (_name, fields, param) => {
    const out = ask(fields);
    expect(isFailure(out) && [out.code, out.param]).toEqual(["invalid_request", param]);
  });

  test("what the Gemini CLI sends beside them is accepted: thinkingLevel, includeThoughts, topK, thought signatures, text output", () => {
    const out = ask({
      contents: [user("Hi"), { role: "model", parts: [{ text: "Hello", thoughtSignature: "c2ln" }] }, user("Again")],
      generationConfig: {
        topK: 40,
        responseModalities: ["TEXT"],
        thinkingConfig: { includeThoughts: true, thinkingLevel: "low", thinkingBudget: -1 },
      },
      safetySettings: [{ category: "HARM_CATEGORY_HARASSMENT", threshold: "BLOCK_NONE" }],
    });
    expect(isFailure(out) ? out.param : (out.chat.messages as unknown[]).length).toBe(3);
  });
});

describe("chatToGemini", () => {
  test("reasoning, text and a call as parts; usage split into candidates and thoughts", () => {
    const reply = chatToGemini(
      {
        choices: [
          {
            message: {
              content: "Hi",
              reasoning_content: "hmm",
              tool_calls: [{ id: "call_1", function: { name: "f", arguments: '{"a":1}' } }],
            },
            finish_reason: "tool_calls",
          },
        ],
        usage: { prompt_tokens: 10, completion_tokens: 7, completion_tokens_details: { reasoning_tokens: 4 } },
      },
      ctx,
    );
    expect(reply).toEqual({
      candidates: [
        {
          content: {
            role: "model",
            parts: [{ text: "hmm", thought: true }, { text: "Hi" }, { functionCall: { id: "call_1", name: "f", args: { a: 1 } } }],
          },
          index: 0,
          finishReason: "STOP",
        },
      ],
      usageMetadata: { promptTokenCount: 10, candidatesTokenCount: 3, totalTokenCount: 17, thoughtsTokenCount: 4 },
      modelVersion: "gemini-2.5-flash",
      responseId: "req_1",
    });
  });

  test("finish reasons: length is MAX_TOKENS, a content filter SAFETY", () => {
    const finish = (finish_reason: string) =>
      (chatToGemini({ choices: [{ message: { content: "x" }, finish_reason }] }, ctx).candidates as { finishReason: string }[])[0]!
        .finishReason;
    expect([finish("length"), finish("content_filter"), finish("stop")]).toEqual(["MAX_TOKENS", "SAFETY", "STOP"]);
    expect(usageToGemini(null)).toEqual({ promptTokenCount: 0, candidatesTokenCount: 0, totalTokenCount: 0 });
  });
});

describe("GeminiStream", () => {
  const chunk = (delta: Record<string, unknown>, finish_reason: string | null = null): ChatFrame => ({
    kind: "chunk",
    chunk: { choices: [{ index: 0, delta, finish_reason }] },
  });
  const usage: ChatFrame = { kind: "chunk", chunk: { choices: [], usage: { prompt_tokens: 5, completion_tokens: 2 } } };
  const frames: ChatFrame[] = [
    chunk({ content: "He" }),
    chunk({ tool_calls: [{ index: 0, id: "call_1", function: { name: "f", arguments: '{"a"' } }] }),
    chunk({ tool_calls: [{ index: 0, function: { arguments: ":1}" } }] }, "tool_calls"),
    usage,
    { kind: "done" },
  ];

  test("SSE: a text event, then the call whole with finishReason and usageMetadata in the last", () => {
    const stream = new GeminiStream(ctx, true);
    const text = stream.start() + frames.map((f) => stream.frame(f)).join("");
    const events = text
      .split("\r\n\r\n")
      .filter((e) => e !== "")
      .map((e) => JSON.parse(e.replace(/^data: /, "")));
    expect(events).toHaveLength(2);
    expect(events[0].candidates[0].content.parts).toEqual([{ text: "He" }]);
    expect(events[1].candidates[0]).toMatchObject({
      content: { parts: [{ functionCall: { id: "call_1", name: "f", args: { a: 1 } } }] },
      finishReason: "STOP",
    });
    expect(events[1].usageMetadata).toEqual({ promptTokenCount: 5, candidatesTokenCount: 2, totalTokenCount: 7 });
  });

  test("without alt=sse: one JSON array, keep-alives as whitespace; a failure is its last element", () => {
    const stream = new GeminiStream(ctx, false);
    const whole = stream.start() + stream.frame({ kind: "keepAlive" }) + frames.map((f) => stream.frame(f)).join("");
    expect(JSON.parse(whole)).toHaveLength(2);
    const failing = new GeminiStream(ctx, false);
    const text =
      failing.start() + failing.frame(chunk({ content: "He" })) + failing.frame({ kind: "error", failure: fail("upstream_error", "gone") });
    expect(JSON.parse(text).at(-1)).toEqual(failureToGoogleError(fail("upstream_error", "gone")).body);
    expect(failing.frame({ kind: "done" })).toBe("");
  });
});
