/**
 * The limits of the gateway's shape (DESIGN.md §6): what a metering gateway on Bun must do per
 * request before any work of its own, measured beside Darvaze in the same run.
 *
 *   every request: the JSON body read and parsed; the upstream called with an AbortController, a
 *   120 s timer and the client's abort listener, `redirect: "manual"` and a request id; a whole
 *   reply parsed, its usage priced in bigint and the reply serialised again; a stream parsed
 *   event by event (each `data:` line's JSON read and its text counted) as it is relayed.
 *
 *   MODE=bun     inside Bun.serve
 *   MODE=elysia  inside an Elysia route
 *   MODE=nats2   Bun.serve plus two NATS request/reply hops a request (admit before the upstream
 *                call, settle after it), to a handler on the same connection, as the gateway on
 *                NATS admits and settles through a key actor
 *
 * `GET /stall` answers the longest event-loop stall since the previous call (src/metrics/loop.ts).
 *
 *   MODE=elysia UPSTREAM_URL=http://127.0.0.1:9100 PORT=9201 bun run bench/limit-proxy.ts
 */
import { Elysia } from "elysia";
import { connect } from "nats";
import { startLoopMonitor } from "../src/metrics/loop.ts";

const upstreamUrl = process.env.UPSTREAM_URL ?? "http://127.0.0.1:9100";
const port = Number(process.env.PORT ?? 9201);
const mode = process.env.MODE ?? "bun";
/** The upstream call's bound, as the gateway's UPSTREAM_TIMEOUT_MS. */
const UPSTREAM_TIMEOUT_MS = 120_000;
/** Micro-toman per token, in and out (gpt-4o-mini at 90,000 toman per USD). */
const PRICE_IN = 13_500n;
const PRICE_OUT = 54_000n;
const JSON_HEADERS = { "content-type": "application/json" };

const loop = startLoopMonitor();
const encoder = new TextEncoder();
let spentMicro = 0n;
let ids = 0;

/** The upstream call as a metering gateway makes it: bounded, cancellable, never redirected. */
async function call(path: string, body: unknown, clientSignal: AbortSignal): Promise<{ response: Response; done: () => void }> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), UPSTREAM_TIMEOUT_MS);
  const onAbort = () => controller.abort();
  clientSignal.addEventListener("abort", onAbort, { once: true });
  const done = () => {
    clearTimeout(timer);
    clientSignal.removeEventListener("abort", onAbort);
  };
  try {
    const response = await fetch(upstreamUrl + path, {
      method: "POST",
      redirect: "manual",
      signal: controller.signal,
      body: JSON.stringify(body),
      headers: { "content-type": "application/json", authorization: "Bearer bench", "x-request-id": `req_${++ids}` },
    });
    return { response, done };
  } catch (error) {
    done();
    throw error;
  }
}

async function whole(path: string, body: unknown, clientSignal: AbortSignal): Promise<Response> {
  const { response, done } = await call(path, body, clientSignal);
  try {
    const reply = JSON.parse(await response.text()) as { usage?: { prompt_tokens: number; completion_tokens: number } };
    if (reply.usage) spentMicro += BigInt(reply.usage.prompt_tokens) * PRICE_IN + BigInt(reply.usage.completion_tokens) * PRICE_OUT;
    return new Response(JSON.stringify(reply), { status: response.status, headers: JSON_HEADERS });
  } finally {
    done();
  }
}

/** A stream relayed as it comes, every `data:` line parsed and its text counted on the way. */
async function streamed(path: string, body: unknown, clientSignal: AbortSignal): Promise<Response> {
  const { response, done } = await call(path, body, clientSignal);
  const decoder = new TextDecoder();
  let rest = "";
  let chars = 0;
  const metered = new TransformStream<Uint8Array, Uint8Array>({
    transform(piece, out) {
      const lines = (rest + decoder.decode(piece, { stream: true })).split("\n");
      rest = lines.pop() ?? "";
      let batch = "";
      for (const line of lines) {
        if (line.startsWith("data: ") && line !== "data: [DONE]") {
          const event = JSON.parse(line.slice(6)) as {
            choices?: { delta?: { content?: string } }[];
            usage?: { completion_tokens: number };
          };
          chars += event.choices?.[0]?.delta?.content?.length ?? 0;
          if (event.usage) spentMicro += BigInt(event.usage.completion_tokens) * PRICE_OUT;
        }
        batch += `${line}\n`;
      }
      if (batch !== "") out.enqueue(encoder.encode(batch));
    },
    flush(out) {
      if (rest !== "") out.enqueue(encoder.encode(rest));
      if (chars < 0) console.log(chars); // read, so the count is not optimised away
      done();
    },
  });
  return new Response(response.body!.pipeThrough(metered), {
    status: response.status,
    headers: { "content-type": "text/event-stream" },
  });
}

function meter(path: string, body: { stream?: boolean }, signal: AbortSignal): Promise<Response> {
  return body.stream === true ? streamed(path, body, signal) : whole(path, body, signal);
}

const stall = () => Response.json(loop.read());

/** In Bun.serve: a GET reads the stall monitor, anything else is a request `handle` meters. */
function serveBun(handle: typeof meter): void {
  Bun.serve({
    port,
    hostname: "127.0.0.1",
    idleTimeout: 0,
    async fetch(request) {
      if (request.method === "GET") return stall();
      return handle(new URL(request.url).pathname, (await request.json()) as { stream?: boolean }, request.signal);
    },
  });
}

if (mode === "bun") {
  serveBun(meter);
} else if (mode === "elysia") {
  new Elysia()
    .get("/stall", stall)
    .post("/v1/chat/completions", ({ body, request }) => meter("/v1/chat/completions", body as { stream?: boolean }, request.signal))
    .listen({ port, hostname: "127.0.0.1", idleTimeout: 0 });
} else if (mode === "nats2") {
  const nc = await connect({ servers: process.env.NATS_URL ?? "127.0.0.1:4222" });
  const subject = `bench.limit.${process.pid}`;
  const sub = nc.subscribe(`${subject}.>`, { queue: "limit" });
  void (async () => {
    for await (const message of sub) message.respond(encoder.encode(JSON.stringify({ ok: true, bytes: message.data.length })));
  })();
  serveBun(async (path, body, signal) => {
    await nc.request(`${subject}.admit`, encoder.encode(JSON.stringify({ key: "k", model: "m", reserve: "1000" })), { timeout: 10_000 });
    const reply = await meter(path, body, signal);
    await nc.request(`${subject}.settle`, encoder.encode(JSON.stringify({ key: "k", cost: spentMicro.toString() })), { timeout: 10_000 });
    return reply;
  });
} else {
  throw new Error(`MODE must be bun, elysia or nats2, not ${mode}`);
}

console.log(`limit proxy (${mode}, metering) listening on http://127.0.0.1:${port} -> ${upstreamUrl}`);
process.once("SIGTERM", () => process.exit(0));
