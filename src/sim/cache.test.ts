/**
 * The simulator's prompt-cache figures, read by the vendors' own SDKs: cached reads in OpenAI's
 * and Gemini's shapes, Anthropic's cache writes and reads, each bounded by the prompt and logged.
 */
import Anthropic from "@anthropic-ai/sdk";
import { GoogleGenAI } from "@google/genai";
import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, expect, test } from "bun:test";
import { optionsFromArgs } from "./main.ts";
import { startSimulator, type Simulator } from "./server.ts";

let sim: Simulator;
beforeAll(async () => {
  sim = await startSimulator({ outputTokens: 3 });
});
afterAll(() => sim.stop());
beforeEach(() => {
  sim.options.cacheReadTokens = 0;
  sim.options.cacheWriteTokens = 0;
});
const lastLog = () => sim.log.entries().at(-1)!;
const longPrompt = "word ".repeat(40);

test("OpenAI: prompt_tokens_details.cached_tokens, whole and streamed; writes are not an OpenAI figure", async () => {
  sim.options.cacheReadTokens = 25;
  sim.options.cacheWriteTokens = 7;
  const client = new OpenAI({ apiKey: "k", baseURL: `${sim.url}/v1`, maxRetries: 0 });
  const reply = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: longPrompt }] });
  expect(reply.usage?.prompt_tokens_details?.cached_tokens).toBe(25);
  expect(lastLog()).toMatchObject({ promptTokens: reply.usage!.prompt_tokens, cacheReadTokens: 25 });
  expect(lastLog().cacheWriteTokens).toBeUndefined();
  const stream = await client.chat.completions.create({
    model: "m",
    messages: [{ role: "user", content: longPrompt }],
    stream: true,
    stream_options: { include_usage: true },
  });
  let cached: number | undefined;
  for await (const chunk of stream) if (chunk.usage) cached = chunk.usage.prompt_tokens_details?.cached_tokens;
  expect(cached).toBe(25);
});

test("OpenAI: a cached figure above the prompt is cut to the prompt; none reported when zero", async () => {
  const client = new OpenAI({ apiKey: "k", baseURL: `${sim.url}/v1`, maxRetries: 0 });
  sim.options.cacheReadTokens = 1_000_000;
  const reply = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "Hi" }] });
  expect(reply.usage?.prompt_tokens_details?.cached_tokens).toBe(reply.usage!.prompt_tokens);
  sim.options.cacheReadTokens = 0;
  const plain = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "Hi" }] });
  expect(plain.usage?.prompt_tokens_details).toBeUndefined();
});

test("Anthropic: cache writes and reads apart from input_tokens, which is what remains of the prompt", async () => {
  sim.options.cacheReadTokens = 20;
  sim.options.cacheWriteTokens = 15;
  const client = new Anthropic({ apiKey: "k", baseURL: sim.url, maxRetries: 0 });
  const message = await client.messages.create({ model: "c", max_tokens: 50, messages: [{ role: "user", content: longPrompt }] });
  const prompt = lastLog().promptTokens;
  expect(message.usage).toMatchObject({ input_tokens: prompt - 35, cache_creation_input_tokens: 15, cache_read_input_tokens: 20 });
  expect(lastLog()).toMatchObject({ cacheReadTokens: 20, cacheWriteTokens: 15 });
  const final = await client.messages
    .stream({ model: "c", max_tokens: 50, messages: [{ role: "user", content: longPrompt }] })
    .finalMessage();
  expect(final.usage).toMatchObject({ input_tokens: prompt - 35, cache_creation_input_tokens: 15, cache_read_input_tokens: 20 });
});

test("Gemini: cachedContentTokenCount within promptTokenCount", async () => {
  sim.options.cacheReadTokens = 30;
  const client = new GoogleGenAI({ apiKey: "k", httpOptions: { baseUrl: sim.url, apiVersion: "v1beta" } });
  const reply = await client.models.generateContent({ model: "g", contents: longPrompt });
  expect(reply.usageMetadata?.cachedContentTokenCount).toBe(30);
  expect(reply.usageMetadata?.promptTokenCount).toBe(lastLog().promptTokens);
  expect(lastLog()).toMatchObject({ cacheReadTokens: 30 });
});

test("flags set the cache figures", () => {
  expect(optionsFromArgs(["--cache-read-tokens", "12", "--cache-write-tokens", "4"])).toMatchObject({
    cacheReadTokens: 12,
    cacheWriteTokens: 4,
  });
});
