/**
 * Batch prices, through the official clients, embedded and on NATS + PostgreSQL: a line is billed
 * the batch price only when its model has one and an in-country backend (the operator's own GPUs,
 * whose batch price is what is billed): exactly its usage at the batch prices, never above the
 * live price; a line served abroad (the vendor's live API) at the live price, the batch's
 * `pricing` and `estimate` saying which; BATCH_PRICING batch_only refuses at create a batch with
 * such lines, naming them. The simulator's own counts are the vendor's bill.
 */
import { BATCH_POLL_MS } from "./batchPoll.ts";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import { sql } from "drizzle-orm";
import OpenAI, { toFile } from "openai";
import { runLine } from "../src/batches/line.ts";
import { lineRequestId } from "../src/batches/store.ts";
import { balanceMicroOf, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { until } from "./until.ts";

/** Toman per 1M tokens (USD per 1M × 90,000): deepseek-v3 is in-country here (open weight), gpt-4o-mini abroad. */
const DEEPSEEK = { live: { in: 24_300n, out: 99_000n }, batch: { in: 12_150n, out: 49_500n } };
const MINI_LIVE = { in: 13_500n, out: 54_000n };
/** The operator's batch price of deepseek-v3, USD per 1M: half its list price. */
const DEEPSEEK_BATCH_USD = { input_token: "0.135", output_token: "0.55" };
const WAIT_MS_MAX = 30_000;

let t: TestGateway;
let only: TestGateway;
let key: string;
let client: OpenAI;

/** Sets a model's batch price through the admin API (the entry as GET /admin/catalog has it). */
async function setBatchPrice(gw: TestGateway, model: string, batch: Record<string, string> | null) {
  const catalog = await gw.admin("GET", "/admin/catalog");
  const { id: _, ...entry } = catalog.body.data.find((e: { id: string }) => e.id === model);
  return gw.admin("PUT", `/admin/catalog/models/${model}`, { ...entry, batch_usd_per_1m: batch, by: "test" });
}

beforeAll(async () => {
  // Polls are free but rated (FREE_RPM): these tests poll faster than a client need.
  [t, only] = await Promise.all([
    startTestGateway({ FREE_RPM: "100000" }),
    startTestGateway({ FREE_RPM: "100000", BATCH_PRICING: "batch_only" }),
  ]);
  for (const gw of [t, only]) expect((await setBatchPrice(gw, "deepseek-v3", DEEPSEEK_BATCH_USD)).status).toBe(200);
  ({ key } = await t.fundedKey(1000));
  client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
}, 2 * SETUP_MS_MAX);
afterAll(async () => Promise.all([t?.stop(), only?.stop()]), SETUP_MS_MAX);

const chatLine = (id: string, model: string, text = "Hello, world!") =>
  JSON.stringify({
    custom_id: id,
    method: "POST",
    url: "/v1/chat/completions",
    body: { model, messages: [{ role: "user", content: text }], max_tokens: 16 },
  });

async function create(on: OpenAI, lines: string[]) {
  const file = await on.files.create({ file: await toFile(Buffer.from(`${lines.join("\n")}\n`), "in.jsonl"), purpose: "batch" });
  return on.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
}

type Priced = OpenAI.Batch & { pricing: string; estimate: { models: any[]; currency: string; per: number }; cost_micro_toman: string };

async function completed(id: string): Promise<Priced> {
  let batch = await client.batches.retrieve(id);
  await until(async () => (batch = await client.batches.retrieve(id)).status === "completed", {
    msMax: WAIT_MS_MAX,
    pollMs: BATCH_POLL_MS,
  });
  return batch as Priced;
}

/** A request's usage record: its units, prices and what it was billed. */
async function recordOf(gw: TestGateway, requestId: string) {
  let row: Record<string, string> | undefined;
  await until(async () => {
    await gw.gw.deps.writer.flush();
    [row] = await gw.gw.deps.db.rows<Record<string, string>>(sql`
      SELECT input_units::text AS input, output_units::text AS output, billed_micro::text AS billed,
             input_price_per_1m::text AS in_price, output_price_per_1m::text AS out_price
      FROM usage_records WHERE request_id = ${requestId}`);
    return row !== undefined;
  }, WAIT_MS_MAX);
  return { billed: BigInt(row!.billed!), inPrice: BigInt(row!.in_price!), outPrice: BigInt(row!.out_price!) };
}

/** What the simulator (the vendor) counted for a request, at the given prices. */
function billAt(gw: TestGateway, requestId: string, prices: { in: bigint; out: bigint }): bigint {
  let bill = 0n;
  for (const e of gw.sim!.log.byRequestId(requestId)) bill += BigInt(e.promptTokens) * prices.in + BigInt(e.completionTokens) * prices.out;
  return bill;
}

/** The wallet once its charges are posted (another node's travel through the usage stream). */
async function balanceAfter(expected: bigint): Promise<bigint> {
  let balance = 0n;
  await until(async () => (balance = await balanceMicroOf(t.url, key)) === expected, 10_000).catch(() => {});
  return balance;
}

/** Checks each line's record against the vendor's count: at `prices`, and within the live price `live`. The lines' sum. */
async function linesBilled(
  batch: Priced,
  lines: { line: number; prices: { in: bigint; out: bigint }; live: { in: bigint; out: bigint } }[],
) {
  let sum = 0n;
  for (const { line, prices, live } of lines) {
    const requestId = lineRequestId(batch.id, line);
    const record = await recordOf(t, requestId);
    expect(record.billed).toBeGreaterThan(0n);
    expect(record.billed).toBe(billAt(t, requestId, prices)); // exactly the usage at its price: what is billed for it
    expect(record.billed).toBeLessThanOrEqual(billAt(t, requestId, live)); // never above the live price
    expect([record.inPrice, record.outPrice]).toEqual([prices.in, prices.out]);
    sum += record.billed;
  }
  return sum;
}

describe("the catalog's batch price", () => {
  test("/v1/models shows it; one above the live price, or for a unit the model does not price, is refused naming the unit", async () => {
    const model = (await (await fetch(`${t.url}/v1/models/deepseek-v3`, { headers: { authorization: `Bearer ${key}` } })).json()) as any;
    expect(model.pricing_batch).toEqual({ input: 12_150, output: 49_500 });
    expect(model.pricing).toMatchObject({ input: 24_300, output: 99_000 });
    const above = await setBatchPrice(t, "deepseek-v3", { input_token: "0.28", output_token: "0.55" });
    expect(above.status).toBe(400);
    expect(above.body.error.message).toContain("batch price of input_token, USD 0.28, is above its price of USD 0.27");
    const unpriced = await setBatchPrice(t, "deepseek-v3", { ...DEEPSEEK_BATCH_USD, cache_read_token: "0.01" });
    expect(unpriced.status).toBe(400);
    expect(unpriced.body.error.message).toContain("names cache_read_token, which it does not price");
    const admin = await t.admin("GET", "/admin/catalog");
    expect(admin.body.data.find((e: { id: string }) => e.id === "deepseek-v3").batch_usd_per_1m).toEqual(DEEPSEEK_BATCH_USD);
  });
});

describe("which lines get the batch price", () => {
  test("an in-country model with a batch price: pricing batch, each line exactly its usage at the batch prices, the wallet's drop their sum; live stays live", async () => {
    const before = await balanceMicroOf(t.url, key);
    const created = (await create(client, [chatLine("a", "deepseek-v3"), chatLine("b", "deepseek-v3", "Good day to you")])) as Priced;
    expect(created.pricing).toBe("batch");
    expect(created.estimate).toEqual({
      models: [{ model: "deepseek-v3", lines: 2, pricing: "batch", toman_per_1m: { input_token: 12_150, output_token: 49_500 } }],
      currency: "toman",
      per: 1_000_000,
    });
    const batch = await completed(created.id);
    expect(batch.request_counts).toEqual({ total: 2, completed: 2, failed: 0 });
    const at = { prices: DEEPSEEK.batch, live: DEEPSEEK.live };
    const sum = await linesBilled(batch, [
      { line: 1, ...at },
      { line: 2, ...at },
    ]);
    expect(BigInt(batch.cost_micro_toman)).toBe(sum);
    expect(await balanceAfter(before - sum)).toBe(before - sum);

    // The same model asked live costs the live price.
    const response = await fetch(`${t.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "deepseek-v3", messages: [{ role: "user", content: "Hello, world!" }], max_tokens: 16 }),
    });
    expect(response.status).toBe(200);
    const requestId = response.headers.get("x-request-id")!;
    const live = await recordOf(t, requestId);
    expect(live.billed).toBe(billAt(t, requestId, DEEPSEEK.live));
    expect(live.billed).toBeGreaterThan(billAt(t, requestId, DEEPSEEK.batch));
  });

  test("a model served abroad stays at the live price though its vendor has a batch price; a batch of both is mixed, each line at its own", async () => {
    const abroad = (await create(client, [chatLine("x", "gpt-4o-mini")])) as Priced;
    expect(abroad.pricing).toBe("live");
    expect(abroad.estimate.models).toEqual([
      {
        model: "gpt-4o-mini",
        lines: 1,
        pricing: "live",
        reason: "no_in_country_backend",
        toman_per_1m: { input_token: 13_500, output_token: 54_000, cache_read_token: 6_750 },
      },
    ]);
    const before = await balanceMicroOf(t.url, key);
    const created = (await create(client, [
      chatLine("m1", "gpt-4o-mini"),
      chatLine("m2", "deepseek-v3"),
      chatLine("m3", "gpt-4o-mini"),
    ])) as Priced;
    expect(created.pricing).toBe("mixed");
    expect(created.estimate.models.map((m) => [m.model, m.lines, m.pricing])).toEqual([
      ["deepseek-v3", 1, "batch"],
      ["gpt-4o-mini", 2, "live"],
    ]);
    const batch = await completed(created.id);
    const sum = await linesBilled(batch, [
      { line: 1, prices: MINI_LIVE, live: MINI_LIVE },
      { line: 2, prices: DEEPSEEK.batch, live: DEEPSEEK.live },
      { line: 3, prices: MINI_LIVE, live: MINI_LIVE },
    ]);
    expect(BigInt(batch.cost_micro_toman)).toBe(sum);
    const abroadSum = await linesBilled((await completed(abroad.id)) as Priced, [{ line: 1, prices: MINI_LIVE, live: MINI_LIVE }]);
    expect(await balanceAfter(before - sum - abroadSum)).toBe(before - sum - abroadSum);
  });

  test("Message Batches: the same pricing and estimate on Anthropic's object, the requests at the batch prices", async () => {
    const anthropic = new Anthropic({ baseURL: t.url, apiKey: key, maxRetries: 0 });
    const params = { model: "deepseek-v3", max_tokens: 16, messages: [{ role: "user" as const, content: "Hello, world!" }] };
    const created = await anthropic.messages.batches.create({ requests: [{ custom_id: "a", params }] });
    expect(created).toMatchObject({ pricing: "batch", estimate: { models: [{ model: "deepseek-v3", lines: 1, pricing: "batch" }] } });
    await until(async () => (await anthropic.messages.batches.retrieve(created.id)).processing_status === "ended", {
      msMax: WAIT_MS_MAX,
      pollMs: BATCH_POLL_MS,
    });
    const requestId = lineRequestId(created.id, 1);
    const record = await recordOf(t, requestId);
    expect(record.billed).toBe(billAt(t, requestId, DEEPSEEK.batch));
  });

  test("a line at the batch price whose model has no batch price (removed since its batch was made) is not run nor billed", async () => {
    const served = t.sim!.log.totals.requests;
    const { keyId } = await t.fundedKey(10);
    const body = { model: "mistral-small", messages: [{ role: "user", content: "Hello" }], max_tokens: 16 };
    const line = { endpoint: "/v1/chat/completions" as const, requestId: "req_gone_1", keyId, residency: null, body };
    const reply = await runLine(t.gw.deps, { ...line, batchPrice: true, signal: new AbortController().signal });
    expect(reply.statusCode).toBe(403);
    expect((reply.body as { error: { code: string } }).error.code).toBe("model_forbidden");
    expect(reply.costMicro).toBe(0n);
    expect(t.sim!.log.totals.requests).toBe(served);
  });
});

describe("BATCH_PRICING batch_only", () => {
  test("a batch with lines at the live price is refused at create, naming them; one all at the batch price runs at it", async () => {
    const { key: onlyKey } = await only.fundedKey(1000);
    const on = new OpenAI({ baseURL: `${only.url}/v1`, apiKey: onlyKey, maxRetries: 0 });
    const refused = await create(on, [chatLine("a", "deepseek-v3"), chatLine("b", "gpt-4o-mini"), chatLine("c", "mistral-small")]).then(
      () => null,
      (error: { status?: number; message: string }) => error,
    );
    expect(refused?.status).toBe(400);
    expect(refused?.message).toContain("line 2 (gpt-4o-mini has no in-country backend");
    expect(refused?.message).toContain("line 3 (mistral-small has no batch price)");
    expect(refused?.message).not.toContain("line 1");
    expect((await on.batches.list()).data).toHaveLength(0);

    const anthropic = new Anthropic({ baseURL: only.url, apiKey: onlyKey, maxRetries: 0 });
    const params = { model: "gpt-4o-mini", max_tokens: 16, messages: [{ role: "user" as const, content: "Hello" }] };
    const messages = await anthropic.messages.batches.create({ requests: [{ custom_id: "a", params }] }).then(
      () => null,
      (error: { status?: number; error?: unknown }) => error,
    );
    expect(messages?.status).toBe(400);
    expect(messages?.error).toMatchObject({ error: { type: "invalid_request_error" } });

    const created = (await create(on, [chatLine("a", "deepseek-v3")])) as Priced;
    expect(created.pricing).toBe("batch");
    let batch = created as OpenAI.Batch;
    await until(async () => (batch = await on.batches.retrieve(created.id)).status === "completed", {
      msMax: WAIT_MS_MAX,
      pollMs: BATCH_POLL_MS,
    });
    const requestId = lineRequestId(created.id, 1);
    expect((await recordOf(only, requestId)).billed).toBe(billAt(only, requestId, DEEPSEEK.batch));
  });

  test("the models are read at upload and kept with the file; a file kept without them (uploaded before) is counted at create, refused the same", async () => {
    const { key: onlyKey } = await only.fundedKey(1000);
    const on = new OpenAI({ baseURL: `${only.url}/v1`, apiKey: onlyKey, maxRetries: 0 });
    const lines = [chatLine("a", "deepseek-v3"), ...Array.from({ length: 12 }, (_, i) => chatLine(`m${i}`, "gpt-4o-mini-2024-07-18"))];
    const file = await on.files.create({ file: await toFile(Buffer.from(`${lines.join("\n")}\n`), "in.jsonl"), purpose: "batch" });
    const kept = async () =>
      (await only.gw.deps.db.rows<{ models: unknown }>(sql`SELECT line_models AS models FROM files WHERE id = ${file.id}`))[0]!.models;
    const summary = [
      { model: "deepseek-v3", lines: 1, first: [1] },
      { model: "gpt-4o-mini-2024-07-18", lines: 12, first: [2, 3, 4, 5, 6, 7, 8, 9, 10, 11] },
    ];
    expect(await kept()).toEqual(summary);
    const refusal = async () =>
      on.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" }).then(
        () => null,
        (error: { status?: number; message: string }) => [error.status, error.message],
      );
    const named = "line 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 and 2 more (gpt-4o-mini has no in-country backend";
    const fromKept = await refusal();
    expect(fromKept?.[0]).toBe(400);
    expect(fromKept?.[1]).toContain(named);
    await only.gw.deps.db.rows(sql`UPDATE files SET line_models = NULL WHERE id = ${file.id}`);
    expect(await refusal()).toEqual(fromKept);
    expect(await kept()).toEqual(summary);
  });
});
