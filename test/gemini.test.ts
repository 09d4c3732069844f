/**
 * Google's Gemini API through `@google/genai` (`httpOptions.baseUrl` set to the gateway) for an
 * OpenAI-compatible, an Anthropic and a Gemini backend (the simulator speaks all three):
 * generateContent, generateContentStream, countTokens and embedContent; text, a function-call
 * round trip, an image, a cut at the wallet's edge and a client that leaves mid-stream, each
 * billed exactly the simulator's logged tokens × the published price. Errors keep Google's shape
 * and the `?key=` the CLI may send appears in no log line.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ApiError, FinishReason, FunctionCallingConfigMode, GoogleGenAI, type Content, type GenerateContentResponse } from "@google/genai";
import { createLogger } from "../src/log.ts";
import { simEmbedding } from "../src/sim/embeddings.ts";
import type { Simulator } from "../src/sim/server.ts";
import { countPromptTokens, countTokens } from "../src/tokens/count.ts";
import { SETUP_MS_MAX, type TestGateway } from "./helpers.ts";
import {
  expectBilledAsLogged,
  expectedText,
  expectLeftAndBilled,
  OUTPUT_TOKENS,
  PIXEL_PNG,
  simEntry,
  startWireSuite,
  UPSTREAM_KEY_ENV,
  usageRecord,
  VENDORS,
  WEATHER_PARAMETERS,
  withSimOptions,
  SYSTEM,
  QUESTION,
  AS_CHAT,
} from "./wires.ts";

const WEATHER_TOOL = {
  functionDeclarations: [{ name: "get_weather", description: "Current weather", parametersJsonSchema: WEATHER_PARAMETERS }],
};
/** A request's config that makes the model call the weather tool. */
const MUST_CALL_WEATHER = {
  maxOutputTokens: 100,
  tools: [WEATHER_TOOL],
  toolConfig: { functionCallingConfig: { mode: FunctionCallingConfigMode.ANY } },
};
/** Vendors of chat backends that are not the Responses-speaking one (that path is the Responses suite's). */
const CHAT_VENDORS = VENDORS.filter((v) => v.kind !== "openai-responses");
/** Embedding models, micro-toman per input token as published (USD × 90,000). */
const EMBEDDERS = [
  { kind: "gemini", model: "gemini-embedding-001", inputMicro: 13_500n },
  { kind: "openai", model: "text-embedding-3-small", inputMicro: 1_800n },
] as const;

let sim: Simulator;
let t: TestGateway;
let key: string;
let ai: GoogleGenAI;
const lines: string[] = [];

beforeAll(async () => {
  const suite = await startWireSuite({
    log: createLogger("debug", (line) => lines.push(line)),
    pools: (simUrl) => ({
      "gemini-embedding-001": {
        backends: [{ name: "gemini-embed", kind: "gemini", url: `${simUrl}/v1beta`, api_key_env: UPSTREAM_KEY_ENV, region: "abroad" }],
      },
      "text-embedding-3-small": {
        backends: [{ name: "openai-embed", kind: "openai", url: `${simUrl}/v1`, api_key_env: UPSTREAM_KEY_ENV, region: "abroad" }],
      },
    }),
  });
  sim = suite.sim;
  t = suite.t;
  key = suite.key;
  ai = new GoogleGenAI({ apiKey: key, httpOptions: { baseUrl: t.url } });
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  await sim?.stop();
}, SETUP_MS_MAX);

const requestIdOf = (reply: GenerateContentResponse) => reply.responseId!;

describe.each(CHAT_VENDORS)("$model ($kind backend) through the Gemini API", (vendor) => {
  test("generateContent: the text, finishReason and usageMetadata in Google's shape, billed as logged", async () => {
    const reply = await ai.models.generateContent({
      model: vendor.model,
      contents: QUESTION,
      config: { systemInstruction: SYSTEM, maxOutputTokens: 100 },
    });
    expect(reply.text).toBe(expectedText(AS_CHAT));
    expect(reply.candidates![0]!.finishReason).toBe(FinishReason.STOP);
    expect(reply.sdkHttpResponse!.headers!["x-request-id"]).toBe(requestIdOf(reply));
    const entry = await expectBilledAsLogged({ sim, t }, requestIdOf(reply), vendor);
    expect(reply.usageMetadata).toMatchObject({
      promptTokenCount: entry.promptTokens,
      candidatesTokenCount: OUTPUT_TOKENS,
      totalTokenCount: entry.promptTokens + OUTPUT_TOKENS,
    });
  });

  test("generateContentStream: text events, the last with finishReason and the billed usageMetadata", async () => {
    const stream = await ai.models.generateContentStream({
      model: vendor.model,
      contents: QUESTION,
      config: { systemInstruction: SYSTEM, maxOutputTokens: 100 },
    });
    const chunks: GenerateContentResponse[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.length).toBeGreaterThan(1);
    expect(chunks.map((c) => c.text ?? "").join("")).toBe(expectedText(AS_CHAT));
    const last = chunks.at(-1)!;
    expect(last.candidates![0]!.finishReason).toBe(FinishReason.STOP);
    const entry = await expectBilledAsLogged({ sim, t }, requestIdOf(last), vendor);
    expect(last.usageMetadata).toMatchObject({ promptTokenCount: entry.promptTokens, candidatesTokenCount: entry.completionTokens });
  });

  test("a function-call round trip: functionCall with its args, then the functionResponse answered in text", async () => {
    const first = await ai.models.generateContent({
      model: vendor.model,
      contents: QUESTION,
      config: MUST_CALL_WEATHER,
    });
    const call = first.functionCalls![0]!;
    expect(call).toMatchObject({ name: "get_weather", args: { city: "sim", days: 1 } });
    await expectBilledAsLogged({ sim, t }, requestIdOf(first), vendor);

    const contents: Content[] = [
      { role: "user", parts: [{ text: QUESTION }] },
      first.candidates![0]!.content!,
      { role: "user", parts: [{ functionResponse: { id: call.id, name: call.name!, response: { output: "18 degrees" } } }] },
    ];
    const second = await ai.models.generateContent({
      model: vendor.model,
      contents,
      config: { maxOutputTokens: 100, tools: [WEATHER_TOOL] },
    });
    expect(second.functionCalls).toBeUndefined();
    expect(second.text!.length).toBeGreaterThan(0);
    await expectBilledAsLogged({ sim, t }, requestIdOf(second), vendor);
  });

  test("a function call streamed: one functionCall part, whole, in the last event", async () => {
    const stream = await ai.models.generateContentStream({
      model: vendor.model,
      contents: QUESTION,
      config: MUST_CALL_WEATHER,
    });
    const chunks: GenerateContentResponse[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    const calls = chunks.flatMap((c) => c.functionCalls ?? []);
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatchObject({ name: "get_weather", args: { city: "sim", days: 1 } });
    await expectBilledAsLogged({ sim, t }, requestIdOf(chunks.at(-1)!), vendor);
  });

  test("an inline image: answered and billed as logged", async () => {
    const reply = await ai.models.generateContent({
      model: vendor.model,
      contents: [{ role: "user", parts: [{ text: "What is this?" }, { inlineData: { mimeType: "image/png", data: PIXEL_PNG } }] }],
      config: { maxOutputTokens: 100 },
    });
    expect(reply.text!.length).toBeGreaterThan(0);
    await expectBilledAsLogged({ sim, t }, requestIdOf(reply), vendor);
  });

  test("a cut at maxOutputTokens: finishReason MAX_TOKENS", async () => {
    // A thinking Gemini model is sent half the limit as its thinking budget and the rest for the reply.
    const replyTokens = vendor.model === "gemini-2.5-flash" ? 2 : 3;
    const reply = await ai.models.generateContent({
      model: vendor.model,
      contents: QUESTION,
      config: { systemInstruction: SYSTEM, maxOutputTokens: 3, thinkingConfig: { thinkingBudget: 2_000 } },
    });
    expect(reply.candidates![0]!.finishReason).toBe(FinishReason.MAX_TOKENS);
    expect(reply.text).toBe(expectedText(AS_CHAT, replyTokens));
    const entry = await expectBilledAsLogged({ sim, t }, requestIdOf(reply), vendor);
    expect(entry.completionTokens).toBeLessThanOrEqual(3);
  });

  test("a client that leaves mid-stream: nothing more is relayed, the upstream is cut and billed what it generated until then, within the allowance", async () => {
    await withSimOptions(sim, { outputTokens: 100, itlMs: 20 }, async () => {
      const controller = new AbortController();
      const stream = await ai.models.generateContentStream({
        model: vendor.model,
        contents: QUESTION,
        config: { maxOutputTokens: 2_000, abortSignal: controller.signal },
      });
      let requestId = "";
      let seen = 0;
      const read = (async () => {
        for await (const chunk of stream) {
          requestId = chunk.responseId ?? requestId;
          if (++seen === 5) controller.abort();
        }
      })();
      await read.catch(() => undefined);
      expect(seen).toBeGreaterThanOrEqual(5);
      expect(seen).toBeLessThan(100);
      const entry = await expectLeftAndBilled({ sim, t }, requestId, vendor);
      expect(entry.completionTokens).toBeLessThan(100);
    });
  });
});

describe("the v1beta spelling (the SDK's `apiVersion: \"v1beta\"`, what Google's own clients call)", () => {
  const vendor = VENDORS.find((v) => v.kind === "gemini")!;

  test("generateContent and generateContentStream: answered and billed as on v1", async () => {
    const beta = new GoogleGenAI({ apiKey: key, httpOptions: { baseUrl: t.url, apiVersion: "v1beta" } });
    const reply = await beta.models.generateContent({ model: vendor.model, contents: QUESTION, config: { systemInstruction: SYSTEM } });
    expect(reply.text).toBe(expectedText(AS_CHAT));
    await expectBilledAsLogged({ sim, t }, requestIdOf(reply), vendor);
    const chunks: GenerateContentResponse[] = [];
    for await (const chunk of await beta.models.generateContentStream({ model: vendor.model, contents: QUESTION })) chunks.push(chunk);
    expect(chunks.at(-1)!.candidates![0]!.finishReason).toBe(FinishReason.STOP);
    await expectBilledAsLogged({ sim, t }, requestIdOf(chunks.at(-1)!), vendor);
    const listed: string[] = [];
    for await (const model of await beta.models.list()) listed.push(model.name!);
    expect(listed).toContain("models/gemini-2.5-flash");
  });
});

describe("countTokens", () => {
  test("the gateway's own count of the contents, as admission counts it; free of charge", async () => {
    const reply = await ai.models.countTokens({ model: "gemini-2.5-flash", contents: QUESTION });
    expect(reply.totalTokens).toBe(await countPromptTokens([{ role: "user", content: [{ type: "text", text: QUESTION }] }]));
    const longer = await ai.models.countTokens({ model: "claude-3-5-haiku", contents: `${QUESTION} ${QUESTION}` });
    expect(longer.totalTokens).toBeGreaterThan(reply.totalTokens!);
  });
});

describe.each(EMBEDDERS)("embedContent on $model ($kind backend)", (embedder) => {
  test("vectors of each text, billed by the gateway's count (or the backend's) at the published price", async () => {
    const texts = ["Salaam, donya!", "Hello"];
    const reply = await ai.models.embedContent({ model: embedder.model, contents: texts, config: { outputDimensionality: 16 } });
    expect(reply.embeddings!.map((e) => e.values)).toEqual(texts.map((text) => simEmbedding(embedder.model, text, 16)));
    const requestId = reply.sdkHttpResponse!.headers!["x-request-id"]!;
    const [entry] = sim.log.byRequestId(requestId);
    expect(entry!.operation).toBe("embeddings");
    // Gemini reports no count (the gateway counts the texts itself); OpenAI's count is the backend's.
    const tokens = embedder.kind === "openai" ? entry!.promptTokens : (await countTokens(texts[0]!)) + (await countTokens(texts[1]!));
    const record = await usageRecord(t, requestId);
    expect(record).toMatchObject({
      model: embedder.model,
      input: BigInt(tokens),
      billed: BigInt(tokens) * embedder.inputMicro,
      status: 200,
    });
  });
});

describe("the wallet's edge", () => {
  const vendor = VENDORS[0];

  test("a stream without maxOutputTokens the wallet cannot cover: the limit it covers, MAX_TOKENS, billed what the vendor generated", async () => {
    const walletMicro = 300_000_000n; // the prompt and about 5,500 output tokens at gpt-4o-mini's prices
    const poor = new GoogleGenAI({ apiKey: (await t.fundedKey(300)).key, httpOptions: { baseUrl: t.url } });
    await withSimOptions(sim, { outputTokens: 20_000 }, async () => {
      const stream = await poor.models.generateContentStream({ model: vendor.model, contents: QUESTION });
      const chunks: GenerateContentResponse[] = [];
      for await (const chunk of stream) chunks.push(chunk);
      const last = chunks.at(-1)!;
      expect(last.candidates![0]!.finishReason).toBe(FinishReason.MAX_TOKENS);
      const delivered = chunks.filter((c) => (c.text ?? "") !== "").length;
      expect(delivered).toBeGreaterThanOrEqual(4_096);
      expect(delivered).toBeLessThan(16_384);
      const requestId = requestIdOf(last);
      const record = await usageRecord(t, requestId);
      expect(record.billed).toBeLessThanOrEqual(walletMicro);
      expect(record.output).toBe(BigInt((await simEntry(sim, requestId)).completionTokens));
      expect(last.usageMetadata!.candidatesTokenCount).toBe(Number(record.output));
    });
  });

  test("a wallet that cannot cover the least output: 402 in Google's shape, nothing sent upstream", async () => {
    const poor = new GoogleGenAI({ apiKey: (await t.fundedKey("0.01")).key, httpOptions: { baseUrl: t.url } });
    const error = await poor.models
      .generateContent({ model: "claude-3-5-haiku", contents: QUESTION, config: { maxOutputTokens: 4_000 } })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ApiError);
    expect((error as ApiError).status).toBe(402);
    expect(JSON.parse((error as ApiError).message)).toMatchObject({ error: { code: 402, status: "FAILED_PRECONDITION" } });
  });
});

describe("keys and errors on Google's wire", () => {
  const body = JSON.stringify({ contents: [{ role: "user", parts: [{ text: QUESTION }] }], generationConfig: { maxOutputTokens: 50 } });

  test("`?key=`, the JSON-array stream without alt=sse, and no line of the log holds the key", async () => {
    const whole = await fetch(`${t.url}/v1beta/models/gpt-4o-mini:generateContent?key=${key}`, { method: "POST", body });
    expect(whole.status).toBe(200);
    const streamed = await fetch(`${t.url}/v1beta/models/gpt-4o-mini:streamGenerateContent?key=${key}`, { method: "POST", body });
    expect(streamed.headers.get("content-type")).toStartWith("application/json");
    const events = (await streamed.json()) as GenerateContentResponse[];
    expect(events.map((e) => e.candidates?.[0]?.content?.parts?.[0]?.text ?? "").join("")).toBe(
      expectedText([{ role: "user", content: QUESTION }]),
    );
    expect(events.at(-1)!.candidates![0]!.finishReason).toBe(FinishReason.STOP);
    const missing = await fetch(`${t.url}/v1beta/no-such-path?key=${key}`);
    expect(missing.status).toBe(404);
    expect(await missing.json()).toMatchObject({ error: { code: 404, status: "NOT_FOUND" } });
    const counted = await fetch(`${t.url}/v1beta/models/gpt-4o-mini:countTokens?key=${key}`, { method: "POST", body });
    expect(counted.status).toBe(200);
    const access = lines.filter((line) => line.includes(whole.headers.get("x-request-id")!));
    expect(access.length).toBeGreaterThan(0);
    expect(lines.length).toBeGreaterThan(0);
    const countLine = lines.find((line) => line.includes(counted.headers.get("x-request-id")!))!;
    expect(JSON.parse(countLine)).toMatchObject({ operation: "count_tokens", route: "/v1beta/models/*", status: 200 });
    expect(lines.filter((line) => line.includes(key))).toEqual([]);
  });

  test("a wrong key: 401 UNAUTHENTICATED", async () => {
    const stranger = new GoogleGenAI({ apiKey: "sk-dvz-not-a-key", httpOptions: { baseUrl: t.url } });
    const error = await stranger.models.generateContent({ model: "gpt-4o-mini", contents: QUESTION }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ApiError);
    expect((error as ApiError).status).toBe(401);
    expect(JSON.parse((error as ApiError).message)).toMatchObject({ error: { code: 401, status: "UNAUTHENTICATED" } });
  });

  test("an unknown model: 404 NOT_FOUND, nothing sent upstream", async () => {
    const error = await ai.models.generateContent({ model: "gemini-unknown-1", contents: QUESTION }).catch((e: unknown) => e);
    expect((error as ApiError).status).toBe(404);
  });

  test("a malformed part: 400 INVALID_ARGUMENT naming it", async () => {
    const response = await fetch(`${t.url}/v1beta/models/gpt-4o-mini:generateContent`, {
      method: "POST",
      headers: { "x-goog-api-key": key },
      body: JSON.stringify({ contents: [{ role: "user", parts: [{ executableCode: { code: "1" } }] }] }),
    });
    expect(response.status).toBe(400);
    const error = (await response.json()) as { error: { status: string; message: string } };
    expect(error.error.status).toBe("INVALID_ARGUMENT");
    expect(error.error.message).toContain("contents.0.parts.0");
    expect(sim.log.byRequestId(response.headers.get("x-request-id")!)).toHaveLength(0);
  });

  test("models.list and models.get: the catalog's chat and embedding models", async () => {
    const listed: string[] = [];
    for await (const model of await ai.models.list()) listed.push(model.name!);
    expect(listed).toContain("models/gemini-2.5-flash");
    expect(listed).toContain("models/gemini-embedding-001");
    const one = await ai.models.get({ model: "gemini-2.5-flash" });
    expect(one).toMatchObject({ name: "models/gemini-2.5-flash" });
    expect(one.supportedActions).toContain("generateContent");
  });
});
