/**
 * Upstream replies the simulator does not make, from a small OpenAI-style stub: images whose
 * link cannot be downloaded (the client gets an OpenAI-shaped 502 and is charged nothing, since
 * it received no image), and a speech request the upstream refuses (the client's 400, recorded
 * as the 400 it was, free), and a chat model whose one backend cannot be reached (the client's
 * 503, recorded as the 503 it was, free), and a chat reply without a choice, which the chat wire
 * delivers and bills while the translated wires cannot present it (a 502 in the wire's shape, free:
 * never billed and then failed).
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { simImage } from "../src/sim/images.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { untilValue } from "./until.ts";

const DALLE2_256_MICRO = 1_440_000_000n; // dall-e-2 256x256, $0.016 an image × 90,000 toman/USD

/** gpt-4o's reply: usage and no choice. gpt-4o: $2.50 and $10 per 1M tokens × 90,000 toman/USD. */
const NO_CHOICE = {
  id: "chatcmpl-stub",
  object: "chat.completion",
  model: "gpt-4o",
  choices: [],
  usage: { prompt_tokens: 7, completion_tokens: 3 },
};
const NO_CHOICE_MICRO = 7n * 225_000n + 3n * 900_000n;

let upstream: ReturnType<typeof Bun.serve>;
let t: TestGateway;
let accountId: string;
let key: string;
let client: OpenAI;
/** How many of the upstream's links are broken in its next reply. */
let brokenLinks = 0;

beforeAll(async () => {
  const png = simImage("x", 256, 256);
  upstream = Bun.serve({
    port: 0,
    fetch(req) {
      const url = new URL(req.url);
      if (url.pathname === "/good.png") return new Response(png, { headers: { "content-type": "image/png" } });
      if (url.pathname === "/v1/audio/speech") {
        return Response.json(
          { error: { message: "Unsupported voice: 'nobody'.", type: "invalid_request_error", param: "voice", code: null } },
          { status: 400 },
        );
      }
      // A completion the vendor billed but that holds no choice: nothing a translated wire can present.
      if (url.pathname === "/v1/chat/completions") return Response.json({ ...NO_CHOICE, created: 1 });
      if (url.pathname !== "/v1/images/generations") return new Response("gone", { status: 404 });
      return req.json().then((raw) => {
        const body = raw as { n: number };
        const data = Array.from({ length: body.n }, (_, i) => ({ url: `${url.origin}/${i < brokenLinks ? "missing" : "good"}.png` }));
        return Response.json({ created: 1, data });
      });
    },
  });
  const path = join(mkdtempSync(join(tmpdir(), "darvaze-pools-")), "pools.json");
  const backend = { name: "images-stub", kind: "openai", url: `${upstream.url.origin}/v1`, api_key_env: "STUB_KEY", region: "abroad" };
  // Nothing listens on port 1: every call to gpt-4o-mini finds no backend it can connect to.
  const unreachable = { ...backend, name: "unreachable", url: "http://127.0.0.1:1/v1" };
  const pools = {
    "dall-e-2": { backends: [backend] },
    "tts-1": { backends: [backend] },
    "gpt-4o-mini": { backends: [unreachable] },
    "gpt-4o": { backends: [backend] },
  };
  writeFileSync(path, JSON.stringify({ pools }));
  t = await startTestGateway({ DARVAZE_CONFIG: path, STUB_KEY: "x" });
  ({ key, accountId } = await t.fundedKey(100_000));
  client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  upstream?.stop(true);
}, SETUP_MS_MAX);

async function balanceMicro(): Promise<bigint> {
  const response = await fetch(`${t.url}/v1/credits`, { headers: { authorization: `Bearer ${key}` } });
  return BigInt(((await response.json()) as { balance_micro_toman: string }).balance_micro_toman);
}

/** How long a settled request may take to reach the usage records (group commit). */
const RECORD_WAIT_MS_MAX = 10_000;

async function record(requestId: string) {
  const read = async () => {
    const account = await t.admin("GET", `/admin/accounts/${accountId}`);
    return account.body.recent_usage.find((u: { request_id: string }) => u.request_id === requestId);
  };
  return untilValue(read, { msMax: RECORD_WAIT_MS_MAX, what: `the usage record of ${requestId}`, pollMs: 20 });
}

test("two links that download: both images, billed two images", async () => {
  brokenLinks = 0;
  const before = await balanceMicro();
  const { data, response } = await client.images.generate({ model: "dall-e-2", prompt: "x", n: 2, size: "256x256" }).withResponse();
  expect(data.data).toHaveLength(2);
  for (const image of data.data ?? []) expect(image.url).toStartWith(`${t.url}/v1/media/`);
  expect(before - (await balanceMicro())).toBe(2n * DALLE2_256_MICRO);
  expect(await record(response.headers.get("x-request-id")!)).toMatchObject({ input_units: "2", status: 200 });
});

test.each(["url", "b64_json"] as const)(
  "%s: one of two links broken is a 502 in OpenAI's shape, and nothing is charged",
  async (format) => {
    brokenLinks = 1;
    const before = await balanceMicro();
    const error = await client.images
      .generate({ model: "dall-e-2", prompt: "x", n: 2, size: "256x256", response_format: format })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    const apiError = error as InstanceType<typeof OpenAI.APIError>;
    expect(apiError.status).toBe(502);
    expect(apiError.type).toBe("api_error");
    expect(apiError.message).toContain("file could not be fetched (status 404)");
    expect(apiError.message).not.toContain(upstream.url.origin);
    expect(await balanceMicro()).toBe(before);
    expect(await record(apiError.requestID!)).toMatchObject({ billed_micro_toman: "0", status: 502 });
  },
);

test("speech the upstream refuses as invalid: the client's 400 with the upstream's reason, recorded as a 400, nothing charged", async () => {
  const before = await balanceMicro();
  const error = await client.audio.speech.create({ model: "tts-1", voice: "nobody", input: "Hello" }).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(OpenAI.BadRequestError);
  const apiError = error as InstanceType<typeof OpenAI.BadRequestError>;
  expect(apiError.message).toContain("Unsupported voice");
  expect(await balanceMicro()).toBe(before);
  expect(await record(apiError.requestID!)).toMatchObject({ billed_micro_toman: "0", status: 400 });
});

test("chat with no backend to connect to: a 503 no_healthy_backend, recorded as 503, nothing charged", async () => {
  const before = await balanceMicro();
  const error = await client.chat.completions
    .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }] })
    .catch((e: unknown) => e);
  expect(error).toBeInstanceOf(OpenAI.APIError);
  const apiError = error as InstanceType<typeof OpenAI.APIError>;
  expect([apiError.status, apiError.code]).toEqual([503, "no_healthy_backend"]);
  expect(await balanceMicro()).toBe(before);
  expect(await record(apiError.requestID!)).toMatchObject({ billed_micro_toman: "0", status: 503 });
});

test("a completion without a choice: the chat wire delivers it and bills it as the vendor did", async () => {
  const before = await balanceMicro();
  const { data, response } = await client.chat.completions
    .create({ model: "gpt-4o", messages: [{ role: "user", content: "Hi" }], max_tokens: 8 })
    .withResponse();
  expect(data.choices).toEqual([]);
  expect(before - (await balanceMicro())).toBe(NO_CHOICE_MICRO);
  expect(response.headers.get("x-darvaze-cost")).toBe(NO_CHOICE_MICRO.toString());
  expect(await record(response.headers.get("x-request-id")!)).toMatchObject({
    billed_micro_toman: NO_CHOICE_MICRO.toString(),
    status: 200,
  });
});

/** The same request on each translated wire, and how its errors read the code. */
const TRANSLATED = [
  {
    wire: "Responses",
    path: "/v1/responses",
    headers: (key: string) => ({ authorization: `Bearer ${key}` }),
    body: { model: "gpt-4o", input: "Hi", max_output_tokens: 16 },
    errorType: (body: any) => body.error.type,
    type: "api_error",
  },
  {
    wire: "Messages",
    path: "/v1/messages",
    headers: (key: string) => ({ "x-api-key": key, "anthropic-version": "2023-06-01" }),
    body: { model: "gpt-4o", max_tokens: 16, messages: [{ role: "user", content: "Hi" }] },
    errorType: (body: any) => body.error.type,
    type: "api_error",
  },
  {
    wire: "Gemini generateContent",
    path: "/v1beta/models/gpt-4o:generateContent",
    headers: (key: string) => ({ "x-goog-api-key": key }),
    body: { contents: [{ role: "user", parts: [{ text: "Hi" }] }], generationConfig: { maxOutputTokens: 16 } },
    errorType: (body: any) => body.error.status,
    type: "INTERNAL",
  },
];

test.each(TRANSLATED)("$wire: a completion it cannot present is a 502 in its shape, settled unbilled", async (wire) => {
  const before = await balanceMicro();
  const response = await fetch(`${t.url}${wire.path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...wire.headers(key) },
    body: JSON.stringify(wire.body),
  });
  expect(response.status).toBe(502);
  expect(wire.errorType(await response.json())).toBe(wire.type);
  // Told and recorded as what it was: a failure that cost nothing, though the vendor billed it.
  expect(response.headers.get("x-darvaze-cost")).toBe("0");
  expect(await balanceMicro()).toBe(before);
  expect(await record(response.headers.get("x-request-id")!)).toMatchObject({ billed_micro_toman: "0", status: 502 });
});
