/**
 * The pool and the relay against misbehaving upstreams: two simulators behind one model, one of
 * them failing; a stream that breaks mid-way; a client that leaves. Charges are checked against
 * what was delivered, and slots against leaks.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { until, untilValue } from "./until.ts";

const MODEL = "llama-3.3-70b-instruct"; // 10,800 toman/1M input, 27,000 toman/1M output
const HELLO = [{ role: "user" as const, content: "Hello, world!" }];

let good: Simulator;
let flaky: Simulator;
let t: TestGateway;
let key: string;
let keyId: string;
let client: OpenAI;

beforeAll(async () => {
  good = await startSimulator({});
  flaky = await startSimulator({});
  // The flaky backend weighs 100×: preferred while healthy, so the pool must route around it.
  const backend = (name: string, sim: Simulator, weight: number) => ({
    name,
    kind: "openai",
    url: `${sim.url}/v1`,
    region: "in-country",
    weight,
  });
  const file = join(mkdtempSync(join(tmpdir(), "darvaze-pool-")), "pools.json");
  writeFileSync(file, JSON.stringify({ pools: { [MODEL]: { backends: [backend("good", good, 1), backend("flaky", flaky, 100)] } } }));
  t = await startTestGateway({ DARVAZE_CONFIG: file });
  ({ key, keyId } = await t.fundedKey(1000));
  client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
}, SETUP_MS_MAX);

afterAll(async () => {
  await t.stop();
  await good.stop();
  await flaky.stop();
}, SETUP_MS_MAX);

beforeEach(() => {
  for (const sim of [good, flaky]) {
    sim.options.failRate = 0;
    sim.options.failAfterChunks = null;
    sim.options.itlMs = 0;
    sim.options.outputTokens = 16;
    sim.log.clear();
  }
});

async function balanceMicro(): Promise<bigint> {
  const response = await fetch(`${t.url}/v1/credits`, { headers: { authorization: `Bearer ${key}` } });
  return BigInt(((await response.json()) as { balance_micro_toman: string }).balance_micro_toman);
}

describe("retries before the first byte", () => {
  test("a failing backend's requests are retried on the other, and each is charged once", async () => {
    flaky.options.failRate = 1;
    const before = await balanceMicro();
    for (let i = 0; i < 8; i++) {
      const reply = await client.chat.completions.create({ model: MODEL, messages: HELLO, max_tokens: 5 });
      expect(reply.choices[0]!.message.content!.split(" ")).toHaveLength(5);
    }
    expect(good.log.totals.requests).toBe(8);
    // Tried first until its failures outweigh its weight or its breaker opens (5 in a row).
    expect(flaky.log.entries().filter((e) => e.status === 500).length).toBeGreaterThanOrEqual(2);
    expect(flaky.log.entries().filter((e) => e.status === 500).length).toBeLessThanOrEqual(5);
    // 8 × (10 × 10,800 + 5 × 27,000) = 8 × 243,000
    expect(before - (await balanceMicro())).toBe(1_944_000n);
    expect(t.gw.keyHost.inFlight(keyId)).toBe(0);
  });

  test("when every backend fails the client gets 502 and pays nothing", async () => {
    good.options.failRate = 1;
    flaky.options.failRate = 1;
    const before = await balanceMicro();
    const error = await client.chat.completions.create({ model: MODEL, messages: HELLO, max_tokens: 5 }).catch((e) => e);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect([error.status, error.code]).toEqual([502, "upstream_error"]);
    expect(await balanceMicro()).toBe(before);
    expect(t.gw.keyHost.inFlight(keyId)).toBe(0);
  });
});

describe("streams", () => {
  test("an upstream that dies mid-stream gives the client an error frame; it pays for what it got", async () => {
    good.options.failAfterChunks = 3;
    flaky.options.failAfterChunks = 3;
    const before = await balanceMicro();
    const stream = await client.chat.completions.create({ model: MODEL, messages: HELLO, max_tokens: 10, stream: true });
    const seen: string[] = [];
    const error = await (async () => {
      for await (const chunk of stream) seen.push(chunk.choices[0]?.delta?.content ?? "");
    })().then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as Error).message).toContain("upstream");
    const delivered = seen.filter(Boolean);
    expect(delivered).toHaveLength(3);
    const [usage] = (await t.admin("GET", `/admin/accounts/${(await keyAccount()).accountId}`)).body.recent_usage;
    expect(usage.status).toBe(502);
    // Three one-word chunks: an open-weight model's tokenizer is not o200k, so their UTF-8 bytes
    // bound them, within the 10 tokens the hold covers.
    expect(usage.output_units).toBe(String(Math.min(10, Buffer.byteLength(delivered.join(""), "utf8"))));
    expect(before - (await balanceMicro())).toBe(BigInt(usage.billed_micro_toman));
    expect(t.gw.keyHost.inFlight(keyId)).toBe(0);
  });

  test("a client that leaves mid-stream: nothing more is relayed, the upstream is cut, the slot freed, charged what it generated within the allowance", async () => {
    for (const sim of [good, flaky]) {
      sim.options.itlMs = 20;
      sim.options.outputTokens = 100;
    }
    const controller = new AbortController();
    const stream = await client.chat.completions.create({ model: MODEL, messages: HELLO, stream: true }, { signal: controller.signal });
    let chunks = 0;
    await (async () => {
      for await (const _ of stream) if (++chunks === 5) controller.abort();
    })().catch(() => {});
    const sim = good.log.totals.requests > 0 || good.log.inFlight > 0 ? good : flaky;
    const entry = await untilValue(() => sim.log.entries()[0], { what: "the simulator's entry" });
    expect(entry.aborted).toBe(true); // cut: the vendor stops generating
    expect(entry.completionTokens).toBeLessThan(100);
    await until(() => t.gw.keyHost.inFlight(keyId) === 0, { what: "the key's slot freed" });
    const [usage] = (await t.admin("GET", `/admin/accounts/${(await keyAccount()).accountId}`)).body.recent_usage;
    expect(usage.status).toBe(499);
    expect(Number(usage.output_units)).toBeGreaterThanOrEqual(entry!.completionTokens);
    expect(Number(usage.output_units)).toBeLessThan(100);
  });
});

async function keyAccount(): Promise<{ accountId: string }> {
  const response = await fetch(`${t.url}/v1/key`, { headers: { authorization: `Bearer ${key}` } });
  const body = (await response.json()) as { id: string };
  const key_ = await t.gw.deps.keys.get(body.id);
  return { accountId: key_!.accountId };
}

describe("silent upstreams", () => {
  let quiet: TestGateway;
  let quietKey: string;
  beforeAll(async () => {
    quiet = await startTestGateway({ STREAM_KEEPALIVE_MS: "100", STREAM_STALL_MS: "1000" });
    ({ key: quietKey } = await quiet.fundedKey(100));
  }, SETUP_MS_MAX);
  afterAll(async () => quiet.stop(), SETUP_MS_MAX);

  const stream = () =>
    fetch(`${quiet.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${quietKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, messages: HELLO, max_tokens: 3, stream: true }),
    });

  test("a long silence before the first token sends keep-alive comments, and the official client reads through them", async () => {
    const sim = quiet.sim!;
    sim.options.ttftMs = 450;
    try {
      const raw = await (await stream()).text();
      expect(raw.match(/^: keep-alive$/gm)?.length ?? 0).toBeGreaterThanOrEqual(3);
      expect(raw.trimEnd().endsWith("data: [DONE]")).toBe(true);
      const sdk = new OpenAI({ baseURL: `${quiet.url}/v1`, apiKey: quietKey });
      let text = "";
      for await (const chunk of await sdk.chat.completions.create({ model: MODEL, messages: HELLO, max_tokens: 3, stream: true })) {
        text += chunk.choices[0]?.delta?.content ?? "";
      }
      expect(text.split(" ")).toHaveLength(3);
    } finally {
      sim.options.ttftMs = 0;
    }
  });

  test("an upstream that stalls ends the stream with an error frame and is aborted", async () => {
    const sim = quiet.sim!;
    sim.options.stallAfterChunks = 1;
    try {
      const raw = await (await stream()).text();
      const frames = raw.split("\n\n").filter((f) => f.startsWith("data: "));
      expect(frames.at(-1)).toContain('"code":"upstream_timeout"');
      await until(() => sim.log.entries().at(-1)?.finishReason === "stalled", { what: "the stalled request logged" });
      expect(sim.log.entries().at(-1)).toMatchObject({ finishReason: "stalled", aborted: true });
    } finally {
      sim.options.stallAfterChunks = null;
    }
  });
});
