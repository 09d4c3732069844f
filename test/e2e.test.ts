/**
 * The walking skeleton end to end, through the official `openai` client: a key created through
 * the admin API, the catalog, chat (plain and streamed), refusals, and exact charges checked
 * against micro-toman constants computed by hand and against the simulator's own log.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import OpenAI from "openai";
import { simCompletion, simPromptText } from "../src/sim/text.ts";
import { ADMIN_TOKEN, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { until } from "./until.ts";

/** The published table: id, context window, toman per 1M input tokens, per 1M output tokens. */
const PUBLISHED: [string, number, number, number][] = [
  ["claude-3-5-haiku", 200000, 72000, 360000],
  ["claude-opus-4", 200000, 1350000, 6750000],
  ["claude-sonnet-4", 200000, 270000, 1350000],
  ["claude-3-7-sonnet", 200000, 270000, 1350000],
  ["catalog-05", 256000, 27000, 81000],
  ["command-a", 256000, 225000, 900000],
  ["command-r-plus", 128000, 225000, 900000],
  ["deepseek-r1", 164000, 49500, 197100],
  ["deepseek-v3", 164000, 24300, 99000],
  ["gemini-2.0-flash", 1000000, 9000, 36000],
  ["gemini-2.5-flash", 1000000, 27000, 225000],
  ["gemini-2.5-pro", 1000000, 112500, 900000],
  ["glm-4.5", 128000, 54000, 198000],
  ["gpt-4.1", 1000000, 180000, 720000],
  ["gpt-4.1-mini", 1000000, 36000, 144000],
  ["gpt-4.1-nano", 1000000, 9000, 36000],
  ["gpt-4o", 128000, 225000, 900000],
  ["gpt-4o-mini", 128000, 13500, 54000],
  ["grok-3", 131000, 270000, 1350000],
  ["grok-3-mini", 131000, 27000, 45000],
  ["kimi-k2", 131000, 49500, 198000],
  ["llama-3.3-70b-instruct", 131000, 10800, 27000],
  ["catalog-23", 128000, 9000, 22500],
  ["llama-4-maverick", 1000000, 18000, 76500],
  ["llama-4-scout", 10000000, 7200, 27000],
  ["minimax-m1", 1000000, 27000, 148500],
  ["mistral-large", 128000, 180000, 540000],
  ["mistral-small", 128000, 9000, 27000],
  ["nova-lite", 300000, 5400, 21600],
  ["nova-pro", 300000, 72000, 288000],
  ["o3", 200000, 180000, 720000],
  ["o4-mini", 200000, 99000, 396000],
  ["phi-4", 16000, 6300, 12600],
  ["catalog-34", 131000, 31500, 36000],
  ["qwen3-235b-a22b", 131000, 18000, 54000],
  ["sonar", 127000, 90000, 90000],
  ["catalog-37", 200000, 270000, 1350000],
];

const HELLO = [{ role: "user" as const, content: "Hello, world!" }];
// Simulator tokens: "Hello" "," "world" "!" = 4; prompt = (3 + 4) + 3 = 10.
const HELLO_PROMPT_TOKENS = 10;
// gpt-4o-mini: 13,500 toman per 1M input tokens, 54,000 per 1M output tokens, so one token
// costs 13,500 / 54,000 micro-toman. 10 in + 10 out = 135,000 + 540,000.
const HELLO_10_COST_MICRO = 675_000n;

let t: TestGateway;
let key: string;
let accountId: string;
let client: OpenAI;

beforeAll(async () => {
  t = await startTestGateway({ BODY_BYTES_MAX: "65536" });
  ({ key, accountId } = await t.fundedKey(1000));
  client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
}, SETUP_MS_MAX);
afterAll(async () => t.stop(), SETUP_MS_MAX);

async function balanceMicro(apiKey = key): Promise<bigint> {
  const response = await fetch(`${t.url}/v1/credits`, { headers: { authorization: `Bearer ${apiKey}` } });
  const body = (await response.json()) as { balance_micro_toman: string };
  return BigInt(body.balance_micro_toman);
}

describe("catalog", () => {
  test("models.list returns every published model with its window and toman prices", async () => {
    const page = await client.models.list();
    const byId = new Map(
      page.data.map((m) => [
        m.id,
        m as unknown as { context_window: number; pricing: { input: number; output: number }; vendor: string; in_country: boolean },
      ]),
    );
    expect(PUBLISHED).toHaveLength(37);
    for (const [id, window, input, output] of PUBLISHED) {
      const model = byId.get(id);
      expect(model, id).toBeDefined();
      expect([model!.context_window, model!.pricing.input, model!.pricing.output]).toEqual([window, input, output]);
    }
    for (const other of ["text-embedding-3-small", "dall-e-3", "tts-1", "whisper-1"]) expect(byId.has(other)).toBe(true);
    expect(byId.get("llama-4-scout")!.in_country).toBe(true);
    expect(byId.get("gpt-4o")!.in_country).toBe(false);
  });

  test("models.retrieve returns one model; an unknown id is NotFoundError", async () => {
    const model = (await client.models.retrieve("claude-3-5-haiku")) as unknown as { id: string; owned_by: string; vendor: string };
    expect([model.id, model.owned_by, model.vendor]).toEqual(["claude-3-5-haiku", "anthropic", "anthropic"]);
    const error = await client.models.retrieve("no-such-model").catch((e) => e);
    expect(error).toBeInstanceOf(OpenAI.NotFoundError);
  });
});

describe("chat completions", () => {
  test("create returns the simulator's text and charges exactly usage × price", async () => {
    const before = await balanceMicro();
    const { data, response } = await client.chat.completions
      .create({ model: "gpt-4o-mini", messages: HELLO, max_tokens: 10 })
      .withResponse();
    const expected = simCompletion({ seed: 1, promptText: simPromptText(HELLO), tokens: 10 }).join("");
    expect(data.choices[0]!.message.content).toBe(expected);
    expect(data.usage).toMatchObject({ prompt_tokens: HELLO_PROMPT_TOKENS, completion_tokens: 10 });
    expect(before - (await balanceMicro())).toBe(HELLO_10_COST_MICRO);

    const requestId = response.headers.get("x-request-id")!;
    expect(requestId).toMatch(/^req_/);
    const [simEntry] = t.sim!.log.byRequestId(requestId);
    const account = await t.admin("GET", `/admin/accounts/${accountId}`);
    const record = account.body.recent_usage.find((u: { request_id: string }) => u.request_id === requestId);
    expect(record).toMatchObject({
      input_units: String(simEntry!.promptTokens),
      output_units: String(simEntry!.completionTokens),
      billed_micro_toman: HELLO_10_COST_MICRO.toString(),
      price_version: 1,
      status: 200,
    });
  });

  test("a stream yields the same text and a usage chunk with empty choices", async () => {
    const before = await balanceMicro();
    const stream = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages: HELLO,
      max_tokens: 10,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    const usageChunks = [];
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? "";
      if (chunk.usage) usageChunks.push(chunk);
    }
    expect(text).toBe(simCompletion({ seed: 1, promptText: simPromptText(HELLO), tokens: 10 }).join(""));
    expect(usageChunks).toHaveLength(1);
    expect(usageChunks[0]!.choices).toEqual([]);
    expect(usageChunks[0]!.usage).toMatchObject({ prompt_tokens: 10, completion_tokens: 10 });
    expect(before - (await balanceMicro())).toBe(HELLO_10_COST_MICRO);
  });

  test("a stream without include_usage has no usage chunk but is still charged", async () => {
    const before = await balanceMicro();
    const response = await fetch(`${t.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: HELLO, max_tokens: 10, stream: true }),
    });
    expect(response.headers.get("content-type")).toStartWith("text/event-stream");
    expect(response.headers.get("x-request-id")).toMatch(/^req_/);
    const body = await response.text();
    const frames = body.split("\n\n").filter(Boolean);
    expect(frames.at(-1)).toBe("data: [DONE]");
    expect(frames.some((f) => f.includes('"choices":[]'))).toBe(false);
    expect(before - (await balanceMicro())).toBe(HELLO_10_COST_MICRO);
  });

  test("an unknown model is NotFoundError", async () => {
    const error = await client.chat.completions.create({ model: "gpt-9", messages: HELLO }).catch((e) => e);
    expect(error).toBeInstanceOf(OpenAI.NotFoundError);
    expect(error.code).toBe("model_not_found");
    expect(error.param).toBe("model");
  });

  test.each([
    [{ messages: HELLO }, "model"],
    [{ model: "gpt-4o-mini" }, "messages"],
    [{ model: "gpt-4o-mini", messages: [] }, "messages"],
    [{ model: "gpt-4o-mini", messages: [{ role: "robot", content: "hi" }] }, "messages.0.role"],
    [{ model: "gpt-4o-mini", messages: HELLO, max_tokens: -1 }, "max_tokens"],
    [{ model: "gpt-4o-mini", messages: HELLO, stream: "yes" }, "stream"],
    [{ model: 42, messages: HELLO }, "model"],
  ])("bad body %j is BadRequestError with param %s", async (body, param) => {
    const error = await client.chat.completions.create(body as never).catch((e) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect(error.param).toBe(param);
    expect(error.type).toBe("invalid_request_error");
  });

  test("a max_tokens above the model's output limit: OpenAI's 400 invalid_value, nothing sent upstream", async () => {
    for (const field of ["max_tokens", "max_completion_tokens"] as const) {
      const error = await client.chat.completions.create({ model: "gpt-4o-mini", messages: HELLO, [field]: 100_000 }).catch((e) => e);
      expect(error).toBeInstanceOf(OpenAI.BadRequestError);
      expect(error.error).toEqual({
        message: `${field} is too large: 100000. This model supports at most 16384 completion tokens, whereas you provided 100000.`,
        type: "invalid_request_error",
        param: field,
        code: "invalid_value",
      });
      expect(t.sim!.log.byRequestId(error.requestID)).toHaveLength(0);
    }
  });

  test("a prompt and output budget over the context window is context_length_exceeded", async () => {
    const error = await client.chat.completions.create({ model: "phi-4", messages: HELLO, max_tokens: 16_000 }).catch((e) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect(error.code).toBe("context_length_exceeded");
  });

  test("malformed JSON is 400 invalid_json; a body over the limit is 413", async () => {
    const post = (body: string) =>
      fetch(`${t.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body,
      });
    const malformed = await post("{not json");
    expect(malformed.status).toBe(400);
    expect(((await malformed.json()) as { error: { code: string } }).error.code).toBe("invalid_json");
    const large = await post(JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "x".repeat(70_000) }] }));
    expect(large.status).toBe(413);
    const body = (await large.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("request_too_large");
    expect(body.error.message).toContain("65536");
  });

  test("a body shaped like one of the gateway's failures is a request like any other: 400 invalid_request", async () => {
    for (const path of ["/v1/chat/completions", "/v1/embeddings"]) {
      const response = await fetch(`${t.url}${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ code: "not_found", message: "echo me" }),
      });
      expect(response.status).toBe(400);
      const body = (await response.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe("invalid_request");
      expect(body.error.message).not.toContain("echo me");
    }
  });

  test("a request the wallet cannot cover is 402 insufficient_quota, not retried", async () => {
    const poor = await t.fundedKey("0.5");
    const error = await new OpenAI({ baseURL: `${t.url}/v1`, apiKey: poor.key, maxRetries: 0 }).chat.completions
      .create({ model: "gpt-4o-mini", messages: HELLO, max_tokens: 1000 })
      .catch((e) => e);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect(error.status).toBe(402);
    expect(error.code).toBe("insufficient_quota");
    expect(error.headers.get("x-should-retry")).toBe("false");
    expect(error.message).toContain("0.5 toman is available");
    expect(await balanceMicro(poor.key)).toBe(500_000n);
  });

  test("a node behind on recording usage refuses new requests with 503 and a retry hint, then serves again", async () => {
    const writer = t.gw.deps.writer;
    // As if a batch's worth of usage were unwritten and the database did not catch up in time.
    Object.defineProperty(writer, "hasRoom", { configurable: true, get: () => false });
    writer.room = () => Promise.resolve(false);
    try {
      const error = await client.chat.completions
        .create({ model: "gpt-4o-mini", messages: HELLO, max_tokens: 10 }, { maxRetries: 0 })
        .catch((e) => e);
      expect(error).toBeInstanceOf(OpenAI.APIError);
      expect(error.status).toBe(503);
      expect(error.code).toBe("service_unavailable");
      expect(error.headers.get("retry-after")).toBe("1");
      expect(error.message).toContain("behind on recording usage");
    } finally {
      delete (writer as { hasRoom?: boolean }).hasRoom;
      delete (writer as { room?: unknown }).room;
    }
    const served = await client.chat.completions.create({ model: "gpt-4o-mini", messages: HELLO, max_tokens: 10 });
    expect(served.choices[0]?.message.content).toBeTruthy();
  });
});

describe("keys and access", () => {
  test("a revoked key raises AuthenticationError", async () => {
    const doomed = await t.fundedKey(10);
    const doomedClient = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: doomed.key, maxRetries: 0 });
    await doomedClient.chat.completions.create({ model: "gpt-4o-mini", messages: HELLO, max_tokens: 1 });
    expect((await t.admin("DELETE", `/admin/keys/${doomed.keyId}`)).status).toBe(200);
    const error = await doomedClient.chat.completions.create({ model: "gpt-4o-mini", messages: HELLO }).catch((e) => e);
    expect(error).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(error.message).toContain("revoked");
  });

  test("a key revoked behind this node's back (no event) is refused within about a second", async () => {
    const { key: quiet, keyId } = await t.fundedKey(10);
    const models = () => fetch(`${t.url}/v1/models`, { headers: { authorization: `Bearer ${quiet}` } });
    expect((await models()).status).toBe(200);
    await t.gw.deps.db.rows(sql`UPDATE api_keys SET revoked_at = now(), updated_at = now() WHERE id = ${keyId}`);
    const started = Date.now();
    await until(async () => (await models()).status !== 200, { what: "the revoked key refused", pollMs: 50 });
    expect((await models()).status).toBe(401);
    expect(Date.now() - started).toBeLessThan(2_500);
  });

  test.each([
    [undefined, "Missing API key"],
    ["Bearer sk-dvz-short", "Malformed API key"],
    [`Bearer sk-dvz-${"A".repeat(40)}`, "Incorrect API key"],
  ])("authorization %p is 401 (%s)", async (authorization, message) => {
    const response = await fetch(`${t.url}/v1/models`, { headers: authorization ? { authorization } : {} });
    expect(response.status).toBe(401);
    expect(response.headers.get("x-request-id")).toMatch(/^req_/);
    const body = (await response.json()) as { error: { message: string; code: string } };
    expect(body.error.code).toBe("invalid_api_key");
    expect(body.error.message).toContain(message);
  });

  test("a browser Origin is refused with 403 saying keys are for servers", async () => {
    const response = await fetch(`${t.url}/v1/models`, { headers: { authorization: `Bearer ${key}`, origin: "https://example.com" } });
    expect(response.status).toBe(403);
    const body = (await response.json()) as { error: { message: string; code: string } };
    expect(body.error.code).toBe("origin_not_allowed");
    expect(body.error.message).toContain("servers only");
  });

  test("GET /v1/key names the key, its limits and usage", async () => {
    const fresh = await t.fundedKey(10, { concurrency_max: 3, rpm: 60 });
    await new OpenAI({ baseURL: `${t.url}/v1`, apiKey: fresh.key }).chat.completions.create({
      model: "gpt-4o-mini",
      messages: HELLO,
      max_tokens: 10,
    });
    const response = await fetch(`${t.url}/v1/key`, { headers: { authorization: `Bearer ${fresh.key}` } });
    const body = (await response.json()) as Record<string, any>;
    expect(body).toMatchObject({
      id: fresh.keyId,
      name: "test key",
      limits: { concurrency_max: 3, rpm: 60, tpm: null },
      usage: { requests: 1, input_tokens: 10, output_tokens: 10, spent_micro_toman: HELLO_10_COST_MICRO.toString() },
    });
    expect(body.display).toEndWith(fresh.key.slice(-4));
    expect(JSON.stringify(body)).not.toContain(fresh.key);
  });

  test("an unknown route is 404 in the OpenAI error shape with a request id", async () => {
    const response = await fetch(`${t.url}/v1/nothing-here`);
    expect(response.status).toBe(404);
    expect(response.headers.get("x-request-id")).toMatch(/^req_/);
    expect(((await response.json()) as { error: { type: string } }).error.type).toBe("invalid_request_error");
  });
});

describe("admin", () => {
  test("a key is refused until the wallet is funded; top-ups are idempotent by reference", async () => {
    const account = await t.admin("POST", "/admin/accounts", { name: "new customer" });
    expect(account.status).toBe(201);
    const id = account.body.id;
    const early = await t.admin("POST", `/admin/accounts/${id}/keys`, { name: "too early" });
    expect([early.status, early.body.error.code]).toEqual([409, "wallet_not_funded"]);
    const first = await t.admin("POST", `/admin/accounts/${id}/topups`, { amount_toman: "1500.25", reference: "bank-1" });
    expect([first.status, first.body.balance_micro_toman]).toEqual([201, "1500250000"]);
    const replay = await t.admin("POST", `/admin/accounts/${id}/topups`, { amount_toman: "1500.25", reference: "bank-1" });
    expect([replay.status, replay.body.credited, replay.body.balance_micro_toman]).toEqual([200, false, "1500250000"]);
    const conflict = await t.admin("POST", `/admin/accounts/${id}/topups`, { amount_toman: 99, reference: "bank-1" });
    expect([conflict.status, conflict.body.error.code]).toEqual([409, "idempotency_conflict"]);
    const created = await t.admin("POST", `/admin/accounts/${id}/keys`, { name: "now" });
    expect(created.status).toBe(201);
    expect(created.body.key).toMatch(/^sk-dvz-[0-9A-Za-z]{40}$/);
    const shown = await t.admin("GET", `/admin/accounts/${id}`);
    expect(JSON.stringify(shown.body)).not.toContain(created.body.key);
    expect(shown.body.keys[0].display).toBe(`sk-dvz-…${created.body.key.slice(-4)}`);
    expect(shown.body.keys_more).toBe(false);
    const missing = await t.admin("POST", "/admin/accounts/acct_missing/keys", { name: "nobody's" });
    expect([missing.status, missing.body.error.code]).toEqual([404, "not_found"]);
  });

  test("the admin API needs the admin token", async () => {
    const response = await fetch(`${t.url}/admin/accounts`, { method: "POST", headers: { authorization: `Bearer ${key}` }, body: "{}" });
    expect(response.status).toBe(401);
  });

  test.each([
    [{ amount_toman: -5, reference: "r" }, "amount_toman"],
    [{ amount_toman: "1.1234567", reference: "r" }, "amount_toman"],
    [{ amount_toman: 5 }, "reference"],
  ])("top-up body %j is 400 naming %s", async (body, param) => {
    const response = await t.admin("POST", `/admin/accounts/${accountId}/topups`, body);
    expect([response.status, response.body.error.param]).toEqual([400, param]);
  });
});

describe("admin key limits", () => {
  test.each([[{}], [{ rpmx: 5 }], [{ concurrency_max: 0 }]])("PATCH /admin/keys/:id with %j is 400", async (body) => {
    const { keyId } = await t.fundedKey(1);
    const response = await t.admin("PATCH", `/admin/keys/${keyId}`, body);
    expect([response.status, response.body.error.type]).toEqual([400, "invalid_request_error"]);
  });

  test("PATCH changes the limits the key actor enforces", async () => {
    const { keyId, key: apiKey } = await t.fundedKey(1);
    const response = await t.admin("PATCH", `/admin/keys/${keyId}`, { concurrency_max: 7, rpm: null });
    expect(response.body).toMatchObject({ concurrency_max: 7, rpm: null });
    const info = await fetch(`${t.url}/v1/key`, { headers: { authorization: `Bearer ${apiKey}` } });
    expect(((await info.json()) as { limits: unknown }).limits).toEqual({ concurrency_max: 7, rpm: null, tpm: null });
  });
});

describe("metrics", () => {
  test("GET /metrics counts requests, tokens and cost per model, with no key in it; it needs the admin token", async () => {
    for (let i = 0; i < 2; i++) await client.chat.completions.create({ model: "phi-4", messages: HELLO, max_tokens: 10 });
    expect((await fetch(`${t.url}/metrics`)).status).toBe(401);
    const response = await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    expect(response.headers.get("content-type")).toContain("text/plain");
    const text = await response.text();
    expect(text).toContain('darvaze_requests_total{operation="chat",model="phi-4",backend="sim",status="200"} 2');
    expect(text).toContain('darvaze_tokens_total{model="phi-4",direction="input"} 20');
    expect(text).toContain('darvaze_tokens_total{model="phi-4",direction="output"} 20');
    // phi-4: 6,300 and 12,600 toman per 1M tokens; 2 × (10 × 6,300 + 10 × 12,600)
    expect(text).toContain('darvaze_cost_micro_toman_total{model="phi-4"} 378000');
    expect(text).toContain("darvaze_request_duration_seconds_bucket");
    expect(text).toContain("darvaze_usage_backlog_records");
    expect(text).not.toContain(key);
    expect(text).not.toContain("Hello");
  });
});
