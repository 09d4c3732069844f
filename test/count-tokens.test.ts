/**
 * Unpriced work is free of charge, not of limits: POST /v1/messages/count_tokens, GET /v1/key
 * and GET /v1/credits need a key, take one of its slots while they run, and have a rate of their
 * own per endpoint (FREE_RPM, 3 here), apart from the key's paid requests. Refusals keep the
 * wire's shape: Anthropic's on count_tokens, OpenAI's on the others.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";

const FREE_RPM = 3;
const COUNT_BODY = JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hello, world!" }] });

let t: TestGateway;

beforeAll(async () => {
  t = await startTestGateway({ FREE_RPM: String(FREE_RPM) });
}, SETUP_MS_MAX);
afterAll(async () => {
  await t?.stop();
}, SETUP_MS_MAX);

const count = (key: string, body: string | ReadableStream<Uint8Array> = COUNT_BODY) =>
  fetch(`${t.url}/v1/messages/count_tokens`, {
    method: "POST",
    headers: { "x-api-key": key, "content-type": "application/json", "anthropic-version": "2023-06-01" },
    body,
  });
const get = (key: string, path: string) => fetch(`${t.url}${path}`, { headers: { authorization: `Bearer ${key}` } });

test("count_tokens needs a key: 401 in Anthropic's shape", async () => {
  const reply = await count("sk-dvz-nope");
  expect(reply.status).toBe(401);
  expect(await reply.json()).toMatchObject({ type: "error", error: { type: "authentication_error" } });
});

test("the heavy counter gets 429 past its rate, in Anthropic's shape; its paid requests and another key's counts go on", async () => {
  const heavy = (await t.fundedKey(1000)).key;
  const other = (await t.fundedKey(1000)).key;
  for (let i = 0; i < FREE_RPM; i++) {
    const reply = await count(heavy);
    expect(reply.status).toBe(200);
    expect(await reply.json()).toEqual({ input_tokens: 10 });
  }
  const refused = await count(heavy);
  expect(refused.status).toBe(429);
  expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
  expect(await refused.json()).toMatchObject({ type: "error", error: { type: "rate_limit_error" } });
  expect((await count(other)).status).toBe(200);
  const chat = await fetch(`${t.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${heavy}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }], max_tokens: 4 }),
  });
  expect(chat.status).toBe(200);
  // Each endpoint has a window of its own: the key's credits are still readable, FREE_RPM times.
  for (let i = 0; i < FREE_RPM; i++) expect((await get(heavy, "/v1/credits")).status).toBe(200);
  const credits = await get(heavy, "/v1/credits");
  expect(credits.status).toBe(429);
  expect(await credits.json()).toMatchObject({ error: { type: "rate_limit_error", code: "rate_limit_exceeded" } });
  for (let i = 0; i < FREE_RPM; i++) expect((await get(heavy, "/v1/key")).status).toBe(200);
  expect((await get(heavy, "/v1/key")).status).toBe(429);
});

test("a count in flight holds one of the key's slots: with concurrency_max 1 another free request gets 429 until it ends", async () => {
  const { key } = await t.fundedKey(1000, { concurrency_max: 1 });
  expect((await get(key, "/v1/models")).status).toBe(200); // the key is known before the count arrives
  // The first count's body arrives only when the test says so: its slot is held meanwhile.
  let finish: () => void = () => {};
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(new TextEncoder().encode(COUNT_BODY.slice(0, 10)));
      finish = () => {
        controller.enqueue(new TextEncoder().encode(COUNT_BODY.slice(10)));
        controller.close();
      };
    },
  });
  const first = count(key, body);
  // Until the count holds the slot, a probe may get in: each endpoint's own window allows FREE_RPM.
  const probes = [() => get(key, "/v1/credits"), () => get(key, "/v1/key"), () => count(key)];
  let refusal: { error: { type: string; message: string } } | null = null;
  for (let i = 0; i < probes.length * FREE_RPM && !refusal; i++) {
    const reply = await probes[i % probes.length]!();
    if (reply.status === 429) refusal = (await reply.json()) as { error: { type: string; message: string } };
    else await reply.arrayBuffer();
  }
  expect(refusal?.error.type).toBe("rate_limit_error");
  expect(refusal?.error.message).toContain("concurrent");
  finish();
  expect((await first).status).toBe(200);
});
