/**
 * What the vendor bills, the customer pays: the gateway's ledger against the simulator's own bill
 * (src/sim keeps it the way a vendor does: every input token of every field, every generated
 * token, until the connection closed or per its cancel parameter; it imports nothing from the
 * gateway's billing code). First the named cases, each with its figures, then a differential
 * fuzz test over generated requests, wires, clients and upstream behaviours.
 *
 * Prices are the catalog's list prices at the test rate (USD × 90,000 toman per 1M tokens, so
 * micro-toman per token), written out here rather than read from the gateway.
 */
import { BATCH_POLL_MS } from "./batchPoll.ts";
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import fc from "fast-check";
import OpenAI, { toFile } from "openai";
import { lineRequestId } from "../src/batches/store.ts";
import { STATUS_CLIENT_CLOSED } from "../src/admission/settlement.ts";
import { COUNT_FRAMING_TOKENS_MAX, CUT_TPOT_MS_MIN, STREAM_CUT_MS_MAX } from "../src/operations/chat/unreported.ts";
import type { SimLogEntry } from "../src/sim/log.ts";
import { simVocabulary } from "../src/sim/text.ts";
import type { SimOptions } from "../src/sim/options.ts";
import { ADMIN_TOKEN, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { until } from "./until.ts";

/** Micro-toman per token, in and out (USD per 1M × 90,000). */
const PRICES: Record<string, { in: bigint; out: bigint }> = {
  "gpt-4o-mini": { in: 13_500n, out: 54_000n },
  "deepseek-v3": { in: 24_300n, out: 99_000n },
  "deepseek-r1": { in: 49_500n, out: 197_100n },
  "claude-3-5-haiku": { in: 72_000n, out: 360_000n },
};
/** The operator's batch price of deepseek-v3 (in-country here), micro-toman per token: USD 0.135 and 0.55 per 1M × 90,000. */
const BATCH_PRICES: Record<string, { in: bigint; out: bigint }> = { "deepseek-v3": { in: 12_150n, out: 49_500n } };
/** The Claude model of the generated cases, served by the simulator's Anthropic wire (its own tokenizer's counts, its own usage events). */
const CLAUDE = { model: "claude-3-5-haiku" as const, upstream: "claude-3-5-haiku-20241022" };
const RECORD_WAIT_MS_MAX = 20_000;
/** A test that waits for the records of several requests, each up to RECORD_WAIT_MS_MAX. */
const SEVERAL_RECORDS_MS_MAX = 2 * RECORD_WAIT_MS_MAX;
const defaults: Partial<SimOptions> = {
  ttftMs: 0,
  itlMs: 0,
  outputTokens: 16,
  omitUsage: false,
  usageScale: 1,
  cancelBills: "sent",
  failAfterChunks: null,
  stallAfterChunks: null,
};

let t: TestGateway;
const sim = () => t.sim!;

beforeAll(async () => {
  t = await startTestGateway();
}, 4 * SETUP_MS_MAX); // a gateway's start was measured at 105 s on the shared machine under load

afterAll(async () => t?.stop(), SETUP_MS_MAX);
afterEach(() => Object.assign(sim().options, defaults));

interface Ledger {
  input: bigint;
  output: bigint;
  billed: bigint;
  metered: bigint;
  status: number;
  durationMs: number;
  /** The upstream anomalies the record keeps (`output_over`, `input_under`), or null. */
  anomalies: string | null;
}

async function usageRecord(requestId: string): Promise<Ledger> {
  let row: Record<string, unknown> | undefined;
  await until(async () => {
    await t.gw.deps.writer.flush();
    [row] = await t.gw.deps.db.rows<Record<string, unknown>>(sql`
      SELECT input_units::text AS input, output_units::text AS output, billed_micro::text AS billed,
             metered_micro::text AS metered, status, duration_ms, anomalies FROM usage_records WHERE request_id = ${requestId}`);
    return row !== undefined;
  }, RECORD_WAIT_MS_MAX);
  return {
    input: BigInt(String(row!.input)),
    output: BigInt(String(row!.output)),
    billed: BigInt(String(row!.billed)),
    metered: BigInt(String(row!.metered)),
    status: Number(row!.status),
    durationMs: Number(row!.duration_ms),
    anomalies: (row!.anomalies as string | null) ?? null,
  };
}

/** The simulator's bill for a request: its own count of the prompt and of what it generated. */
async function vendorBill(requestId: string, model: string, prices = PRICES): Promise<bigint> {
  await until(() => sim().log.byRequestId(requestId).length > 0, RECORD_WAIT_MS_MAX);
  const price = prices[model]!;
  let bill = 0n;
  for (const e of sim().log.byRequestId(requestId)) bill += BigInt(e.promptTokens) * price.in + BigInt(e.completionTokens) * price.out;
  return bill;
}

const BATCH_TEXTS = ["A short line.", "Another line, a little longer than the first.", "Third."];

/** A batch of BATCH_TEXTS' lines of `model`, run to completed. */
async function batchRun(client: OpenAI, model: string) {
  const jsonl = BATCH_TEXTS.map((content, i) =>
    JSON.stringify({
      custom_id: `m${i}`,
      method: "POST",
      url: "/v1/chat/completions",
      body: { model, max_tokens: 40, messages: [{ role: "user", content }] },
    }),
  );
  const file = await client.files.create({ file: await toFile(Buffer.from(jsonl.join("\n")), "m.jsonl"), purpose: "batch" });
  const created = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
  let batch = created;
  await until(async () => (batch = await client.batches.retrieve(created.id)).status === "completed", {
    msMax: RECORD_WAIT_MS_MAX,
    pollMs: BATCH_POLL_MS,
  });
  return batch;
}

/** Sets a model's batch price through the admin API; the function returned puts the price it had back. */
async function batchPriceSet(model: string, batch: Record<string, string>): Promise<() => Promise<void>> {
  const { id: _, ...entry } = (await t.admin("GET", "/admin/catalog")).body.data.find((e: { id: string }) => e.id === model);
  const put = (b: unknown) => t.admin("PUT", `/admin/catalog/models/${model}`, { ...entry, batch_usd_per_1m: b, by: "test" });
  expect((await put(batch)).status).toBe(200);
  return async () => void expect((await put(entry.batch_usd_per_1m)).status).toBe(200);
}

/**
 * How the client reads a reply: all of it; not at all (it leaves once the upstream has the request,
 * before the first byte reaches it); `afterChunks` reads of the body then leaves; or those reads,
 * then no reading for `pauseMs` (the relay's queue and the sockets fill: backpressure), then leaves.
 */
type Client =
  | { kind: "all" }
  | { kind: "before_first_byte" }
  | { kind: "leave"; afterChunks: number }
  | { kind: "pause"; afterChunks: number; pauseMs: number };

function post(key: string, path: string, body: Record<string, unknown>, signal: AbortSignal): Promise<Response> {
  return fetch(`${t.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "x-goog-api-key": key, "content-type": "application/json" },
    body: JSON.stringify(body),
    signal,
  });
}

/** Posts a body; reads the reply as the client behaviour says. The request id and the status the client saw. */
async function send(
  key: string,
  path: string,
  body: Record<string, unknown>,
  client: Exclude<Client, { kind: "before_first_byte" }> = { kind: "all" },
): Promise<{ requestId: string; status: number; leftAt?: number }> {
  const abort = new AbortController();
  const response = await post(key, path, body, abort.signal);
  const requestId = response.headers.get("x-request-id")!;
  if (client.kind === "all" || response.status !== 200 || !response.body) {
    await response.text();
    return { requestId, status: response.status };
  }
  const reader = response.body.getReader();
  for (let chunks = 0; chunks < client.afterChunks; chunks++) if ((await reader.read()).done) break;
  if (client.kind === "pause") await Bun.sleep(client.pauseMs); // the client's own behaviour, not a wait for a condition
  const leftAt = Date.now();
  abort.abort();
  await reader.cancel().catch(() => {});
  return { requestId, status: response.status, leftAt };
}

/** Posts a body and leaves once the upstream has the request, before any byte of the reply is read. */
async function sendAndLeaveBeforeFirstByte(key: string, path: string, body: Record<string, unknown>): Promise<number> {
  const abort = new AbortController();
  const calls = sim().log.inFlight + sim().log.totals.requests;
  const pending = post(key, path, body, abort.signal);
  // Once the upstream has it, the gateway owes the vendor's bill; a refusal never reaches it.
  const refused = pending.then((r) => (r.status === 200 ? new Promise<never>(() => {}) : r));
  const reached = until(() => sim().log.inFlight + sim().log.totals.requests > calls, RECORD_WAIT_MS_MAX);
  const first = await Promise.race([refused, reached]);
  if (first instanceof Response) throw new Error(`refused ${first.status}: ${await first.text()}`);
  const leftAt = Date.now();
  abort.abort();
  const response = await pending.catch(() => null);
  await response?.body?.cancel().catch(() => {});
  return leftAt;
}

/** The request id of a key's one request, once its usage record is written (a client that left before the headers). */
async function onlyRequestOf(keyId: string): Promise<string> {
  let requestId: string | undefined;
  await until(async () => {
    await t.gw.deps.writer.flush();
    [requestId] = (await t.gw.deps.db.rows<{ id: string }>(sql`SELECT request_id AS id FROM usage_records WHERE key_id = ${keyId}`)).map(
      (r) => r.id,
    );
    return requestId !== undefined;
  }, RECORD_WAIT_MS_MAX);
  return requestId!;
}

async function writtenOff(): Promise<bigint> {
  const [row] = await t.gw.deps.db.rows<{ w: string }>(
    sql`SELECT coalesce(sum(metered_micro - billed_micro), 0)::text AS w FROM usage_records`,
  );
  return BigInt(row!.w);
}

describe("the named cases", () => {
  /**
   * A gpt-4o-mini body with max_tokens 100 and these fields, sent whole and streamed to an upstream
   * that sends no usage: billed at least the vendor's bill, which is above `promptTokensMin`.
   */
  async function billedWithoutUsage(fields: Record<string, unknown>, promptTokensMin: bigint): Promise<void> {
    Object.assign(sim().options, { omitUsage: true, outputTokens: 40 });
    const { key } = await t.fundedKey(20_000);
    for (const stream of [false, true]) {
      const { requestId } = await send(key, "/v1/chat/completions", { model: "gpt-4o-mini", max_tokens: 100, ...fields, stream });
      const bill = await vendorBill(requestId, "gpt-4o-mini");
      expect(bill).toBeGreaterThan(promptTokensMin * PRICES["gpt-4o-mini"]!.in);
      expect((await usageRecord(requestId)).billed).toBeGreaterThanOrEqual(bill);
    }
  }

  test(
    "an upstream that sends no usage: tools, schemas, tool-call history and names are billed, not only the messages' text",
    async () => {
      const description = "Weather lookup for a city, with every detail a traveller asks about. ".repeat(120);
      // The vendor bills thousands of prompt tokens here; a count of the messages' text alone is a handful.
      await billedWithoutUsage(
        {
          tools: [{ type: "function", function: { name: "weather", description, parameters: { type: "object" } } }],
          response_format: { type: "json_schema", json_schema: { name: "w", schema: { type: "object", description } } },
          messages: [
            { role: "user", content: "Weather?", name: "traveller" },
            {
              role: "assistant",
              content: null,
              tool_calls: [{ id: "c1", type: "function", function: { name: "weather", arguments: description } }],
            },
            { role: "tool", tool_call_id: "c1", content: "Sunny." },
          ],
        },
        2_000n,
      );
    },
    SEVERAL_RECORDS_MS_MAX,
  );

  test(
    "an upstream that sends no usage: images, files and an earlier refusal's text are billed, not only the messages' text",
    async () => {
      const refusal = "I can't help with that request, as it asks for something I must decline. ".repeat(60);
      // The vendor bills the refusal's ~1,000 tokens, an image's 765 and a file's data; the messages' text is a dozen.
      await billedWithoutUsage(
        {
          messages: [
            { role: "user", content: "Something I should not ask." },
            { role: "assistant", content: null, refusal },
            {
              role: "user",
              content: [
                { type: "text", text: "Then describe these." },
                { type: "image_url", image_url: { url: "https://example.com/a.png" } },
                { type: "file", file: { file_data: "data:application/pdf;base64,AAAA" } },
              ],
            },
          ],
        },
        2_000n,
      );
    },
    SEVERAL_RECORDS_MS_MAX,
  );

  test("a client that leaves after 20 chunks of an upstream that sends no usage: billed at least what the vendor bills", async () => {
    Object.assign(sim().options, { omitUsage: true, outputTokens: 400, itlMs: 2 });
    const { key } = await t.fundedKey(20_000);
    const body = { model: "gpt-4o-mini", stream: true, messages: [{ role: "user", content: "Tell me about rivers." }] };
    const { requestId } = await send(key, "/v1/chat/completions", body, { kind: "leave", afterChunks: 20 });
    const bill = await vendorBill(requestId, "gpt-4o-mini");
    const record = await usageRecord(requestId);
    expect(record.status).toBe(499);
    expect(record.billed).toBeGreaterThanOrEqual(bill);
    expect(record.billed).toBe(record.metered);
  });

  test("a reasoning model whose upstream sends no usage, client gone: billed at least the vendor's bill, not the hold", async () => {
    Object.assign(sim().options, { omitUsage: true, outputTokens: 2_000, itlMs: 1 });
    const { key } = await t.fundedKey(20_000);
    const body = { model: "deepseek-r1", max_tokens: 2_000, stream: true, messages: [{ role: "user", content: "Think." }] };
    const { requestId } = await send(key, "/v1/chat/completions", body, { kind: "leave", afterChunks: 5 });
    const bill = await vendorBill(requestId, "deepseek-r1");
    const record = await usageRecord(requestId);
    expect(record.output).toBeLessThan(2_000n); // its reasoning is streamed: counted, not the hold
    expect(record.billed).toBeGreaterThanOrEqual(bill);
  });

  test("five concurrent streams without max_tokens on a 5,000-toman wallet: each told what its hold covers, nothing written off", async () => {
    Object.assign(sim().options, { outputTokens: 20_000 });
    const before = await writtenOff();
    const { key, accountId } = await t.fundedKey(5_000);
    const body = { model: "deepseek-r1", stream: true, messages: [{ role: "user", content: "Think long." }] };
    const sent = await Promise.all(Array.from({ length: 5 }, () => send(key, "/v1/chat/completions", body)));
    let charged = 0n;
    let vendor = 0n;
    for (const s of sent.filter((s) => s.status === 200)) {
      vendor += await vendorBill(s.requestId, "deepseek-r1");
      charged += (await usageRecord(s.requestId)).billed;
    }
    expect(sent.some((s) => s.status === 200)).toBe(true);
    expect(charged).toBe(vendor); // the vendor generated only what was held
    expect(charged).toBeLessThanOrEqual(5_000_000_000n);
    expect((await writtenOff()) - before).toBe(0n);
    const account = await t.admin("GET", `/admin/accounts/${accountId}`);
    expect(BigInt(account.body.balance_micro_toman)).toBe(5_000_000_000n - charged);
  });

  test(
    "five concurrent reasoning streams on a 500-toman wallet: none generates more than its hold, nothing written off",
    async () => {
      Object.assign(sim().options, { outputTokens: 20_000 });
      const before = await writtenOff();
      for (const maxTokens of [undefined, 1_000]) {
        const { key, accountId } = await t.fundedKey(500);
        const body = { model: "deepseek-r1", stream: true, messages: [{ role: "user", content: "Think long." }], max_tokens: maxTokens };
        const sent = await Promise.all(Array.from({ length: 5 }, () => send(key, "/v1/chat/completions", body)));
        // Without max_tokens: 500 toman covers fewer than the 4,096 tokens a limit is lowered to, so 402; with 1,000: two holds fit.
        expect(sent.filter((s) => s.status === 200).length).toBe(maxTokens === undefined ? 0 : 2);
        expect(sent.filter((s) => s.status !== 200).every((s) => s.status === 402)).toBe(true);
        let charged = 0n;
        let vendor = 0n;
        for (const s of sent.filter((s) => s.status === 200)) {
          vendor += await vendorBill(s.requestId, "deepseek-r1");
          charged += (await usageRecord(s.requestId)).billed;
        }
        expect(charged).toBe(vendor);
        expect(charged).toBeLessThanOrEqual(500_000_000n);
        const account = await t.admin("GET", `/admin/accounts/${accountId}`);
        expect(BigInt(account.body.balance_micro_toman)).toBe(500_000_000n - charged);
      }
      expect((await writtenOff()) - before).toBe(0n);
    },
    SEVERAL_RECORDS_MS_MAX,
  );

  test("an upstream that reports 50 million completion tokens for max_tokens 5: charged within the hold, counted as an anomaly", async () => {
    Object.assign(sim().options, { usageScale: 10_000_000, outputTokens: 5 });
    const { key, accountId } = await t.fundedKey(100_000);
    const body = { model: "gpt-4o-mini", max_tokens: 5, messages: [{ role: "user", content: "Hello, world!" }] };
    const { requestId } = await send(key, "/v1/chat/completions", body);
    const record = await usageRecord(requestId);
    expect(record.output).toBe(5n);
    // The hold: the prompt's byte bound (13 bytes + 8 + 8) at the input price, 5 tokens at the output price.
    const hold = 29n * PRICES["gpt-4o-mini"]!.in + 5n * PRICES["gpt-4o-mini"]!.out;
    expect(record.billed).toBeLessThanOrEqual(hold);
    const account = await t.admin("GET", `/admin/accounts/${accountId}`);
    expect(BigInt(account.body.balance_micro_toman)).toBe(100_000_000_000n - record.billed);
    const metrics = await (await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).text();
    expect(metrics).toMatch(/darvaze_upstream_usage_clamped_total\{model="gpt-4o-mini",backend="sim",part="output"\} [1-9]/);
    // Kept on the usage record (it survives a restart) and shown by the audit, by backend.
    expect(record.anomalies).toBe("input_over,output_over"); // the scale lies about the prompt too
    const audit = await t.admin("GET", "/admin/ledger/audit");
    expect(audit.body.upstream_anomalies).toContainEqual({ backend: "sim", model: "gpt-4o-mini", anomaly: "output_over", requests: 1 });
  });

  test("an upstream that reports half what it used: raised to the prompt's words and every word it sent, counted as an anomaly", async () => {
    Object.assign(sim().options, { usageScale: 0.5, outputTokens: 40 });
    const { key } = await t.fundedKey(1_000);
    const text = "Tell me about rivers and the stones that lie in them, one by one. ".repeat(20);
    const body = { model: "deepseek-v3", stream: true, messages: [{ role: "user", content: text }] };
    const { requestId } = await send(key, "/v1/chat/completions", body);
    const record = await usageRecord(requestId);
    const [entry] = sim().log.byRequestId(requestId);
    expect(record.output).toBe(BigInt(entry!.completionTokens)); // 40 words relayed, 20 reported
    expect(entry!.promptTokens).toBe(326); // reported as 163
    expect(record.input).toBe(280n); // its words: the template and the punctuation are the stated margin
    const metrics = await (await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).text();
    expect(metrics).toMatch(/darvaze_upstream_usage_raised_total\{model="deepseek-v3",backend="sim",part="output"\} [1-9]/);
    expect(metrics).toMatch(/darvaze_upstream_usage_raised_total\{model="deepseek-v3",backend="sim",part="input"\} [1-9]/);
    expect(record.anomalies).toBe("input_under,output_under");
    const audit = await t.admin("GET", "/admin/ledger/audit");
    expect(audit.body.upstream_anomalies).toContainEqual({ backend: "sim", model: "deepseek-v3", anomaly: "output_under", requests: 1 });
  });

  test(
    "n = 3 with max_tokens 40: each choice told 40, the hold covers 3 × 40, charged what the vendor bills",
    async () => {
      Object.assign(sim().options, { outputTokens: 100 });
      const { key } = await t.fundedKey(1_000);
      for (const stream of [false, true]) {
        const body = { model: "gpt-4o-mini", n: 3, max_tokens: 40, stream, messages: [{ role: "user", content: "Three rivers." }] };
        const { requestId } = await send(key, "/v1/chat/completions", body);
        const record = await usageRecord(requestId);
        expect(record.output).toBe(120n);
        expect(record.billed).toBe(await vendorBill(requestId, "gpt-4o-mini"));
        expect(record.anomalies).toBeNull();
      }
    },
    SEVERAL_RECORDS_MS_MAX,
  );

  test(
    "batch lines: each is billed the vendor's bill (its own count when the upstream reports none, never less), the batch's cost their sum; an in-country model's lines at its batch price, never above the live price",
    async () => {
      const { key } = await t.fundedKey(1_000);
      const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
      // deepseek-v3 is served in-country here: with the operator's batch price, that price is what is billed.
      const restore = await batchPriceSet("deepseek-v3", { input_token: "0.135", output_token: "0.55" });
      try {
        for (const [model, pricing] of [
          ["gpt-4o-mini", "live"],
          ["deepseek-v3", "batch"],
        ] as const) {
          for (const omitUsage of [false, true]) {
            Object.assign(sim().options, { omitUsage, outputTokens: 24 });
            const batch = await batchRun(client, model);
            expect((batch as unknown as { pricing: string }).pricing).toBe(pricing);
            let sum = 0n;
            for (let line = 1; line <= BATCH_TEXTS.length; line++) {
              const requestId = lineRequestId(batch.id, line);
              const bill = await vendorBill(requestId, model, pricing === "batch" ? BATCH_PRICES : PRICES);
              const record = await usageRecord(requestId);
              if (omitUsage) expect(record.billed).toBeGreaterThanOrEqual(bill);
              else expect(record.billed).toBe(bill);
              // Never above what the usage costs at the live price (its own count, when the upstream reported none).
              const units = { in: record.input, out: record.output };
              expect(record.billed).toBeLessThanOrEqual(units.in * PRICES[model]!.in + units.out * PRICES[model]!.out);
              sum += record.billed;
            }
            expect(BigInt((batch as unknown as { cost_micro_toman: string }).cost_micro_toman)).toBe(sum);
          }
        }
      } finally {
        await restore();
      }
    },
    2 * SEVERAL_RECORDS_MS_MAX,
  );
});

test("a Claude stream whose client leaves after 20 chunks: its text counted as Anthropic counts it, within the allowance, not by its bytes", async () => {
  const { key } = await t.fundedKey(1_000);
  await poolAtSpeed(CLAUDE.model, 20, key);
  Object.assign(sim().options, defaults, { itlMs: 20, outputTokens: 200 });
  const body = { model: CLAUDE.model, max_tokens: 200, stream: true, messages: [{ role: "user", content: "Tell me about rivers." }] };
  const { requestId } = await send(key, "/v1/chat/completions", body, { kind: "leave", afterChunks: 20 });
  const record = await usageRecord(requestId);
  const [vendor] = sim().log.byRequestId(requestId);
  expect(record.status).toBe(STATUS_CLIENT_CLOSED);
  const inFlight = Math.ceil((20 + EVENT_LOOP_LAG_MS_MAX + STREAM_CUT_MS_MAX) / (20 * TPOT_MEASURED_SHARE_MIN));
  expect(record.output).toBeGreaterThanOrEqual(BigInt(vendor!.completionTokens));
  expect(record.output).toBeLessThanOrEqual(
    BigInt(vendor!.completionTokens + inFlight + TOKENIZER_SLACK_TOKENS + COUNT_FRAMING_TOKENS_MAX),
  );
});

describe("the peer classes of 2026", () => {
  /** gpt-4o's list prices at the test rate: $2.50 / $10 per 1M. */
  const GPT_4O = { in: 225_000n, out: 900_000n };
  const question = { messages: [{ role: "user", content: "Tell me about rivers." }] };

  test("a dated id (gpt-4o-2024-08-06) after a backend that is down: billed once, at the catalog entry's price, by the backend that served", async () => {
    const down = { name: "down", kind: "openai", url: "http://127.0.0.1:9/v1", region: "abroad", weight: 1_000 };
    const served = { name: "sim-fallback", kind: "openai", url: `${sim().url}/v1`, region: "abroad" };
    expect((await t.admin("PUT", "/admin/pools/gpt-4o", { backends: [down, served] })).status).toBe(200);
    const { key } = await t.fundedKey(100_000);
    for (const stream of [false, true]) {
      const { requestId, status } = await send(key, "/v1/chat/completions", { model: "gpt-4o-2024-08-06", stream, ...question });
      expect(status).toBe(200);
      const [entry, ...more] = sim().log.byRequestId(requestId);
      expect(more).toEqual([]);
      const record = await usageRecord(requestId);
      const [row] = await t.gw.deps.db.rows<{ model: string; backend: string }>(
        sql`SELECT model, backend FROM usage_records WHERE request_id = ${requestId}`,
      );
      expect(record.billed).toBe(BigInt(entry!.promptTokens) * GPT_4O.in + BigInt(entry!.completionTokens) * GPT_4O.out);
      expect(row).toEqual({ model: "gpt-4o", backend: "sim-fallback" });
    }
  });

  test("an empty 200 (no content): billed its input only, reported or not", async () => {
    const { key } = await t.fundedKey(1_000);
    for (const omitUsage of [false, true])
      for (const stream of [false, true]) {
        Object.assign(sim().options, { outputTokens: 0, omitUsage });
        const { requestId } = await send(key, "/v1/chat/completions", { model: "gpt-4o-mini", stream, ...question });
        const record = await usageRecord(requestId);
        expect([omitUsage, stream, record.output]).toEqual([omitUsage, stream, 0n]);
        expect(record.billed).toBe(record.input * PRICES["gpt-4o-mini"]!.in);
        if (!omitUsage) expect(record.billed).toBe(await vendorBill(requestId, "gpt-4o-mini"));
      }
  });

  test("a new rate (POST /admin/rates) during a request: billed at the prices it was admitted at, the next request at the new", async () => {
    const { key } = await t.fundedKey(1_000);
    for (const stream of [false, true]) {
      Object.assign(sim().options, { outputTokens: 40, itlMs: 20 });
      const body = { model: "deepseek-v3", stream, ...question };
      const calls = sim().log.inFlight + sim().log.totals.requests;
      const running = send(key, "/v1/chat/completions", body);
      await until(() => sim().log.inFlight + sim().log.totals.requests > calls, RECORD_WAIT_MS_MAX);
      try {
        expect((await t.admin("POST", "/admin/rates", { toman_per_usd: 180_000 })).status).toBe(201);
        const changedAt = Date.now();
        const { requestId } = await running;
        expect(sim().log.byRequestId(requestId)[0]!.endedAt).toBeGreaterThanOrEqual(changedAt); // it ran across the change
        expect((await usageRecord(requestId)).billed).toBe(await vendorBill(requestId, "deepseek-v3"));
        Object.assign(sim().options, { itlMs: 0 });
        const after = await send(key, "/v1/chat/completions", body);
        expect((await usageRecord(after.requestId)).billed).toBe(2n * (await vendorBill(after.requestId, "deepseek-v3")));
      } finally {
        expect((await t.admin("POST", "/admin/rates", { toman_per_usd: 90_000 })).status).toBe(201);
      }
    }
  });
});

/** The generated cases: a request on a wire, a model on its backend, a client, an upstream, its speed and a wallet. */
const words = fc.array(fc.constantFrom("river", "سلام", "naïve", "42", "{", "🙂", "the", "schema_x"), { minLength: 1, maxLength: 30 });
const sentence = words.map((w) => w.join(" "));
const tool = fc.record({
  type: fc.constant("function"),
  function: fc.record({ name: fc.constantFrom("get", "find_city"), description: sentence, parameters: fc.constant({ type: "object" }) }),
});
const chatFeatures = fc.record({
  tools: fc.option(fc.array(tool, { minLength: 1, maxLength: 2 }), { nil: undefined }),
  schema: fc.option(sentence, { nil: undefined }),
  history: fc.boolean(),
  image: fc.boolean(),
  file: fc.boolean(),
  name: fc.option(fc.constantFrom("ali", "sara"), { nil: undefined }),
});
/** An honest upstream, and the dishonest ones: no usage at all, a report three times or half the truth. */
const upstream = fc.constantFrom("honest", "honest", "no_usage", "lies_high", "lies_low");
/** Milliseconds between the upstream's tokens: all at once, a fast backend, a slow one (twice: its allowance is the tightest). */
const speed = fc.constantFrom(0, 2, 20, 20);
const client = fc.oneof(
  fc.constant<Client>({ kind: "all" }),
  fc.constant<Client>({ kind: "before_first_byte" }),
  fc.integer({ min: 0, max: 40 }).map((afterChunks): Client => ({ kind: "leave", afterChunks })),
  fc
    .record({ afterChunks: fc.integer({ min: 0, max: 20 }), pauseMs: fc.integer({ min: 20, max: 400 }) })
    .map((p): Client => ({ kind: "pause", ...p })),
);
const scenario = fc
  .record({
    wire: fc.constantFrom("chat", "responses", "messages", "gemini"),
    // Claude twice: its text after a cut is counted by Anthropic's endpoint, the case most likely to go wrong.
    model: fc.constantFrom("gpt-4o-mini", "deepseek-v3", "deepseek-r1", CLAUDE.model, CLAUDE.model),
    stream: fc.boolean(),
    maxTokens: fc.option(fc.integer({ min: 1, max: 1_000 }), { nil: undefined }),
    text: sentence,
    features: chatFeatures,
    upstream,
    itlMs: speed,
    client,
    /** What the upstream generates (at most the limit it was told); a reply longer than the fast speed's allowance. */
    outputTokens: fc.constantFrom(10, 120, 400),
    /** Choices (`n`, chat only): the hold covers n × the output limit. */
    n: fc.integer({ min: 1, max: 3 }),
    /** A wallet that covers about 6,000 output tokens, below the default limit: a stream without max_tokens is lowered. */
    edgeWallet: fc.boolean(),
  })
  // At the wallet's edge: a chat stream without max_tokens, images or files (whose allowances would cover the rest), read whole.
  .map((s) =>
    s.edgeWallet
      ? {
          ...s,
          wire: "chat" as const,
          model: s.model === CLAUDE.model ? ("gpt-4o-mini" as const) : s.model,
          stream: true,
          maxTokens: undefined,
          itlMs: 0,
          client: { kind: "all" } as Client,
          features: { ...s.features, image: false, file: false },
        }
      : s,
  )
  // A slow upstream's long reply read whole would take seconds: its clients leave, or it is shorter.
  .map((s) => (s.itlMs === 20 && s.client.kind === "all" ? { ...s, outputTokens: Math.min(s.outputTokens, 120) } : s))
  // Claude's Messages API has no `n`, and its adapter takes no image by URL or file by id.
  .map((s) => (s.model === CLAUDE.model ? { ...s, n: 1, features: { ...s.features, image: false, file: false } } : s));
type Scenario = typeof scenario extends fc.Arbitrary<infer T> ? T : never;

function chatMessages(s: Scenario): unknown[] {
  const f = s.features;
  const parts: unknown[] = [{ type: "text", text: s.text }];
  if (f.image) parts.push({ type: "image_url", image_url: { url: "https://example.com/a.png" } });
  if (f.file) parts.push({ type: "file", file: { file_data: "data:application/pdf;base64,AAAA" } });
  const messages: unknown[] = [{ role: "user", content: parts.length > 1 ? parts : s.text, ...(f.name ? { name: f.name } : {}) }];
  if (f.history) {
    messages.push(
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "c1", type: "function", function: { name: "get", arguments: `{"q":"${s.text}"}` } }],
      },
      { role: "tool", tool_call_id: "c1", content: s.text },
      { role: "user", content: s.text },
    );
  }
  return messages;
}

/** The output limit of a wire that requires one (Messages, and Gemini here), when the case gives none. */
const WIRE_OUTPUT_LIMIT = 300;

/** The request as the scenario's wire sends it, and the output limit it asks for per choice (null: the gateway's default). */
function request(s: Scenario): { path: string; body: Record<string, unknown>; outputLimit: number | null } {
  const stream = s.stream;
  if (s.wire === "responses") {
    const limit = s.maxTokens === undefined ? null : Math.max(16, s.maxTokens);
    const body: Record<string, unknown> = { model: s.model, input: s.text, stream };
    if (limit !== null) body.max_output_tokens = limit;
    return { path: "/v1/responses", body, outputLimit: limit };
  }
  const limit = s.maxTokens ?? WIRE_OUTPUT_LIMIT;
  if (s.wire === "messages") {
    return {
      path: "/v1/messages",
      body: { model: s.model, max_tokens: limit, stream, messages: [{ role: "user", content: s.text }] },
      outputLimit: limit,
    };
  }
  if (s.wire === "gemini") {
    const action = stream ? "streamGenerateContent?alt=sse" : "generateContent";
    return {
      path: `/v1beta/models/${s.model}:${action}`,
      body: { contents: [{ role: "user", parts: [{ text: s.text }] }], generationConfig: { maxOutputTokens: limit } },
      outputLimit: limit,
    };
  }
  const body: Record<string, unknown> = { model: s.model, stream, messages: chatMessages(s) };
  if (s.maxTokens !== undefined) body.max_tokens = s.maxTokens;
  if (s.n > 1) body.n = s.n;
  if (s.features.tools) body.tools = s.features.tools;
  if (s.features.schema)
    body.response_format = { type: "json_schema", json_schema: { name: "x", schema: { type: "object", description: s.features.schema } } };
  return { path: "/v1/chat/completions", body, outputLimit: s.maxTokens ?? null };
}

const UPSTREAMS: Record<string, Partial<SimOptions>> = {
  honest: {},
  no_usage: { omitUsage: true },
  lies_high: { usageScale: 3 },
  lies_low: { usageScale: 0.5 },
};

/** A fresh wallet for ~6,000 output tokens per choice beyond the prompt's byte bound (which is below the body's bytes + 1,000). */
async function edgeKey(s: Scenario, body: Record<string, unknown>): Promise<{ key: string; keyId: string }> {
  const price = PRICES[s.model]!;
  const micro = price.out * 6_000n * BigInt(s.n) + price.in * BigInt(Buffer.byteLength(JSON.stringify(body)) + 1_000);
  return t.fundedKey((Number(micro) / 1_000_000).toFixed(6));
}

/** Whitespace-separated words: what the gateway can prove a vendor counts, whatever its tokenizer. */
const wordsOf = (text: string) => text.split(/\s+/).filter((w) => w.length > 0).length;

/** The words of what the request sends the model as text: its messages' texts, names and tool calls' arguments. */
function sentWords(s: Scenario): number {
  if (s.wire !== "chat") return wordsOf(s.text);
  let words = 0;
  for (const m of chatMessages(s) as { content: unknown; name?: string; tool_calls?: { function: { arguments: string } }[] }[]) {
    if (typeof m.content === "string") words += wordsOf(m.content);
    else if (Array.isArray(m.content)) words += wordsOf(m.content.map((p: { text?: string }) => p.text ?? "").join(""));
    if (m.name) words += wordsOf(m.name);
    for (const call of m.tool_calls ?? []) words += wordsOf(call.function.arguments);
  }
  return words;
}

/**
 * The stated margin of an upstream whose usage lies low: the part of the vendor's bill the gateway
 * cannot see, its prompt tokens beyond the words sent (the chat template's overhead, the JSON of
 * tools and schemas, images and files). Every generated word passes through the gateway, whose
 * count joins the choices' texts: a word that ends one choice's chunk and one that starts the
 * next choice's may count as one (at most one per choice after the first, here).
 */
async function unseenMargin(s: Scenario, requestId: string): Promise<bigint> {
  let prompt = 0;
  for (const e of sim().log.byRequestId(requestId)) prompt += e.promptTokens;
  const choices = s.wire === "chat" ? s.n : 1;
  return BigInt(Math.max(0, prompt - sentWords(s))) * PRICES[s.model]!.in + BigInt(choices - 1) * PRICES[s.model]!.out;
}

/**
 * The hosted-tool branch: Anthropic's web search on a Claude model served by the Anthropic
 * simulator, through the Messages or the Responses wire, `maxUses` 0 (the tool not offered) to
 * 3, the model searching more than it is allowed.
 */
const HOSTED = {
  model: "claude-sonnet-4",
  /** Micro-toman per token in and out ($3 / $15 per 1M), and per search ($10 per 1,000). */
  price: { in: 270_000n, out: 1_350_000n, call: 900_000_000n },
  /** Input tokens the hold covers for each search's results (src/operations/chat/hosted.ts). */
  resultTokensPerCall: 16_384n,
  maxTokens: 300,
  searchesWanted: 5,
};
const hostedScenario = fc.record({
  hosted: fc.constant(true as const),
  wire: fc.constantFrom("messages", "responses"),
  stream: fc.boolean(),
  maxUses: fc.integer({ min: 0, max: 3 }),
  text: sentence,
  upstream: fc.constantFrom("honest", "no_usage", "lies_high"),
});
type HostedScenario = typeof hostedScenario extends fc.Arbitrary<infer T> ? T : never;
/** Every generated case: mostly the plain ones, a share with the hosted tool (the run count stays FUZZ_RUNS). */
const anyScenario = fc.oneof({ arbitrary: scenario, weight: 4 }, { arbitrary: hostedScenario, weight: 1 });

let anthropicPool: Promise<void> | undefined;
/** The hosted tool's Claude model served by the simulator's Anthropic wire (the default pools speak OpenAI's), set once. */
function withAnthropicPool(): Promise<void> {
  anthropicPool ??= setPool(HOSTED.model, {
    name: "anthropic-sim",
    kind: "anthropic",
    url: sim().url,
    upstream_model: "claude-sonnet-4-20250514",
  });
  return anthropicPool;
}

async function setPool(model: string, backend: Record<string, unknown>): Promise<void> {
  const r = await t.admin("PUT", `/admin/pools/${model}`, { backends: [{ region: "abroad", ...backend }] });
  if (r.status !== 200) throw new Error(`pool not set: ${r.status} ${JSON.stringify(r.body)}`);
}

/** The speed each generated case's model is served at now (its pool's one backend). */
const poolSpeeds = new Map<string, number>();

/**
 * Serves a model from a backend of the case's speed: one backend per speed (`sim-20ms` …), all on
 * the one simulator. A backend has a speed and the gateway measures it (its time per token, which
 * the in-flight allowance is reckoned from); a single backend whose speed the test changed from one
 * request to the next would have no time per token to measure.
 */
async function poolAtSpeed(model: string, itlMs: number, key: string): Promise<void> {
  if (poolSpeeds.get(model) === itlMs) return;
  const claude = model === CLAUDE.model;
  await setPool(model, {
    name: `sim-${itlMs}ms`,
    kind: claude ? "anthropic" : "openai",
    url: claude ? sim().url : `${sim().url}/v1`,
    ...(claude ? { upstream_model: CLAUDE.upstream } : {}),
  });
  poolSpeeds.set(model, itlMs);
  // A new backend starts from the estimates of the one it replaced: one short stream read whole measures it.
  Object.assign(sim().options, defaults, { itlMs, outputTokens: 4 });
  await send(key, "/v1/chat/completions", { model, stream: true, max_tokens: 4, messages: [{ role: "user", content: "Warm up." }] });
}

function hostedRequest(s: HostedScenario): { path: string; body: Record<string, unknown> } {
  if (s.wire === "responses") {
    const tools = s.maxUses > 0 ? { tools: [{ type: "web_search" }], max_tool_calls: s.maxUses } : {};
    return {
      path: "/v1/responses",
      body: { model: HOSTED.model, input: s.text, max_output_tokens: HOSTED.maxTokens, stream: s.stream, ...tools },
    };
  }
  const tools = s.maxUses > 0 ? { tools: [{ type: "web_search_20250305", name: "web_search", max_uses: s.maxUses }] } : {};
  return {
    path: "/v1/messages",
    body: { model: HOSTED.model, max_tokens: HOSTED.maxTokens, stream: s.stream, messages: [{ role: "user", content: s.text }], ...tools },
  };
}

/**
 * Charged ≥ the simulator's bill (its searches at the per-call price), at most the hold (the
 * prompt's byte bound and each allowed search's results at the input price, the output limit,
 * the allowed searches), and never more searches run or billed than the client's max_uses.
 */
async function hostedCase(s: HostedScenario, key: string): Promise<void> {
  await withAnthropicPool();
  Object.assign(sim().options, defaults, UPSTREAMS[s.upstream], { webSearchCalls: HOSTED.searchesWanted });
  const r = hostedRequest(s);
  const { requestId, status } = await send(key, r.path, r.body);
  if (status !== 200) throw new Error(`refused ${status}: ${JSON.stringify(r.body)}`);
  await until(() => sim().log.byRequestId(requestId).length > 0, RECORD_WAIT_MS_MAX);
  const [vendor] = sim().log.byRequestId(requestId);
  const calls = vendor!.webSearchCalls ?? 0;
  const p = HOSTED.price;
  const bill = BigInt(vendor!.promptTokens) * p.in + BigInt(vendor!.completionTokens) * p.out + BigInt(calls) * p.call;
  const record = await usageRecord(requestId);
  const [row] = await t.gw.deps.db.rows<{ calls: string }>(
    sql`SELECT hosted_call_units::text AS calls FROM usage_records WHERE request_id = ${requestId}`,
  );
  const maxUses = BigInt(s.maxUses);
  const promptBound = BigInt(Buffer.byteLength(JSON.stringify(r.body)) + 1_000);
  const hold = (promptBound + maxUses * HOSTED.resultTokensPerCall) * p.in + BigInt(HOSTED.maxTokens) * p.out + maxUses * p.call;
  expect(calls).toBeLessThanOrEqual(s.maxUses);
  expect(BigInt(row!.calls)).toBeLessThanOrEqual(maxUses);
  expect(record.billed).toBeGreaterThanOrEqual(bill);
  if (s.upstream === "honest") expect(record.billed).toBe(bill);
  expect(record.billed).toBeLessThanOrEqual(hold);
  expect(record.billed).toBeLessThanOrEqual(record.metered);
}

/**
 * The tokenizer's margin on the output metered until a cut (per choice): the gateway counts the
 * text it read with the vendor's tokenizer (o200k for OpenAI-family models), the simulator by its
 * own rule, and the two split the same text differently only at its joins (the word a chunk ends
 * with and the next chunk's first, the choices' texts counted joined). A vendor's count endpoint
 * (Anthropic's) counts the text as a message: its framing on top, the gateway's stated
 * COUNT_FRAMING_TOKENS_MAX. A few tokens either way, never a share of the reply.
 */
const TOKENIZER_SLACK_TOKENS = 4;

/**
 * The gateway measures a backend's time per token from when its tokens arrive (a peak EWMA over
 * its streams, and the stream's own): the simulator sleeps at least itlMs between tokens, but on
 * a busy machine its timers fire late and tokens arrive in bursts, so the measure can be down to
 * this share of it (seen: 0.7 at 20 ms on the shared 2-core machine).
 */
const TPOT_MEASURED_SHARE_MIN = 0.5;

/**
 * Models whose text the gateway counts by its UTF-8 bytes after a cut (docs/billing.md): no
 * public tokenizer, no free count endpoint on their backend; bytes bound any byte-level BPE.
 */
const BYTES_COUNTED: ReadonlySet<string> = new Set(["deepseek-v3", "deepseek-r1"]);
/** The simulator's longest word with its leading space ("between", "quietly" …): a token's bytes at most. */
const SIM_TOKEN_BYTES_MAX = 1 + Math.max(...simVocabulary.map((w) => Buffer.byteLength(w)));

/** How late the gateway may see a read or a client's leave on the shared machine (its event loop busy): the gap between them grows by it. */
const EVENT_LOOP_LAG_MS_MAX = 100;

/**
 * The stated allowance of a request whose client left, in tokens, as the gateway states it
 * (src/operations/chat/unreported.ts): the input it counted itself when the upstream had not
 * reported it (at most the cost value's bound), and beyond the output metered until the cut, the
 * in-flight tokens: what a backend of this speed generates between the last event read (at most
 * one token's time before the leave, and the event loop's lag) and the cut (STREAM_CUT_MS_MAX), at its time per token (no
 * faster than CUT_TPOT_MS_MIN); a whole reply, for all of its time. Plus the tokenizer's margin.
 */
function leaveAllowance(
  s: Scenario,
  body: Record<string, unknown>,
  vendor: SimLogEntry,
  durationMs: number,
): { input: bigint; output: bigint } {
  const input = BigInt(Math.max(0, promptBound(body) - vendor.promptTokens));
  const tpotMs = Math.max(s.itlMs * TPOT_MEASURED_SHARE_MIN, CUT_TPOT_MS_MIN);
  const generatingMs = (s.stream ? s.itlMs : durationMs) + EVENT_LOOP_LAG_MS_MAX + STREAM_CUT_MS_MAX;
  const margin = TOKENIZER_SLACK_TOKENS * s.n + (s.model === CLAUDE.model ? COUNT_FRAMING_TOKENS_MAX : 0);
  const read = BYTES_COUNTED.has(s.model) ? (SIM_TOKEN_BYTES_MAX - 1) * vendor.completionTokens : 0;
  return { input, output: BigInt(read + Math.ceil(generatingMs / tpotMs) + margin) };
}

/** The cost value's allowance for an image by URL and for a file by id (docs/billing.md): the gateway cannot see their size. */
const IMAGE_ALLOWANCE_TOKENS = 6_400;
const FILE_ALLOWANCE_TOKENS = 65_536;

/**
 * The prompt's bound in the cost value (UTF-8 bytes and fixed allowances): below the body's bytes
 * + 1,000 here, and each image's and file's allowance.
 */
function promptBound(body: Record<string, unknown>): number {
  const json = JSON.stringify(body);
  const count = (part: string) => json.split(`"type":"${part}"`).length - 1;
  return Buffer.byteLength(json) + 1_000 + count("image_url") * IMAGE_ALLOWANCE_TOKENS + count("file") * FILE_ALLOWANCE_TOKENS;
}

/** What the simulator's report said (its truth times usageScale), priced: what a dishonest upstream asks for. */
function reportMicro(s: Scenario, vendor: SimLogEntry): bigint {
  const scale = UPSTREAMS[s.upstream]!.usageScale ?? 1;
  const price = PRICES[s.model]!;
  return BigInt(Math.round(vendor.promptTokens * scale)) * price.in + BigInt(Math.round(vendor.completionTokens * scale)) * price.out;
}

/**
 * A request whose client left: its upstream cut within the bound (a stream; a whole reply runs
 * on), and billed at most the vendor's bill plus the stated allowance, part by part (the input's
 * allowance must not hide an output billed beyond its own) and in money.
 */
function leftWithin(s: Scenario, body: Record<string, unknown>, record: Ledger, vendor: SimLogEntry, leftAt?: number): void {
  if (s.stream && leftAt !== undefined) expect(vendor.endedAt - leftAt).toBeLessThanOrEqual(STREAM_CUT_MS_MAX + EVENT_LOOP_LAG_MS_MAX);
  const allowance = leaveAllowance(s, body, vendor, record.durationMs);
  const price = PRICES[s.model]!;
  expect(record.output).toBeLessThanOrEqual(BigInt(vendor.completionTokens) + allowance.output);
  expect(record.input).toBeLessThanOrEqual(BigInt(vendor.promptTokens) + allowance.input);
  const bill = BigInt(vendor.promptTokens) * price.in + BigInt(vendor.completionTokens) * price.out;
  expect(record.billed).toBeLessThanOrEqual(bill + allowance.input * price.in + allowance.output * price.out);
}

/**
 * One generated case's two sides. Honest: vendor's bill ≤ charged ≤ vendor's bill + the stated
 * allowance (exact for a reply read to its end). Dishonest: the proven floor ≤ charged ≤ min(its
 * report, the hold), a report outside the bounds recorded as an anomaly on the usage record.
 */
async function plainCase(s: Scenario, key: { key: string; keyId: string }): Promise<void> {
  await poolAtSpeed(s.model, s.itlMs, key.key);
  // At the edge the upstream would generate far past the wallet if it were told the requested limit.
  const edge = s.edgeWallet ? { outputTokens: 20_000 } : { outputTokens: s.outputTokens };
  Object.assign(sim().options, defaults, UPSTREAMS[s.upstream], { itlMs: s.itlMs }, edge);
  const r = request(s);
  const before = await writtenOff();
  const payer = s.edgeWallet ? await edgeKey(s, r.body) : s.client.kind === "before_first_byte" ? await t.fundedKey(10_000) : key;
  let requestId: string;
  let leftAt: number | undefined;
  if (s.client.kind === "before_first_byte") {
    leftAt = await sendAndLeaveBeforeFirstByte(payer.key, r.path, r.body);
    requestId = await onlyRequestOf(payer.keyId);
  } else {
    const sent = await send(payer.key, r.path, r.body, s.stream || s.client.kind === "all" ? s.client : { kind: "all" });
    if (sent.status !== 200) throw new Error(`refused ${sent.status}: ${JSON.stringify(r.body)}`);
    ({ requestId, leftAt } = sent);
  }
  const record = await usageRecord(requestId);
  const bill = await vendorBill(requestId, s.model);
  const [vendor] = sim().log.byRequestId(requestId);
  // The hold, part by part: the prompt's bound, the output limit the upstream was told (n choices).
  expect(record.input).toBeLessThanOrEqual(BigInt(promptBound(r.body)));
  if (r.outputLimit !== null) expect(record.output).toBeLessThanOrEqual(BigInt(r.outputLimit * s.n));
  expect(record.billed).toBeLessThanOrEqual(record.metered);
  const left = record.status === STATUS_CLIENT_CLOSED;
  // The floor: a report that lies low is raised to what the gateway proved, short of the vendor's bill by the unseen margin at most.
  // An instant upstream is faster than any backend the cut's allowance reckons with (CUT_TPOT_MS_MIN): cut, it is owed its input.
  const instant = left && s.itlMs < CUT_TPOT_MS_MIN;
  const floor = instant ? BigInt(vendor!.promptTokens) * PRICES[s.model]!.in : bill;
  expect(record.billed).toBeGreaterThanOrEqual(floor - (s.upstream === "lies_low" ? await unseenMargin(s, requestId) : 0n));
  if (s.upstream !== "lies_high") expect((await writtenOff()) - before).toBe(0n);
  if (s.upstream === "honest" || left) {
    if (!left)
      expect(record.billed).toBe(bill); // read to its end: the upstream's report, exactly
    else leftWithin(s, r.body, record, vendor!, leftAt);
    if (s.upstream === "honest") expect(record.anomalies).toBeNull();
    return;
  }
  // No report: the floor and the hold bound it, and the record says the report was missing.
  if (s.upstream === "no_usage") return void expect(record.anomalies ?? "").toContain("usage_missing");
  // A report outside the bounds is clamped or raised, and the record says so.
  const report = reportMicro(s, vendor!);
  if (s.upstream === "lies_high") expect(record.billed).toBeLessThanOrEqual(report);
  if (record.billed < report) expect(record.anomalies ?? "").toContain("_over");
  if (record.billed > report) expect(record.anomalies ?? "").toContain("_under");
}

/** Bounded in CI; FUZZ_RUNS raises it locally. */
const FUZZ_RUNS = Number(process.env.FUZZ_RUNS ?? 30);
/** A generated case takes at most a few seconds (120 tokens at 20 ms, a record's wait); the run is bounded by its count. */
const FUZZ_CASE_MS_MAX = 8_000;

test(
  "differential, two-sided: vendor's bill ≤ charged ≤ vendor's bill + the stated allowance (honest); floor ≤ charged ≤ min(report, hold), the anomaly recorded (dishonest)",
  async () => {
    const key = await t.fundedKey(1_000_000);
    const seed = process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : Date.now() % 2_147_483_647;
    const property = fc.asyncProperty(anyScenario, (s) => ("hosted" in s ? hostedCase(s, key.key) : plainCase(s, key)));
    const result = await fc.check(property, { numRuns: FUZZ_RUNS, seed });
    // The seed and the shrunk case on failure: FUZZ_SEED=<seed> replays the run.
    if (result.failed)
      throw new Error(`FUZZ_SEED=${seed} FUZZ_RUNS=${FUZZ_RUNS}\n${fc.defaultReportMessage(result)}\n${String(result.errorInstance)}`);
    console.log(`money-truth fuzz: ${result.numRuns} cases, seed ${seed}`);
    const audit = await t.admin("GET", "/admin/ledger/audit");
    expect(audit.body.ok).toBe(true);
  },
  SETUP_MS_MAX + FUZZ_RUNS * FUZZ_CASE_MS_MAX,
);
