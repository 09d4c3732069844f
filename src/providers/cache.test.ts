/**
 * Prompt-cache figures in every vendor's usage, and the cache marks passed to Anthropic: each
 * conversion against figures worked out by hand from the vendor's documented meaning.
 */
import { describe, expect, test } from "bun:test";
import { anthropicAdapter } from "./anthropic/index.ts";
import { anthropicUsageToUsage } from "./anthropic/response.ts";
import { AnthropicStreamDecoder } from "./anthropic/stream.ts";
import { usageToOpenAI } from "./chatShape.ts";
import { chunkJson } from "./chunk.ts";
import { boundedParts } from "../units.ts";
import { geminiToOpenAIResponse, geminiUsageToOpenAI } from "./gemini/response.ts";
import { openAIUsageToUsage, parseOpenAIChatResponse } from "./openai/response.ts";
import { OpenAIStreamDecoder } from "./openai/stream.ts";

const context = { requestId: "req1", model: "m", created: 1732000000 };

describe("usage conversions", () => {
  test("OpenAI: cached_tokens is the part of prompt_tokens read from the cache", () => {
    expect(openAIUsageToUsage({ prompt_tokens: 2006, completion_tokens: 300, prompt_tokens_details: { cached_tokens: 1920 } })).toEqual({
      input: 2006,
      output: 300,
      cache_read: 1920,
    });
    expect(openAIUsageToUsage({ prompt_tokens: 10, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 0 } })).toEqual({
      input: 10,
      output: 2,
    });
    expect(openAIUsageToUsage({ prompt_tokens: 10, completion_tokens: 2 })).toEqual({ input: 10, output: 2 });
  });

  test("OpenAI: a cached figure above the prompt is bounded by it; a malformed details object is ignored", () => {
    expect(openAIUsageToUsage({ prompt_tokens: 10, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 50 } })).toEqual({
      input: 10,
      output: 2,
      cache_read: 10,
    });
    const reply = parseOpenAIChatResponse(
      JSON.stringify({ choices: [], usage: { prompt_tokens: 7, completion_tokens: 1, prompt_tokens_details: "x" } }),
    );
    expect(reply).toEqual({ body: expect.any(String), json: expect.any(Object), usage: { input: 7, output: 1 } });
  });

  test("OpenAI stream: the usage chunk's cached tokens are read", () => {
    const decoder = new OpenAIStreamDecoder();
    const piece = decoder.push(
      `data: {"choices":[],"usage":{"prompt_tokens":1500,"completion_tokens":4,"total_tokens":1504,"prompt_tokens_details":{"cached_tokens":1024}}}\n\n`,
    );
    expect(piece.usage).toEqual({ input: 1500, output: 4, cache_read: 1024 });
  });

  test("Anthropic: input_tokens excludes cache writes and reads; the prompt is all three", () => {
    expect(
      anthropicUsageToUsage({ input_tokens: 21, cache_creation_input_tokens: 188086, cache_read_input_tokens: 0, output_tokens: 393 }),
    ).toEqual({
      input: 188107,
      output: 393,
      cache_write: 188086,
    });
    expect(
      anthropicUsageToUsage({ input_tokens: 21, cache_creation_input_tokens: 1000, cache_read_input_tokens: 3000, output_tokens: 7 }),
    ).toEqual({
      input: 4021,
      output: 7,
      cache_read: 3000,
      cache_write: 1000,
    });
  });

  test("Anthropic stream: message_start's cache figures reach the final usage", () => {
    const decoder = new AnthropicStreamDecoder(context);
    const text =
      `event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":5,"cache_creation_input_tokens":2000,"cache_read_input_tokens":6000,"output_tokens":1}}}\n\n` +
      `event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":12}}\n\n` +
      `event: message_stop\ndata: {"type":"message_stop"}\n\n`;
    const piece = decoder.push(text);
    expect(piece.usage).toEqual({ input: 8005, output: 12, cache_read: 6000, cache_write: 2000 });
    const usageFrame = piece.frames.find((f) => f.usageOnly)!;
    expect(JSON.parse(chunkJson(usageFrame)).usage).toEqual({
      prompt_tokens: 8005,
      completion_tokens: 12,
      total_tokens: 8017,
      prompt_tokens_details: { cached_tokens: 6000, cache_write_tokens: 2000 },
    });
  });

  test("Gemini: cachedContentTokenCount is the part of promptTokenCount read from a context cache", () => {
    expect(
      geminiUsageToOpenAI({ promptTokenCount: 12000, candidatesTokenCount: 40, thoughtsTokenCount: 10, cachedContentTokenCount: 8192 }),
    ).toEqual({
      input: 12000,
      output: 50,
      cache_read: 8192,
    });
    const reply = geminiToOpenAIResponse(
      JSON.stringify({
        candidates: [{ content: { parts: [{ text: "hi" }] }, finishReason: "STOP" }],
        usageMetadata: { promptTokenCount: 900, candidatesTokenCount: 1, cachedContentTokenCount: 512 },
      }),
      context,
    );
    if ("code" in reply) throw new Error(reply.message);
    expect(JSON.parse(reply.body).usage.prompt_tokens_details).toEqual({ cached_tokens: 512 });
  });

  test("bounded: reads first, then writes, never past the prompt", () => {
    expect(boundedParts({ input: 100, output: 1, cache_read: 80, cache_write: 50 })).toEqual({
      input: 100,
      output: 1,
      cache_read: 80,
      cache_write: 20,
    });
    expect(usageToOpenAI({ input: 3, output: 4 })).toEqual({ prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 });
  });
});

describe("cache_control to Anthropic", () => {
  const adapter = anthropicAdapter("k");
  const build = (body: Record<string, unknown>) =>
    JSON.parse(adapter.chat!.buildChatRequest({ body, upstreamModel: "claude-sonnet-4", maxTokens: 100, stream: false })!.body as string);

  test("marks on content parts, system parts, a message and a tool keep their place; a ttl is not passed on", () => {
    const body = build({
      model: "claude-sonnet-4",
      messages: [
        {
          role: "system",
          content: [
            { type: "text", text: "Rules." },
            { type: "text", text: "Long document.", cache_control: { type: "ephemeral", ttl: "1h" } },
          ],
        },
        {
          role: "user",
          content: [
            { type: "text", text: "Part one", cache_control: { type: "ephemeral" } },
            { type: "text", text: "Question?" },
          ],
        },
        { role: "assistant", content: "Answer.", cache_control: { type: "ephemeral" } },
        { role: "user", content: "Next?" },
      ],
      tools: [{ type: "function", function: { name: "f", parameters: { type: "object" } }, cache_control: { type: "ephemeral" } }],
    });
    expect(body.system).toEqual([
      { type: "text", text: "Rules." },
      { type: "text", text: "Long document.", cache_control: { type: "ephemeral" } },
    ]);
    expect(body.messages).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: "Part one", cache_control: { type: "ephemeral" } },
          { type: "text", text: "Question?" },
        ],
      },
      { role: "assistant", content: [{ type: "text", text: "Answer.", cache_control: { type: "ephemeral" } }] },
      { role: "user", content: [{ type: "text", text: "Next?" }] },
    ]);
    expect(body.tools).toEqual([{ name: "f", input_schema: { type: "object" }, cache_control: { type: "ephemeral" } }]);
  });

  test("a mark on the request itself is Anthropic's automatic caching, passed on at the top level", () => {
    const body = build({ model: "m", cache_control: { type: "ephemeral" }, messages: [{ role: "user", content: "Hi" }] });
    expect(body.cache_control).toEqual({ type: "ephemeral" });
    expect(body.messages).toEqual([{ role: "user", content: [{ type: "text", text: "Hi" }] }]);
  });

  test("without marks the request is as before: system as text, no cache_control anywhere", () => {
    const body = build({
      model: "m",
      messages: [
        { role: "system", content: "S" },
        { role: "user", content: "Hi", cache_control: { type: "bogus" } },
      ],
    });
    expect(body.system).toBe("S");
    expect(JSON.stringify(body)).not.toContain("cache_control");
  });
});
