/**
 * A client that leaves stops the upstream, on every wire and every backend kind: the simulator
 * sees its connection close within STREAM_CUT_MS_MAX of the leave, a one-slot key's next request
 * is admitted (no 429, no read-on bound to wait for), and the charge is at least the simulator's
 * bill for what it generated until the cut and at most that plus the stated allowance (and a
 * count endpoint's framing). Also: a leave before the first byte. A NATS stream's cancel is
 * tested in internal.test.ts.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { STREAM_CUT_MS_MAX } from "../src/operations/chat/unreported.ts";
import type { Simulator } from "../src/sim/server.ts";
import { ADMIN_TOKEN, SETUP_MS_MAX, type TestGateway } from "./helpers.ts";
import { until } from "./until.ts";
import { endedEarly, expectLeftAndBilled, simEntry, startWireSuite, VENDORS, type Vendor, withSimOptions } from "./wires.ts";

let sim: Simulator;
let t: TestGateway;

beforeAll(async () => {
  ({ sim, t } = await startWireSuite());
}, 4 * SETUP_MS_MAX);
afterAll(async () => {
  await t?.stop();
  await sim?.stop();
}, SETUP_MS_MAX);

/** Output tokens the simulator would generate: far more than a client reads before it leaves. */
const OUTPUT_TOKENS = 400;
const EVENTS_READ = 6;
/** The output limit every request sends: what its hold covers. */
const MAX_TOKENS = 2_000;

type Wire = { name: string; path: (model: string) => string; body: (model: string) => Record<string, unknown> };
const WIRES: Wire[] = [
  {
    name: "chat",
    path: () => "/v1/chat/completions",
    body: (model) => ({ model, stream: true, max_tokens: MAX_TOKENS, messages: [{ role: "user", content: "Tell me about rivers." }] }),
  },
  {
    name: "Responses",
    path: () => "/v1/responses",
    body: (model) => ({ model, stream: true, max_output_tokens: MAX_TOKENS, input: "Tell me about rivers." }),
  },
  {
    name: "Messages",
    path: () => "/v1/messages",
    body: (model) => ({ model, stream: true, max_tokens: MAX_TOKENS, messages: [{ role: "user", content: "Tell me about rivers." }] }),
  },
  {
    name: "Gemini streamGenerateContent",
    path: (model) => `/v1beta/models/${model}:streamGenerateContent?alt=sse`,
    body: () => ({
      contents: [{ role: "user", parts: [{ text: "Tell me about rivers." }] }],
      generationConfig: { maxOutputTokens: MAX_TOKENS },
    }),
  },
];

/** Sends a stream on `wire`, reads `events` SSE events, then leaves. When it left (Date.now) and the request id. */
async function leaveAfter(key: string, wire: Wire, vendor: Vendor, events: number): Promise<{ requestId: string; leftAt: number }> {
  const abort = new AbortController();
  const response = await fetch(`${t.url}${wire.path(vendor.model)}`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "x-goog-api-key": key, "content-type": "application/json" },
    body: JSON.stringify(wire.body(vendor.model)),
    signal: abort.signal,
  });
  expect(response.status).toBe(200);
  const requestId = response.headers.get("x-request-id") ?? response.headers.get("request-id")!;
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  while ((text.match(/^data: /gm)?.length ?? 0) < events) {
    const read = await reader.read();
    if (read.done) throw new Error("the stream ended before the client left");
    text += decoder.decode(read.value, { stream: true });
  }
  const leftAt = Date.now();
  abort.abort();
  await reader.cancel().catch(() => {});
  return { requestId, leftAt };
}

/** The simulator saw its connection close within the cut's bound; the key's one slot is free for the next request. */
async function expectCut(requestId: string, leftAt: number, funded: { key: string; keyId: string }, vendor: Vendor): Promise<void> {
  const entry = await simEntry(sim, requestId);
  expect(entry.aborted).toBe(true);
  expect(entry.endedAt - leftAt).toBeLessThanOrEqual(STREAM_CUT_MS_MAX);
  await until(() => t.gw.keyHost.inFlight(funded.keyId) === 0, { what: "the key's slot freed" });
  const next = await fetch(`${t.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${funded.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: vendor.model, max_tokens: 5, messages: [{ role: "user", content: "Hi" }] }),
  });
  expect(next.status).toBe(200);
  await next.text();
}

for (const wire of WIRES) {
  describe(`${wire.name} wire`, () => {
    for (const vendor of VENDORS.filter((v) => v.kind !== "openai-responses")) {
      test(`${vendor.kind} backend: a client that reads ${EVENTS_READ} events and leaves cuts the upstream, frees its slot, is billed within the allowance`, async () => {
        await withSimOptions(sim, { outputTokens: OUTPUT_TOKENS, itlMs: 20 }, async () => {
          const funded = await t.fundedKey(100_000, { concurrency_max: 1 });
          const { requestId, leftAt } = await leaveAfter(funded.key, wire, vendor, EVENTS_READ);
          await expectCut(requestId, leftAt, funded, vendor);
          const entry = await expectLeftAndBilled({ sim, t }, requestId, vendor);
          expect(entry.completionTokens).toBeLessThan(OUTPUT_TOKENS);
          // How it was billed, as the client can look it up: never the hold.
          const generation = await fetch(`${t.url}/v1/generations/${requestId}`, { headers: { authorization: `Bearer ${funded.key}` } });
          const { ended_early } = (await generation.json()) as { ended_early: Record<string, string> };
          const early = (await endedEarly(t, requestId))!;
          expect(ended_early).toEqual({
            by: "client",
            output_metered_units: String(early.metered),
            output_allowance_units: String(early.allowance),
          });
          expect(early.allowance).toBeLessThan(MAX_TOKENS / 2);
        });
      });
    }
  });
}

test("the operator's exposure: the allowance billed on cuts is counted by model and backend", async () => {
  const response = await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  const body = await response.text();
  const allowance = body.split("\n").filter((line) => line.startsWith("darvaze_cut_allowance_tokens_total{"));
  expect(allowance.length).toBeGreaterThan(0);
  expect(allowance.some((line) => Number(line.split(" ").at(-1)) > 0)).toBe(true);
  expect(body).toContain("# TYPE darvaze_cut_reported_beyond_tokens_total counter");
});

describe("a leave before the first byte", () => {
  for (const vendor of VENDORS.filter((v) => v.kind !== "openai-responses")) {
    test(`${vendor.kind} backend: the upstream is cut, billed its input and the in-flight allowance only`, async () => {
      await withSimOptions(sim, { outputTokens: OUTPUT_TOKENS, ttftMs: 60_000 }, async () => {
        const funded = await t.fundedKey(100_000, { concurrency_max: 1 });
        // The reply's headers may wait for the upstream's first event: the client leaves while it waits.
        const { requestId, leftAt } = await leaveWhileWaiting(funded.key, WIRES[0]!.body(vendor.model));
        await expectCut(requestId, leftAt, funded, vendor);
        const entry = await expectLeftAndBilled({ sim, t }, requestId, vendor);
        expect(entry.completionTokens).toBe(0);
        const early = (await endedEarly(t, requestId))!;
        expect(early.metered).toBe(0);
        expect(early.allowance).toBeGreaterThan(0);
        expect(early.allowance).toBeLessThan(MAX_TOKENS); // a few tokens, never the hold
      });
    });
  }
});

/**
 * A chat request whose client hangs up while the upstream call is in flight (the simulator holding
 * its first byte): the request's id and when the client left, once the simulator has logged it.
 */
async function leaveWhileWaiting(key: string, body: unknown): Promise<{ requestId: string; leftAt: number }> {
  const abort = new AbortController();
  const logged = sim.log.entries().length;
  const sent = fetch(`${t.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: abort.signal,
  }).catch(() => null);
  await until(() => sim.log.inFlight > 0, { what: "the upstream call in flight" });
  const leftAt = Date.now();
  abort.abort();
  await sent;
  sim.options.ttftMs = 0;
  await until(() => sim.log.entries().length > logged, { what: "the simulator's entry" });
  return { requestId: sim.log.entries()[logged]!.requestId!, leftAt };
}

describe("a whole reply whose client hangs up", () => {
  for (const vendor of VENDORS.filter((v) => v.kind !== "openai-responses")) {
    test(`${vendor.kind} backend: the upstream call is cut, billed its input and a time-based allowance within the limit sent`, async () => {
      await withSimOptions(sim, { outputTokens: OUTPUT_TOKENS, ttftMs: 60_000 }, async () => {
        const funded = await t.fundedKey(100_000, { concurrency_max: 1 });
        const body = { model: vendor.model, max_tokens: MAX_TOKENS, messages: [{ role: "user", content: "Tell me about rivers." }] };
        const { requestId, leftAt } = await leaveWhileWaiting(funded.key, body);
        await expectCut(requestId, leftAt, funded, vendor);
        const entry = await expectLeftAndBilled({ sim, t }, requestId, vendor);
        expect(entry.completionTokens).toBe(0);
        const early = (await endedEarly(t, requestId))!;
        expect(early).toMatchObject({ by: "client", metered: 0 });
        expect(early.allowance).toBeGreaterThan(0);
        expect(early.allowance).toBeLessThan(MAX_TOKENS);
      });
    });
  }
});
