/**
 * Deeply nested JSON is refused before it is parsed: 100,000 levels in a tool's parameters get a
 * 400 in each wire's own error shape (OpenAI's on chat, responses and embeddings; Anthropic's on
 * /v1/messages; the OpenAI body with a status header over NATS), while another key's request sent
 * at the same time is served. How fast the refusal comes is measured by bench/deep-json.ts, not here.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { connect, type NatsConnection } from "nats";
import { InternalClient, InternalError } from "../src/internal/client.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { describeWith } from "./services.ts";

const LEVELS = 100_000;
const NESTED = `${"[".repeat(LEVELS)}${"]".repeat(LEVELS)}`;
const HELLO = [{ role: "user", content: "Hello, world!" }];

/** A body whose one field is `NESTED`, spliced in as text (JSON.stringify could not write it). */
function deepBody(template: Record<string, unknown>): string {
  return JSON.stringify(template).replace('"@NESTED@"', NESTED);
}

const DEEP = {
  chat: deepBody({
    model: "gpt-4o-mini",
    messages: HELLO,
    tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: "@NESTED@" } } }],
  }),
  responses: deepBody({
    model: "gpt-4o-mini",
    input: "Hello",
    tools: [{ type: "function", name: "f", parameters: { type: "object", properties: "@NESTED@" } }],
  }),
  messages: deepBody({
    model: "gpt-4o-mini",
    max_tokens: 16,
    messages: HELLO,
    tools: [{ name: "f", input_schema: { type: "object", properties: "@NESTED@" } }],
  }),
  embeddings: deepBody({ model: "text-embedding-3-small", input: "@NESTED@" }),
};

let t: TestGateway;
let attacker: string;
let other: string;

beforeAll(async () => {
  t = await startTestGateway();
  attacker = (await t.fundedKey(1000)).key;
  other = (await t.fundedKey(1000)).key;
}, SETUP_MS_MAX);
afterAll(async () => {
  await t?.stop();
}, SETUP_MS_MAX);

const post = (path: string, key: string, body: string) =>
  fetch(`${t.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body });

/** Another key's ordinary chat request. */
const served = () => post("/v1/chat/completions", other, JSON.stringify({ model: "gpt-4o-mini", messages: HELLO, max_tokens: 4 }));

describe("100,000 levels of nesting over HTTP", () => {
  test.each([
    ["/v1/chat/completions", DEEP.chat],
    ["/v1/responses", DEEP.responses],
    ["/v1/embeddings", DEEP.embeddings],
  ])("%s: 400 invalid_request in OpenAI's shape, and another key is served meanwhile", async (path, body) => {
    const [deep, beside] = await Promise.all([post(path, attacker, body), served()]);
    expect(deep.status).toBe(400);
    const error = (await deep.json()) as { error: Record<string, unknown> };
    expect(error.error).toMatchObject({ type: "invalid_request_error", code: "invalid_request" });
    expect(String(error.error.message)).toContain("deeper than the limit of 128 levels");
    expect(beside.status).toBe(200);
    expect(((await beside.json()) as { object: string }).object).toBe("chat.completion");
  });

  test("/v1/messages: 400 in Anthropic's shape, and another key is served meanwhile", async () => {
    const [deep, beside] = await Promise.all([post("/v1/messages", attacker, DEEP.messages), served()]);
    expect(deep.status).toBe(400);
    const error = (await deep.json()) as Record<string, unknown>;
    expect(error).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
    expect(beside.status).toBe(200);
  });

  test("a body at the limit is parsed as usual (the bound is not one less)", async () => {
    // Body, tools array, tool, function, parameters: 5 levels, then arrays up to 128 in all.
    const atLimit = deepBody({
      model: "gpt-4o-mini",
      messages: HELLO,
      max_tokens: 4,
      tools: [{ type: "function", function: { name: "f", parameters: { type: "object", default: "@NESTED@" } } }],
    }).replace(NESTED, `${"[".repeat(128 - 5)}${"]".repeat(128 - 5)}`);
    const reply = await post("/v1/chat/completions", attacker, atLimit);
    expect(reply.status).toBe(200);
  });
});

describeWith(["nats"], "100,000 levels of nesting over NATS", (it) => {
  let nc: NatsConnection;
  let prefix: string;
  beforeAll(async () => {
    nc = await connect({ servers: process.env.NATS_URL! });
    prefix = t.gw.deps.env.DARVAZE_SUBJECT_PREFIX;
  }, SETUP_MS_MAX);
  afterAll(async () => {
    await nc?.drain();
  });

  for (const [operation, body] of [
    ["chat.completions", DEEP.chat],
    ["embeddings", DEEP.embeddings],
  ] as const) {
    it(`${operation}: 400 invalid_request with the OpenAI body, and another key is served meanwhile`, async () => {
      const deep = new InternalClient(nc, { apiKey: attacker, prefix });
      const beside = new InternalClient(nc, { apiKey: other, prefix });
      const [refused, answer] = await Promise.all([
        deep.request(operation, new TextEncoder().encode(body)).catch((error: unknown) => error),
        beside.request("chat.completions", { model: "gpt-4o-mini", messages: HELLO, max_tokens: 4 }),
      ]);
      expect(refused).toBeInstanceOf(InternalError);
      const { status, body: error } = refused as InternalError;
      expect(status).toBe(400);
      expect(error).toMatchObject({ error: { type: "invalid_request_error", code: "invalid_request" } });
      expect(answer.status).toBe(200);
    });
  }
});
