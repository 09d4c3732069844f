/**
 * The cost on every reply (docs/api.md, "The cost of a request"): `x-darvaze-cost` and
 * `usage.cost` carry what the settlement billed, so over a run of plain and streamed requests on
 * every wire their sum is exactly the wallet's drop. Every route the gateway serves is either a
 * paid whole reply tried here or named as not one: a new paid route without the header goes red.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { usagePage } from "../src/accountArea/usage.ts";
import { createApp } from "../src/http/app.ts";
import { PAID_ACTIONS } from "../src/http/gemini/route.ts";
import { simToneWav } from "../src/sim/audio.ts";
import { balanceMicroOf, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";

const HELLO = [{ role: "user" as const, content: "Hello, world!" }];
// gpt-4o-mini: 13,500 and 54,000 micro-toman per token; the simulator's prompt is 10 tokens.
const HELLO_10_COST_MICRO = 675_000n;

let t: TestGateway;
let key: string;
let accountId: string;
let client: OpenAI;

beforeAll(async () => {
  t = await startTestGateway();
  ({ key, accountId } = await t.fundedKey(100_000));
  client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
}, SETUP_MS_MAX);
afterAll(async () => t.stop(), SETUP_MS_MAX);

/** Toman as the reply's number → micro-toman, refusing any precision finer than a micro-toman. */
function micro(toman: number | undefined | null): bigint {
  expect(typeof toman).toBe("number");
  const scaled = Math.round(toman! * 1_000_000);
  expect(scaled / 1_000_000).toBe(toman!);
  return BigInt(scaled);
}

function headerMicro(headers: Headers): bigint {
  const value = headers.get("x-darvaze-cost");
  expect(value).toMatch(/^\d+$/);
  return BigInt(value!);
}

/** Runs `call`, which returns the cost its reply told, and checks it against the wallet's drop. */
async function costMatchesDrop(call: () => Promise<bigint>): Promise<bigint> {
  const before = await balanceMicroOf(t.url, key);
  const told = await call();
  expect(before - (await balanceMicroOf(t.url, key))).toBe(told);
  return told;
}

describe("chat completions", () => {
  test("a whole reply carries the billed cost in the header and in usage.cost", async () => {
    const told = await costMatchesDrop(async () => {
      const { data, response } = await client.chat.completions
        .create({ model: "gpt-4o-mini", messages: HELLO, max_tokens: 10 })
        .withResponse();
      const cost = micro((data.usage as { cost?: number }).cost);
      expect(headerMicro(response.headers)).toBe(cost);
      return cost;
    });
    expect(told).toBe(HELLO_10_COST_MICRO);
  });

  test("a stream's usage chunk carries the billed cost", async () => {
    const told = await costMatchesDrop(async () => {
      const stream = await client.chat.completions.create({
        model: "gpt-4o-mini",
        messages: HELLO,
        max_tokens: 10,
        stream: true,
        stream_options: { include_usage: true },
      });
      const costs: bigint[] = [];
      for await (const chunk of stream) if (chunk.usage) costs.push(micro((chunk.usage as { cost?: number }).cost));
      expect(costs).toHaveLength(1);
      return costs[0]!;
    });
    expect(told).toBe(HELLO_10_COST_MICRO);
  });
});

describe("the other wires", () => {
  test("Responses, plain and streamed (response.completed), carry the billed cost", async () => {
    await costMatchesDrop(async () => {
      const { data, response } = await client.responses
        .create({ model: "gpt-4o-mini", input: "Hello", max_output_tokens: 16 })
        .withResponse();
      const cost = micro((data.usage as unknown as { cost?: number }).cost);
      expect(headerMicro(response.headers)).toBe(cost);
      return cost;
    });
    await costMatchesDrop(async () => {
      const stream = await client.responses.create({ model: "gpt-4o-mini", input: "Hello", max_output_tokens: 16, stream: true });
      let cost: bigint | null = null;
      for await (const event of stream) {
        if (event.type === "response.completed") cost = micro((event.response.usage as unknown as { cost?: number }).cost);
      }
      return cost!;
    });
  });

  test("Messages, plain and streamed (message_delta), carry the billed cost", async () => {
    const anthropic = new Anthropic({ baseURL: t.url, apiKey: key, maxRetries: 0 });
    const params = { model: "claude-3-5-haiku", max_tokens: 16, messages: [{ role: "user" as const, content: "Hello" }] };
    await costMatchesDrop(async () => {
      const { data, response } = await anthropic.messages.create(params).withResponse();
      const cost = micro((data.usage as unknown as { cost?: number }).cost);
      expect(headerMicro(response.headers)).toBe(cost);
      return cost;
    });
    await costMatchesDrop(async () => {
      const stream = await anthropic.messages.create({ ...params, stream: true });
      let cost: bigint | null = null;
      for await (const event of stream)
        if (event.type === "message_delta") cost = micro((event.usage as unknown as { cost?: number }).cost);
      return cost!;
    });
  });

  test("embeddings carry it in usage.cost and the header; images, speech and transcription in the header", async () => {
    await costMatchesDrop(async () => {
      const { data, response } = await client.embeddings.create({ model: "text-embedding-3-small", input: "Hello" }).withResponse();
      const cost = micro((data.usage as { cost?: number }).cost);
      expect(headerMicro(response.headers)).toBe(cost);
      return cost;
    });
    await costMatchesDrop(async () => {
      const { response } = await client.images.generate({ model: "dall-e-3", prompt: "a dot", n: 1, size: "1024x1024" }).withResponse();
      return headerMicro(response.headers);
    });
    let wav: ArrayBuffer | null = null;
    await costMatchesDrop(async () => {
      const { data, response } = await client.audio.speech
        .create({ model: "tts-1", voice: "alloy", input: "The gateway speaks.", response_format: "wav" })
        .withResponse();
      wav = await data.arrayBuffer();
      return headerMicro(response.headers);
    });
    await costMatchesDrop(async () => {
      const file = new File([wav!], "speech.wav", { type: "audio/wav" });
      const { response } = await client.audio.transcriptions.create({ model: "whisper-1", file }).withResponse();
      return headerMicro(response.headers);
    });
  });
});

/** A POST of `body` (JSON, or a form) with `headers`; `key` goes in the Bearer header unless `headers` places it. */
function post(path: string, body: unknown, headers: (key: string) => Record<string, string> = bearer) {
  return (apiKey: string) =>
    fetch(`${t.url}${path}`, {
      method: "POST",
      headers: body instanceof FormData ? headers(apiKey) : { "content-type": "application/json", ...headers(apiKey) },
      body: body instanceof FormData ? body : JSON.stringify(body),
    });
}
const bearer = (apiKey: string) => ({ authorization: `Bearer ${apiKey}` });
const googleKey = (apiKey: string) => ({ "x-goog-api-key": apiKey });

function transcriptionForm(): FormData {
  const form = new FormData();
  form.set("model", "whisper-1");
  form.set("file", new File([simToneWav(1.5)], "tone.wav", { type: "audio/wav" }));
  return form;
}

/** One billed request for each paid whole reply, by `METHOD route` (a Gemini model route by `:action`). */
const WHOLE_REPLIES: Record<string, (apiKey: string) => Promise<Response>> = {
  "POST /v1/chat/completions": post("/v1/chat/completions", { model: "gpt-4o-mini", messages: HELLO, max_tokens: 4 }),
  "POST /v1/responses": post("/v1/responses", { model: "gpt-4o-mini", input: "Hello", max_output_tokens: 16 }),
  "POST /v1/messages": post("/v1/messages", { model: "claude-3-5-haiku", max_tokens: 16, messages: HELLO }, (apiKey) => ({
    "x-api-key": apiKey,
    "anthropic-version": "2023-06-01",
  })),
  "POST /v1/embeddings": post("/v1/embeddings", { model: "text-embedding-3-small", input: "Hello" }),
  "POST /v1/audio/speech": post("/v1/audio/speech", { model: "tts-1", voice: "alloy", input: "Hello", response_format: "wav" }),
  "POST /v1/audio/transcriptions": (apiKey) => post("/v1/audio/transcriptions", transcriptionForm())(apiKey),
  "POST /v1/images/generations": post("/v1/images/generations", { model: "dall-e-2", prompt: "a dot", size: "256x256" }),
};
const GENERATE = { contents: [{ role: "user", parts: [{ text: "Hello" }] }], generationConfig: { maxOutputTokens: 8 } };
const EMBED = { content: { parts: [{ text: "Hello" }] } };
for (const version of ["v1beta", "v1"]) {
  const models = `/${version}/models`;
  WHOLE_REPLIES[`POST ${models}/*:generateContent`] = post(`${models}/gpt-4o-mini:generateContent`, GENERATE, googleKey);
  WHOLE_REPLIES[`POST ${models}/*:embedContent`] = post(`${models}/text-embedding-3-small:embedContent`, EMBED, googleKey);
  WHOLE_REPLIES[`POST ${models}/*:batchEmbedContents`] = post(
    `${models}/text-embedding-3-small:batchEmbedContents`,
    { requests: [EMBED, EMBED] },
    googleKey,
  );
}
/** Paid actions whose reply is a stream: its headers go before its bill (its last event tells it). */
const STREAMED_ACTIONS = new Set(["streamGenerateContent"]);
/**
 * Routes that change something without being a paid operation: free, or the operator's and the
 * account area's. Files and batches are free: a batch's lines are paid each (test/batches.test.ts).
 */
const NOT_PAID = new Set([
  "POST /v1/messages/count_tokens",
  "POST /v1/files",
  "DELETE /v1/files/:id",
  "POST /v1/batches",
  "POST /v1/batches/:id/cancel",
  "POST /v1/messages/batches",
  "POST /v1/messages/batches/:id/cancel",
]);
const NOT_PAID_UNDER = ["/admin/", "/console/", "/live/", "/operators/"];

describe("every paid whole reply carries x-darvaze-cost", () => {
  test("every route but a read is a paid whole reply tried below, a stream, or named as not paid", () => {
    // GET and HEAD only read: no paid operation is served on them.
    const app = createApp(t.gw.deps, { health: t.gw.health, console: t.gw.console });
    const writes = app.routes.filter((r) => r.method !== "GET" && r.method !== "HEAD").map((r) => `${r.method} ${r.path}`);
    expect(writes.length).toBeGreaterThan(Object.keys(WHOLE_REPLIES).length);
    const unlisted = writes
      .filter((route) => !NOT_PAID.has(route) && !NOT_PAID_UNDER.some((under) => route.split(" ")[1]!.startsWith(under)))
      .flatMap((route) =>
        route.endsWith("/models/*") ? [...PAID_ACTIONS].filter((a) => !STREAMED_ACTIONS.has(a)).map((a) => `${route}:${a}`) : [route],
      )
      .filter((route) => !(route in WHOLE_REPLIES));
    expect(unlisted).toEqual([]);
  });

  test.each(Object.keys(WHOLE_REPLIES))("%s: the header is the wallet's drop", async (route) => {
    const told = await costMatchesDrop(async () => {
      const response = await WHOLE_REPLIES[route]!(key);
      expect(response.status).toBe(200);
      await response.arrayBuffer();
      return headerMicro(response.headers);
    });
    expect(told).toBeGreaterThan(0n);
  });
});

describe("GET /v1/generations/{request_id}", () => {
  const get = (id: string, apiKey = key) => fetch(`${t.url}/v1/generations/${id}`, { headers: { authorization: `Bearer ${apiKey}` } });

  test("tells the request's model, units, cost, latency and status, as the console's usage page does", async () => {
    const { data, response } = await client.chat.completions
      .create({ model: "gpt-4o-mini", messages: HELLO, max_tokens: 10 })
      .withResponse();
    const requestId = response.headers.get("x-request-id")!;
    const reply = await get(requestId);
    expect(reply.status).toBe(200);
    const generation = (await reply.json()) as Record<string, unknown> & { units: Record<string, string> };
    expect(generation).toMatchObject({
      object: "generation",
      id: requestId,
      model: "gpt-4o-mini",
      operation: "chat",
      status: 200,
      cost: (data.usage as { cost?: number }).cost,
      cost_micro_toman: response.headers.get("x-darvaze-cost"),
    });
    expect(generation.units).toMatchObject({ input: String(data.usage!.prompt_tokens), output: String(data.usage!.completion_tokens) });
    expect(generation.backend_region === null || typeof generation.backend_region === "string").toBe(true);
    const [row] = (await usagePage(t.gw.deps.db, accountId, {}, { limit: 50 })).filter((r) => r.requestId === requestId);
    expect(row).toBeDefined();
    expect(generation).toMatchObject({
      cost_micro_toman: row!.billedMicro.toString(),
      latency_ms: row!.durationMs,
      created_at: Math.floor(row!.createdAt.getTime() / 1000),
    });
  });

  test("another account's request and an unknown id are 404 in the wire's error shape", async () => {
    const response = await client.chat.completions.create({ model: "gpt-4o-mini", messages: HELLO, max_tokens: 2 }).withResponse();
    const requestId = response.response.headers.get("x-request-id")!;
    const other = await t.fundedKey(10);
    for (const reply of [await get(requestId, other.key), await get("req_nosuchrequest")]) {
      expect(reply.status).toBe(404);
      const body = (await reply.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe("not_found");
      expect(body.error.message).toContain("retry shortly");
    }
  });
});
