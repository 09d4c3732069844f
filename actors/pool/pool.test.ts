/**
 * The pool's retry rule, read from each failure's own `retryable`: a reply that says nothing
 * against the request (malformed) goes to another backend; a refusal of the request itself (a
 * 400) is returned at once, never sent on.
 */
import { afterAll, expect, test } from "bun:test";
import type { BackendConfig } from "../../src/config.ts";
import { EXPLORE_AFTER_MS, PoolActor, type ChatOutcome } from "./pool.ts";

const COMPLETION = JSON.stringify({
  id: "chatcmpl-1",
  object: "chat.completion",
  created: 0,
  model: "m",
  choices: [{ index: 0, message: { role: "assistant", content: "Hi" }, finish_reason: "stop" }],
  usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
});

interface Stub {
  hits: number;
  port: number;
  stop(): void;
}

/** A stub upstream that answers every request the same way, and counts them. */
function upstream(reply: () => Response): Stub {
  let hits = 0;
  const server = Bun.serve({
    port: 0,
    fetch: (): Response => {
      hits++;
      return reply();
    },
  });
  return {
    get hits() {
      return hits;
    },
    port: server.port!,
    stop: () => void server.stop(true),
  };
}

const good = upstream(() => new Response(COMPLETION, { headers: { "content-type": "application/json" } }));
const malformed = upstream(() => new Response("{not json", { headers: { "content-type": "application/json" } }));
const refusing = upstream(() => Response.json({ error: { message: "Bad field.", type: "invalid_request_error" } }, { status: 400 }));

afterAll(() => {
  for (const stub of [good, malformed, refusing]) stub.stop();
});

const config = (name: string, stub: Stub): BackendConfig => ({
  name,
  kind: "openai",
  url: `http://127.0.0.1:${stub.port}/v1`,
  region: "abroad",
  weight: 1,
  concurrency_max: 8,
});

/**
 * A pool on a clock that moves past EXPLORE_AFTER_MS before each call, so that each call goes
 * first to the stalest backend, the first of the list on a tie: the failing one.
 */
function poolOf(backends: BackendConfig[]) {
  let nowMs = 0;
  const pool = new PoolActor("m", backends, { upstreamTimeoutMs: 10_000, nowMs: () => nowMs });
  return (i: number): Promise<ChatOutcome> => {
    nowMs += EXPLORE_AFTER_MS + 1;
    return call(pool, i);
  };
}

const call = (pool: PoolActor, i: number): Promise<ChatOutcome> =>
  pool.chat({
    body: { model: "m", messages: [{ role: "user", content: "Hello" }] },
    stream: false,
    maxTokens: 16,
    requestId: `req_${i}`,
    created: 0,
  });

test("a malformed reply (retryable) is retried on the other backend: every call is answered", async () => {
  const send = poolOf([config("malformed", malformed), config("good", good)]);
  const goodBefore = good.hits;
  for (let i = 0; i < 8; i++) expect((await send(i)).kind).toBe("json");
  expect(good.hits - goodBefore).toBe(8);
  expect(malformed.hits).toBeGreaterThan(0);
});

test("a refusal of the request itself (not retryable) is returned at once, never sent to another backend", async () => {
  const send = poolOf([config("refusing", refusing), config("good", good)]);
  let refused = 0;
  for (let i = 0; i < 8; i++) {
    const goodBefore = good.hits;
    const outcome = await send(i);
    if (outcome.kind !== "failed") continue;
    refused++;
    expect(outcome.failure).toMatchObject({ code: "invalid_request", retryable: false });
    expect(good.hits).toBe(goodBefore);
  }
  expect(refused).toBeGreaterThan(0);
  expect(refusing.hits).toBe(refused);
});
