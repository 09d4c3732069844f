import { describe, expect, test } from "bun:test";
import { chunksOf, decodeAll, fixture } from "../../../test/decoders.ts";
import { geminiAdapter } from "./index.ts";
import { geminiOutputLimits } from "./request.ts";
import { geminiFinishToFinishReason, geminiUsageToOpenAI } from "./response.ts";
import { GeminiStreamDecoder } from "./stream.ts";

const context = { requestId: "req2", model: "gemini-test", created: 1732000000 };
const adapter = geminiAdapter("AIza-test");

describe("request", () => {
  const build = (body: Record<string, unknown>, stream = false) =>
    adapter.chat!.buildChatRequest({ body, upstreamModel: "gemini-2.5-flash", maxTokens: 256, stream })!;

  test("paths, the API key header, system instruction and generation config", () => {
    const plain = build({
      model: "ours",
      messages: [
        { role: "system", content: "Be brief." },
        { role: "user", content: "Hi" },
      ],
      temperature: 0.2,
      top_p: 0.9,
      stop: ["END"],
      seed: 7,
    });
    expect(plain.path).toBe("/v1beta/models/gemini-2.5-flash:generateContent");
    expect(plain.headers["x-goog-api-key"]).toBe("AIza-test");
    expect(plain.headers.authorization).toBeUndefined();
    expect(JSON.parse(plain.body as string)).toEqual({
      contents: [{ role: "user", parts: [{ text: "Hi" }] }],
      // A thinking model: half the limit for its thoughts, the rest for the reply.
      generationConfig: {
        maxOutputTokens: 128,
        thinkingConfig: { thinkingBudget: 128 },
        temperature: 0.2,
        topP: 0.9,
        stopSequences: ["END"],
        seed: 7,
      },
      systemInstruction: { parts: [{ text: "Be brief." }] },
    });
    expect(build({ model: "m", messages: [{ role: "user", content: "x" }] }, true).path).toBe(
      "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
    );
  });

  test("multi-turn: model turns, function calls, function responses named by their call, images", () => {
    const body = JSON.parse(
      build({
        model: "ours",
        messages: [
          {
            role: "user",
            content: [
              { type: "text", text: "Weather?" },
              { type: "image_url", image_url: { url: "data:image/jpeg;base64,/9j/4AAQ" } },
              { type: "image_url", image_url: "https://example.com/x.png" },
            ],
          },
          {
            role: "assistant",
            content: "Checking.",
            tool_calls: [{ id: "call_9", type: "function", function: { name: "get_weather", arguments: '{"city":"Tehran"}' } }],
          },
          { role: "tool", tool_call_id: "call_9", content: "18C" },
          { role: "assistant", content: "It is 18C." },
          { role: "user", content: "Thanks" },
        ],
        tools: [
          {
            type: "function",
            function: {
              name: "get_weather",
              parameters: { type: "object", properties: { city: { type: "string" } }, additionalProperties: false },
            },
          },
        ],
        tool_choice: { type: "function", function: { name: "get_weather" } },
      }).body,
    );
    expect(body.contents).toEqual([
      {
        role: "user",
        parts: [
          { text: "Weather?" },
          { inlineData: { mimeType: "image/jpeg", data: "/9j/4AAQ" } },
          { fileData: { mimeType: "image/png", fileUri: "https://example.com/x.png" } },
        ],
      },
      { role: "model", parts: [{ text: "Checking." }, { functionCall: { name: "get_weather", args: { city: "Tehran" } } }] },
      { role: "user", parts: [{ functionResponse: { name: "get_weather", response: { content: "18C" } } }] },
      { role: "model", parts: [{ text: "It is 18C." }] },
      { role: "user", parts: [{ text: "Thanks" }] },
    ]);
    expect(body.tools[0].functionDeclarations[0]).toEqual({
      name: "get_weather",
      parametersJsonSchema: { type: "object", properties: { city: { type: "string" } }, additionalProperties: false },
    });
    expect(body.toolConfig).toEqual({ functionCallingConfig: { mode: "ANY", allowedFunctionNames: ["get_weather"] } });
  });
});

describe("response", () => {
  test("text, thoughts and a function call; thinking tokens billed as output", () => {
    const reply = adapter.chat!.parseChatResponse(fixture("gemini", "reply-tool-call.json"), context);
    if ("code" in reply) throw new Error(reply.message);
    expect(reply.usage).toEqual({ input: 70, output: 50 });
    const body = JSON.parse(reply.body);
    expect(body).toMatchObject({ id: "chatcmpl-req2", object: "chat.completion", model: "gemini-test", created: 1732000000 });
    const choice = body.choices[0];
    expect(choice.finish_reason).toBe("tool_calls");
    expect(choice.message.content).toBe("I will look it up.");
    expect(choice.message.reasoning_content).toBe("Checking.");
    expect(choice.message.tool_calls).toEqual([
      { id: "call_req2_0", type: "function", function: { name: "get_weather", arguments: '{"city":"Tehran"}' } },
    ]);
    expect(body.usage).toEqual({ prompt_tokens: 70, completion_tokens: 50, total_tokens: 120 });
  });

  test("a blocked prompt is a content filter finish", () => {
    const reply = adapter.chat!.parseChatResponse(
      '{"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":5,"totalTokenCount":5}}',
      context,
    );
    if ("code" in reply) throw new Error(reply.message);
    expect(JSON.parse(reply.body).choices[0].finish_reason).toBe("content_filter");
    expect(reply.usage).toEqual({ input: 5, output: 0 });
  });

  test("finish reasons and usage", () => {
    expect(geminiFinishToFinishReason("STOP", false)).toBe("stop");
    expect(geminiFinishToFinishReason("STOP", true)).toBe("tool_calls");
    expect(geminiFinishToFinishReason("MAX_TOKENS", false)).toBe("length");
    expect(geminiFinishToFinishReason("SAFETY", false)).toBe("content_filter");
    expect(geminiFinishToFinishReason(undefined, false)).toBeNull();
    expect(geminiUsageToOpenAI({ promptTokenCount: 8, candidatesTokenCount: 12, thoughtsTokenCount: 30 })).toEqual({
      input: 8,
      output: 42,
    });
  });

  test("errors: quota is worth another backend, a too-long input is the client's", () => {
    expect(adapter.errorToFailure(429, fixture("gemini", "error-quota.json"))).toMatchObject({ code: "upstream_error", retryable: true });
    expect(adapter.errorToFailure(400, fixture("gemini", "error-too-long.json"))).toMatchObject({
      code: "context_length_exceeded",
      retryable: false,
    });
    expect(adapter.chat!.parseChatResponse("[]", context)).toMatchObject({ code: "upstream_error" });
    const badKey = adapter.errorToFailure(
      400,
      '{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT"}}',
    );
    expect(badKey).toMatchObject({ code: "upstream_error", retryable: true });
  });
});

describe.each([1, 17, 100_000])("stream decoder, fed %i characters at a time", (size) => {
  const decode = (name: string) => decodeAll(new GeminiStreamDecoder(context), fixture("gemini", name), size);

  test("text: OpenAI chunks, finish and usage-only chunk, done at the finish reason", () => {
    const out = decode("text.sse");
    expect(out.done).toBe(true);
    const chunks = chunksOf(out);
    for (const chunk of chunks) expect(chunk).toMatchObject({ id: "chatcmpl-req2", object: "chat.completion.chunk", model: "gemini-test" });
    expect(chunks[0]!.choices[0]!.delta).toEqual({ role: "assistant", content: "" });
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")).toBe("Hello! How can I help?");
    expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe("stop");
    expect(chunks.at(-1)!.choices).toEqual([]);
    expect(chunks.at(-1)!.usage).toEqual({ prompt_tokens: 8, completion_tokens: 7, total_tokens: 15 });
    expect(out.frames.filter((f) => f.usageOnly)).toHaveLength(1);
    expect(out.usage).toEqual({ input: 8, output: 7 });
  });

  test("a function call arrives whole as one tool call chunk; thinking tokens billed", () => {
    const out = decode("tool-call.sse");
    const calls = chunksOf(out).flatMap((c) => (c.choices[0]?.delta.tool_calls as unknown[]) ?? []);
    expect(calls).toEqual([
      { index: 0, id: "call_req2_0", type: "function", function: { name: "get_weather", arguments: '{"city":"Tehran"}' } },
    ]);
    expect(chunksOf(out).at(-2)!.choices[0]!.finish_reason).toBe("tool_calls");
    expect(out.frames.map((f) => f.text).join("")).toBe('{"city":"Tehran"}');
    expect(out.usage).toEqual({ input: 61, output: 59 });
  });

  test("thought parts are reasoning, thoughtsTokenCount is output", () => {
    const out = decode("thoughts.sse");
    const chunks = chunksOf(out);
    expect(chunks.map((c) => c.choices[0]?.delta.reasoning_content ?? "").join("")).toContain("Multiplying");
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")).toBe("27 × 453 = 12,231");
    expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe("length");
    expect(out.usage).toEqual({ input: 12, output: 138 });
  });

  test("an error event becomes a failure after the frames before it", () => {
    const out = decode("error-midstream.sse");
    expect(out.frames.map((f) => f.text).join("")).toBe("Once upon");
    expect(out.error?.message).toContain("UNAVAILABLE: The model is overloaded");
    expect(out.done).toBe(false);
  });

  test("a stream cut before its finish reason is not done", () => {
    const out = decode("broken-midstream.sse");
    expect(out.done).toBe(false);
    expect(out.error).toBeUndefined();
    expect(out.frames.map((f) => f.text).join("")).toBe("Once upon a time");
  });
});

test("the limit sent to a thinking Gemini model, thoughts and reply together, stays within the limit held", () => {
  for (const limit of [1, 2, 3, 4_096, 16_384]) {
    const sent = geminiOutputLimits("gemini-2.5-pro", limit) as { maxOutputTokens: number; thinkingConfig?: { thinkingBudget: number } };
    expect(sent.maxOutputTokens + (sent.thinkingConfig?.thinkingBudget ?? 0)).toBeLessThanOrEqual(limit);
  }
  expect(geminiOutputLimits("gemini-2.0-flash", 4_096)).toEqual({ maxOutputTokens: 4_096 });
});
