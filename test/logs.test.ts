/**
 * Access logs: one JSON line per request, whatever its route (unknown ones too), with its id, key id (never the key), model, backend,
 * status, tokens, cost and timings; no message content unless LOG_MESSAGE_CONTENT is set, and
 * then only in that line. Every line the gateway writes at debug level is checked.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { createLogger } from "../src/log.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";

const MODEL = "gpt-4o-mini";
const MARKER = "zebra-quartz-7731";

interface Logged {
  lines: string[];
  records: () => Record<string, unknown>[];
}

async function gatewayLogging(extra: Record<string, string>): Promise<{ t: TestGateway; logged: Logged }> {
  const lines: string[] = [];
  const t = await startTestGateway({ LOG_LEVEL: "debug", ...extra }, { log: createLogger("debug", (line) => lines.push(line)) });
  return { t, logged: { lines, records: () => lines.map((l) => JSON.parse(l) as Record<string, unknown>) } };
}

async function traffic(t: TestGateway): Promise<{ key: string; keyId: string; requestIds: string[]; completion: string }> {
  const { key, keyId } = await t.fundedKey(1000);
  const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
  const whole = await client.chat.completions
    .create({ model: MODEL, messages: [{ role: "user", content: `say ${MARKER}` }] })
    .withResponse();
  const streamed = await client.chat.completions
    .create({
      model: MODEL,
      messages: [{ role: "user", content: `stream ${MARKER}` }],
      stream: true,
      stream_options: { include_usage: true },
    })
    .withResponse();
  for await (const _ of streamed.data);
  const bad = await fetch(`${t.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "no-such-model", messages: [{ role: "user", content: MARKER }] }),
  });
  expect(bad.status).toBe(404);
  return {
    key,
    keyId,
    requestIds: [
      whole.response.headers.get("x-request-id")!,
      streamed.response.headers.get("x-request-id")!,
      bad.headers.get("x-request-id")!,
    ],
    completion: whole.data.choices[0]!.message.content!,
  };
}

describe("access logs, content off (the default)", () => {
  let t: TestGateway;
  let logged: Logged;
  beforeAll(async () => ({ t, logged } = await gatewayLogging({})), SETUP_MS_MAX);
  afterAll(() => t.stop(), SETUP_MS_MAX);

  test("one line per request with ids, tokens, cost and timings, and no content or key anywhere", async () => {
    const { key, keyId, requestIds, completion } = await traffic(t);
    const requests = logged.records().filter((r) => r.event === "request");
    const [whole, streamed, bad] = requestIds.map((id) => requests.filter((r) => r.requestId === id));
    expect(whole).toHaveLength(1);
    expect(streamed).toHaveLength(1);
    expect(bad).toHaveLength(1);
    for (const line of [whole![0]!, streamed![0]!]) {
      expect(line).toMatchObject({ level: "info", keyId, operation: "chat", model: MODEL, backend: "sim", status: 200 });
      expect(line.inputTokens).toBeGreaterThan(0);
      expect(line.outputTokens).toBeGreaterThan(0);
      expect(BigInt(line.billedMicro as string)).toBeGreaterThan(0n);
      expect(typeof line.durationMs).toBe("number");
      expect(line).not.toHaveProperty("prompt");
      expect(line).not.toHaveProperty("completion");
    }
    expect(whole![0]!.ttftMs).toBeNull();
    expect(streamed![0]!.ttftMs).toBeGreaterThanOrEqual(0);
    expect(bad![0]).toMatchObject({ status: 404, code: "model_not_found", backend: null });
    const all = logged.lines.join("\n");
    expect(all).not.toContain(MARKER);
    expect(all).not.toContain(completion);
    expect(all).not.toContain(key);
  }, 30_000);

  test("every request ends with one access line: count_tokens, HEAD /, unknown routes, models, health; a paid one only its own", async () => {
    const { key } = await t.fundedKey(10);
    const auth = { authorization: `Bearer ${key}`, "content-type": "application/json" };
    const requestLines = () => logged.records().filter((r) => r.event === "request");
    const linesOf = async (path: string, init: RequestInit = {}) => {
      const before = requestLines().length;
      const reply = await fetch(`${t.url}${path}`, init);
      await reply.arrayBuffer();
      const lines = requestLines().slice(before);
      expect(lines).toHaveLength(1);
      return { line: lines[0]!, status: reply.status, requestId: reply.headers.get("x-request-id") };
    };
    const counted = await linesOf("/v1/messages/count_tokens", {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hello" }] }),
    });
    expect(counted.status).toBe(200);
    expect(counted.line).toMatchObject({ operation: "count_tokens", method: "POST", status: 200, requestId: counted.requestId });
    const head = await linesOf("/", { method: "HEAD" });
    expect(head.status).toBe(200); // the reachability probe of Anthropic clients
    expect(head.line).toMatchObject({ level: "info", operation: "http", method: "HEAD", route: "/", status: 200 });
    const unknown = await linesOf("/v1/no/such/route?key=sk-in-the-query");
    expect(unknown.line).toMatchObject({ method: "GET", route: "/v1/no/such/route", status: 404, requestId: unknown.requestId });
    const models = await linesOf("/v1/models", { headers: auth });
    expect(models.line).toMatchObject({ route: "/v1/models", status: 200, requestId: models.requestId });
    expect((await linesOf("/health")).line).toMatchObject({ route: "/health", status: 200 });
    const malformed = await linesOf("/v1/chat/completions", { method: "POST", headers: auth, body: "{" });
    expect(malformed.line).toMatchObject({ operation: "chat", status: 400, requestId: malformed.requestId });
    expect(logged.lines.join("\n")).not.toContain("sk-in-the-query");
  }, 30_000);
});

describe("access logs with LOG_MESSAGE_CONTENT=true", () => {
  let t: TestGateway;
  let logged: Logged;
  beforeAll(async () => ({ t, logged } = await gatewayLogging({ LOG_MESSAGE_CONTENT: "true" })), SETUP_MS_MAX);
  afterAll(() => t.stop(), SETUP_MS_MAX);

  test("the access line carries the prompt and the completion, and still not the key", async () => {
    const { key, requestIds, completion } = await traffic(t);
    const lines = logged.records().filter((r) => r.event === "request" && r.requestId === requestIds[0]);
    expect(lines).toHaveLength(1);
    expect(String(lines[0]!.prompt)).toContain(MARKER);
    expect(lines[0]!.completion).toBe(completion);
    const streamed = logged.records().find((r) => r.event === "request" && r.requestId === requestIds[1]);
    expect(String(streamed!.completion).length).toBeGreaterThan(0);
    // Content appears only in access lines.
    expect(logged.lines.filter((l) => l.includes(MARKER)).every((l) => (JSON.parse(l) as { event: string }).event === "request")).toBe(
      true,
    );
    expect(logged.lines.join("\n")).not.toContain(key);
  }, 30_000);
});
