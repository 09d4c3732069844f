/**
 * The pool's retry rule, read from each failure's own `retryable`: a reply that says nothing
 * against the request (malformed) goes to another backend; a refusal of the request itself (a
 * 400) is returned at once, never sent on. A whole reply of any operation (sendWhole) that
 * breaks off goes to another backend too.
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

/** A stub whose reply breaks off: its headers promise 1,000 bytes, then the socket closes after 25. */
let breakingHits = 0;
const breakingServer = Bun.listen({
  hostname: "127.0.0.1",
  port: 0,
  socket: {
    data(socket) {
      breakingHits++;
      socket.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{"object":"list","data":[');
      socket.end();
    },
  },
});
const breaking: Stub = {
  get hits() {
    return breakingHits;
  },
  port: breakingServer.port,
  stop: () => breakingServer.stop(true),
};
const vectors = upstream(() =>
  Response.json({ object: "list", data: [{ object: "embedding", index: 0, embedding: [0.5] }], usage: { prompt_tokens: 1 } }),
);

afterAll(() => {
  for (const stub of [breaking, vectors]) stub.stop();
});

/** A pool whose calls go first to the stalest backend (see poolOf), read whole within 1 MiB. */
function wholePool(backends: BackendConfig[]) {
  let nowMs = 0;
  const pool = new PoolActor("m", backends, { upstreamTimeoutMs: 10_000, nowMs: () => nowMs });
  return (i: number) => {
    nowMs += EXPLORE_AFTER_MS + 1;
    return pool.sendWhole(
      {
        requestId: `req_${i}`,
        build: (backend) => backend.adapter.embeddings?.buildEmbeddingsRequest({ body: { input: ["x"] }, upstreamModel: "m" }),
      },
      1024 * 1024,
    );
  };
}

test("a whole reply that breaks off is read again from another backend: every call is answered", async () => {
  const send = wholePool([config("breaking", breaking), config("vectors", vectors)]);
  for (let i = 0; i < 8; i++) expect((await send(i)).kind).toBe("whole");
  expect(breaking.hits).toBeGreaterThan(0);
});

test("with no other backend, a reply that breaks off is a retryable 502 that says so", async () => {
  const send = wholePool([config("breaking", breaking)]);
  const outcome = await send(0);
  expect(outcome.kind).toBe("failed");
  if (outcome.kind === "failed") expect(outcome.failure).toMatchObject({ code: "upstream_error", retryable: true });
  if (outcome.kind === "failed") expect(outcome.failure.message).toContain("broke off");
});
