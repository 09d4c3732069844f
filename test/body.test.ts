/**
 * The chat body at the edge, end to end against the suite's upstream simulator: unknown fields and
 * cost-bearing fields are refused before anything is reserved or sent, a pool's `paid_fields`
 * enables the latter at their price, and a prompt carried outside the messages (a 400 KB JSON
 * schema with max_tokens 1) is reserved and charged for its tokens, or refused 402 by a wallet
 * that cannot cover them, never served unbilled.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import type { Simulator } from "../src/sim/server.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { untilValue } from "./until.ts";

const MODEL = "gpt-4o-mini"; // 13,500 toman per 1M input tokens, 54,000 per 1M output tokens
const INPUT_MICRO = 13_500n;
const OUTPUT_MICRO = 54_000n;
const HELLO = [{ role: "user", content: "Hello, world!" }];

let t: TestGateway;
let sim: Simulator;

beforeAll(async () => {
  t = await startTestGateway();
  sim = t.sim!;
}, SETUP_MS_MAX);
afterAll(async () => t.stop(), SETUP_MS_MAX);
beforeEach(() => sim.log.clear());

async function chat(key: string, body: Record<string, unknown>, model = MODEL) {
  const response = await fetch(`${t.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: HELLO, max_tokens: 5, ...body }),
  });
  return { status: response.status, body: (await response.json()) as any };
}

async function balanceMicro(key: string): Promise<bigint> {
  const response = await fetch(`${t.url}/v1/credits`, { headers: { authorization: `Bearer ${key}` } });
  return BigInt(((await response.json()) as { balance_micro_toman: string }).balance_micro_toman);
}

/** The balance once a charge made after `before` is visible (credits wait up to 1 s for it; a loaded machine may take longer). */
function balanceAfterCharge(key: string, before: bigint): Promise<bigint> {
  return untilValue(() => balanceMicro(key), { accept: (balance) => balance !== before, what: "a charge in the balance", pollMs: 50 });
}

async function setPaidFields(paidFields: Record<string, unknown> | undefined) {
  const backends = [{ name: "sim", kind: "openai", url: `${sim.url}/v1`, region: "abroad" }];
  const reply = await t.admin("PUT", `/admin/pools/${MODEL}`, { backends, ...(paidFields ? { paid_fields: paidFields } : {}) });
  expect(reply.status).toBe(200);
  return reply;
}

/** Each cost-bearing field, as a client would send it, and the field a refusal names. */
const PAID: [string, Record<string, unknown>, string][] = [
  ["service_tier priority", { service_tier: "priority" }, "service_tier"],
  ["store", { store: true }, "store"],
  ["prediction", { prediction: { type: "content", content: "Hello" } }, "prediction"],
  ["web search", { web_search_options: { search_context_size: "low" } }, "web_search_options"],
  ["audio output", { modalities: ["text", "audio"], audio: { voice: "alloy", format: "wav" } }, "audio"],
  ["audio modality alone", { modalities: ["audio"] }, "modalities"],
];

describe("known fields only", () => {
  test("an unknown field is a 400 naming it, and nothing reaches the upstream", async () => {
    const { key } = await t.fundedKey(100);
    const top = await chat(key, { guided_json: { type: "object" } });
    expect([top.status, top.body.error.code, top.body.error.param]).toEqual([400, "invalid_request", "guided_json"]);
    const deep = await chat(key, { messages: [{ role: "user", content: [{ type: "text", text: "", hidden: "x".repeat(10_000) }] }] });
    expect([deep.status, deep.body.error.param]).toEqual([400, "messages.0.content.0.hidden"]);
    expect(sim.log.entries()).toHaveLength(0);
    expect(await balanceMicro(key)).toBe(100_000_000n);
  });

  test("the spec's ordinary fields and vLLM's continuous_usage_stats pass", async () => {
    const { key } = await t.fundedKey(100);
    const ok = await chat(key, {
      temperature: 0.5,
      seed: 7,
      stop: ["zz"],
      user: "u1",
      service_tier: "auto",
      store: false,
      stream_options: null,
    });
    expect(ok.status).toBe(200);
  });
});

describe("fields that change the price or keep data", () => {
  test("each is refused by default with a 400 naming it, before any reserve or upstream call", async () => {
    await setPaidFields(undefined);
    const { key } = await t.fundedKey(100);
    for (const [what, fields, param] of PAID) {
      const reply = await chat(key, fields);
      expect([what, reply.status, reply.body.error?.code, reply.body.error?.param]).toEqual([what, 400, "invalid_request", param]);
    }
    expect(sim.log.entries()).toHaveLength(0);
    expect(await balanceMicro(key)).toBe(100_000_000n);
  });

  test("enabled for the pool, each is served and charged at its price percent", async () => {
    const percents = { service_tier: 200, prediction: 100, web_search_options: 300, audio: 800 };
    const pool = await setPaidFields({
      store: true,
      service_tier: { priority: { price_percent: percents.service_tier } },
      prediction: { price_percent: percents.prediction },
      web_search_options: { price_percent: percents.web_search_options },
      audio: { price_percent: percents.audio },
    });
    expect(pool.body.paid_fields.service_tier.priority.price_percent).toBe(200);
    const listed = (await t.admin("GET", "/admin/pools")).body.data.find((p: { model: string }) => p.model === MODEL);
    expect(listed.paid_fields.store).toBe(true);
    const { key } = await t.fundedKey(100);
    const percentOf: Record<string, number> = {
      service_tier: 200,
      store: 100,
      prediction: 100,
      web_search_options: 300,
      audio: 800,
      modalities: 800,
    };
    for (const [what, fields, param] of PAID) {
      sim.log.clear();
      const before = await balanceMicro(key);
      const reply = await chat(key, fields);
      expect([what, reply.status]).toEqual([what, 200]);
      const entry = sim.log.entries()[0]!;
      const percent = BigInt(percentOf[param]!);
      const cost =
        (BigInt(entry.promptTokens) * INPUT_MICRO * percent) / 100n + (BigInt(entry.completionTokens) * OUTPUT_MICRO * percent) / 100n;
      expect([what, before - (await balanceAfterCharge(key, before))]).toEqual([what, cost]);
    }
    const flex = await chat(key, { service_tier: "flex" }); // only the tiers listed are enabled
    expect([flex.status, flex.body.error.param]).toEqual([400, "service_tier"]);
    await setPaidFields(undefined);
    expect((await chat(key, { store: true })).status).toBe(400);
  });

  test("a paid field's percent applies to cache reads too: 200% priority with 6 of 10 prompt tokens read from the cache", async () => {
    await setPaidFields({ service_tier: { priority: { price_percent: 200 } } });
    sim.options.cacheReadTokens = 6;
    try {
      const { key } = await t.fundedKey(100);
      const before = await balanceMicro(key);
      const reply = await chat(key, { service_tier: "priority" });
      expect(reply.body.usage.prompt_tokens_details.cached_tokens).toBe(6);
      const entry = sim.log.entries()[0]!;
      const CACHE_READ_MICRO = 6_750n; // $0.075 per 1M × 90,000
      const cost =
        2n * ((BigInt(entry.promptTokens) - 6n) * INPUT_MICRO + 6n * CACHE_READ_MICRO + BigInt(entry.completionTokens) * OUTPUT_MICRO);
      expect(before - (await balanceAfterCharge(key, before))).toBe(cost);
    } finally {
      sim.options.cacheReadTokens = 0;
      await setPaidFields(undefined);
    }
  });

  test("service_tier is priced at the tier the upstream reports serving: priority asked, default served, charged the default price", async () => {
    await setPaidFields({ service_tier: { priority: { price_percent: 200 } } });
    try {
      const { key } = await t.fundedKey(100);
      const charge = async (served: "default" | null, stream: boolean) => {
        sim.options.servedServiceTier = served;
        sim.log.clear();
        const before = await balanceMicro(key);
        const body = { service_tier: "priority", ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}) };
        const response = await fetch(`${t.url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body: JSON.stringify({ model: MODEL, messages: HELLO, max_tokens: 5, ...body }),
        });
        const text = await response.text();
        expect(response.status).toBe(200);
        expect(text).toContain(`"service_tier":"${served ?? "priority"}"`); // the client sees the tier that served it
        const entry = sim.log.entries()[0]!;
        const list = BigInt(entry.promptTokens) * INPUT_MICRO + BigInt(entry.completionTokens) * OUTPUT_MICRO;
        return { charged: before - (await balanceAfterCharge(key, before)), list };
      };
      for (const stream of [false, true]) {
        const atDefault = await charge("default", stream);
        expect([stream, atDefault.charged]).toEqual([stream, atDefault.list]); // the vendor's bill: the default tier's
        const atPriority = await charge(null, stream);
        expect([stream, atPriority.charged]).toEqual([stream, 2n * atPriority.list]);
      }
    } finally {
      sim.options.servedServiceTier = null;
      await setPaidFields(undefined);
    }
  });

  test("a pool setting that is not a known field or price is refused", async () => {
    const backends = [{ name: "sim", kind: "openai", url: `${sim.url}/v1`, region: "abroad" }];
    const unknown = await t.admin("PUT", `/admin/pools/${MODEL}`, { backends, paid_fields: { logprobs: true } });
    expect([unknown.status, unknown.body.error.param]).toEqual([400, "paid_fields.logprobs"]);
    const unpriced = await t.admin("PUT", `/admin/pools/${MODEL}`, { backends, paid_fields: { service_tier: { priority: {} } } });
    expect([unpriced.status, unpriced.body.error.param]).toEqual([400, "paid_fields.service_tier.priority.price_percent"]);
  });
});

describe("a prompt outside the messages", () => {
  // A 1M-token window: the schema's ~150k simulator tokens fit. 9,000 / 36,000 toman per 1M tokens.
  const WIDE = "gpt-4.1-nano";
  const WIDE_INPUT_MICRO = 9_000n;
  const WIDE_OUTPUT_MICRO = 36_000n;
  const properties: Record<string, unknown> = {};
  for (let i = 0; i < 5_000; i++) properties[`field_${i}`] = { type: "string", description: `value number ${i} of the record, as text` };
  const schemaFormat = { type: "json_schema", json_schema: { name: "big", schema: { type: "object", properties } } };
  const body = { messages: [{ role: "user", content: "Hi" }], max_tokens: 1, response_format: schemaFormat };

  test("a 400 KB JSON schema with max_tokens 1 is reserved for its tokens and charged what the upstream billed", async () => {
    expect(JSON.stringify(body).length).toBeGreaterThan(400_000);
    const { key } = await t.fundedKey(10_000); // the bound, ~440k tokens, is ~3,940 toman
    const before = await balanceMicro(key);
    const reply = await chat(key, body, WIDE);
    expect([reply.status, reply.body.error]).toEqual([200, undefined]);
    const entry = sim.log.entries()[0]!;
    expect(entry.promptTokens).toBeGreaterThan(100_000); // the upstream bills the schema
    // Billing is capped by the reserve: a charge of every billed token shows the reserve covered them.
    expect(before - (await balanceAfterCharge(key, before))).toBe(
      BigInt(entry.promptTokens) * WIDE_INPUT_MICRO + BigInt(entry.completionTokens) * WIDE_OUTPUT_MICRO,
    );
  });

  test("a wallet that cannot cover the schema's tokens is refused 402, and nothing is served", async () => {
    const { key } = await t.fundedKey(100); // many hello requests, not ~150k tokens (~1,350 toman)
    const reply = await chat(key, body, WIDE);
    expect([reply.status, reply.body.error.code]).toEqual([402, "insufficient_quota"]);
    expect(sim.log.entries()).toHaveLength(0);
    expect(await balanceMicro(key)).toBe(100_000_000n);
    expect((await chat(key, {}, WIDE)).status).toBe(200); // the same wallet still pays for a small request
  });
});
