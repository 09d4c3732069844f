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
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import fc from "fast-check";
import type { SimOptions } from "../src/sim/options.ts";
import { ADMIN_TOKEN, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { until } from "./until.ts";

/** Micro-toman per token, in and out (USD per 1M × 90,000). */
const PRICES: Record<string, { in: bigint; out: bigint }> = {
  "gpt-4o-mini": { in: 13_500n, out: 54_000n },
  "deepseek-v3": { in: 24_300n, out: 99_000n },
  "deepseek-r1": { in: 49_500n, out: 197_100n },
};
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
  /** The upstream anomalies the record keeps (`output_over`, `input_under`), or null. */
  anomalies: string | null;
}

async function usageRecord(requestId: string): Promise<Ledger> {
  let row: Record<string, unknown> | undefined;
  await until(async () => {
    await t.gw.deps.writer.flush();
    [row] = await t.gw.deps.db.rows<Record<string, unknown>>(sql`
      SELECT input_units::text AS input, output_units::text AS output, billed_micro::text AS billed,
             metered_micro::text AS metered, status, anomalies FROM usage_records WHERE request_id = ${requestId}`);
    return row !== undefined;
  }, RECORD_WAIT_MS_MAX);
  return {
    input: BigInt(String(row!.input)),
    output: BigInt(String(row!.output)),
    billed: BigInt(String(row!.billed)),
    metered: BigInt(String(row!.metered)),
    status: Number(row!.status),
    anomalies: (row!.anomalies as string | null) ?? null,
  };
}

/** The simulator's bill for a request: its own count of the prompt and of what it generated. */
async function vendorBill(requestId: string, model: string): Promise<bigint> {
  await until(() => sim().log.byRequestId(requestId).length > 0, RECORD_WAIT_MS_MAX);
  const price = PRICES[model]!;
  let bill = 0n;
  for (const e of sim().log.byRequestId(requestId)) bill += BigInt(e.promptTokens) * price.in + BigInt(e.completionTokens) * price.out;
  return bill;
}

type Client = { kind: "all" } | { kind: "leave"; afterChunks: number };

/** Posts a body; reads the reply as the client behaviour says. The request id, or null when refused. */
async function send(
  key: string,
  path: string,
  body: Record<string, unknown>,
  client: Client = { kind: "all" },
): Promise<{ requestId: string; status: number }> {
  const abort = new AbortController();
  const response = await fetch(`${t.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: abort.signal,
  });
  const requestId = response.headers.get("x-request-id")!;
  if (client.kind === "all" || response.status !== 200 || !response.body) {
    await response.text();
    return { requestId, status: response.status };
  }
  const reader = response.body.getReader();
  let chunks = 0;
  while (chunks < client.afterChunks) {
    const read = await reader.read();
    if (read.done) break;
    chunks++;
  }
  abort.abort();
  await reader.cancel().catch(() => {});
  return { requestId, status: response.status };
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
      // The vendor bills the refusal's ~1,000 tokens, an image's 765 and a file's 1,000; the messages' text is a dozen.
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
                { type: "file", file: { file_id: "file-abc" } },
              ],
            },
          ],
        },
        2_700n,
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
});

/** The generated cases: a request on a wire, a client, an upstream and a wallet. */
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
const upstream = fc.constantFrom("honest", "no_usage", "lies_high", "lies_low", "slow", "cancel_bills_all");
const client = fc.oneof(
  fc.constant<Client>({ kind: "all" }),
  fc.constant<Client>({ kind: "leave", afterChunks: 0 }),
  fc.integer({ min: 1, max: 40 }).map((afterChunks): Client => ({ kind: "leave", afterChunks })),
);
const scenario = fc
  .record({
    wire: fc.constantFrom("chat", "responses", "messages"),
    model: fc.constantFrom("gpt-4o-mini", "deepseek-v3", "deepseek-r1"),
    stream: fc.boolean(),
    maxTokens: fc.option(fc.integer({ min: 1, max: 300 }), { nil: undefined }),
    text: sentence,
    features: chatFeatures,
    upstream,
    client,
    outputTokens: fc.constantFrom(10, 120),
    /** Choices (`n`, chat only): the hold covers n × the output limit. */
    n: fc.integer({ min: 1, max: 3 }),
    /** A wallet that covers about 6,000 output tokens, below the default limit: a stream without max_tokens is lowered. */
    edgeWallet: fc.boolean(),
  })
  // At the wallet's edge: a chat stream without max_tokens, images or files (whose allowances would cover the rest).
  .map((s) =>
    s.edgeWallet
      ? { ...s, wire: "chat" as const, stream: true, maxTokens: undefined, features: { ...s.features, image: false, file: false } }
      : s,
  );
type Scenario = typeof scenario extends fc.Arbitrary<infer T> ? T : never;

function chatMessages(s: Scenario): unknown[] {
  const f = s.features;
  const parts: unknown[] = [{ type: "text", text: s.text }];
  if (f.image) parts.push({ type: "image_url", image_url: { url: "https://example.com/a.png" } });
  if (f.file) parts.push({ type: "file", file: { file_id: "file-abc" } });
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

/** The request as the scenario's wire sends it. */
function request(s: Scenario): { path: string; body: Record<string, unknown> } {
  const stream = s.stream;
  if (s.wire === "responses") {
    const body: Record<string, unknown> = { model: s.model, input: s.text, stream };
    if (s.maxTokens !== undefined) body.max_output_tokens = Math.max(16, s.maxTokens);
    return { path: "/v1/responses", body };
  }
  if (s.wire === "messages") {
    return {
      path: "/v1/messages",
      body: { model: s.model, max_tokens: s.maxTokens ?? 300, stream, messages: [{ role: "user", content: s.text }] },
    };
  }
  const body: Record<string, unknown> = { model: s.model, stream, messages: chatMessages(s) };
  if (s.maxTokens !== undefined) body.max_tokens = s.maxTokens;
  if (s.n > 1) body.n = s.n;
  if (s.features.tools) body.tools = s.features.tools;
  if (s.features.schema)
    body.response_format = { type: "json_schema", json_schema: { name: "x", schema: { type: "object", description: s.features.schema } } };
  return { path: "/v1/chat/completions", body };
}

const UPSTREAMS: Record<string, Partial<SimOptions>> = {
  honest: {},
  no_usage: { omitUsage: true },
  lies_high: { usageScale: 3 },
  lies_low: { usageScale: 0.5 },
  slow: { itlMs: 3 },
  cancel_bills_all: { itlMs: 2, cancelBills: "all" },
};

/** A fresh wallet for ~6,000 output tokens per choice beyond the prompt's byte bound (which is below the body's bytes + 1,000). */
async function edgeKey(s: Scenario, body: Record<string, unknown>): Promise<string> {
  const price = PRICES[s.model]!;
  const micro = price.out * 6_000n * BigInt(s.n) + price.in * BigInt(Buffer.byteLength(JSON.stringify(body)) + 1_000);
  return (await t.fundedKey((Number(micro) / 1_000_000).toFixed(6))).key;
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
/** The Claude model served by the simulator's Anthropic wire (the default pools speak OpenAI's), set once. */
function withAnthropicPool(): Promise<void> {
  anthropicPool ??= t
    .admin("PUT", `/admin/pools/${HOSTED.model}`, {
      backends: [
        { name: "anthropic-sim", kind: "anthropic", url: sim().url, upstream_model: "claude-sonnet-4-20250514", region: "abroad" },
      ],
    })
    .then((r) => {
      if (r.status !== 200) throw new Error(`pool not set: ${r.status} ${JSON.stringify(r.body)}`);
    });
  return anthropicPool;
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

/** Bounded in CI; FUZZ_RUNS raises it locally. */
const FUZZ_RUNS = Number(process.env.FUZZ_RUNS ?? 30);

test("differential: charged ≥ the vendor's bill (equal against an honest upstream), within the hold, nothing written off, the audit exact", async () => {
  const { key } = await t.fundedKey(1_000_000);
  const property = fc.asyncProperty(anyScenario, async (s) => {
    if ("hosted" in s) return hostedCase(s, key);
    // At the edge the upstream would generate far past the wallet if it were told the requested limit.
    const edge = s.edgeWallet ? { outputTokens: 20_000, itlMs: 0 } : { outputTokens: s.outputTokens };
    Object.assign(sim().options, defaults, UPSTREAMS[s.upstream], edge);
    const r = request(s);
    const before = await writtenOff();
    const payer = s.edgeWallet ? await edgeKey(s, r.body) : key;
    const { requestId, status } = await send(payer, r.path, r.body, s.stream ? s.client : { kind: "all" });
    if (status !== 200) throw new Error(`refused ${status}: ${JSON.stringify(r.body)}`);
    const record = await usageRecord(requestId);
    const bill = await vendorBill(requestId, s.model);
    // A report that lies low is raised to what the gateway proved: short of the vendor's bill by the margin at most.
    expect(record.billed).toBeGreaterThanOrEqual(bill - (s.upstream === "lies_low" ? await unseenMargin(s, requestId) : 0n));
    const gone = s.stream && s.client.kind === "leave";
    // An honest upstream that was read to its end (or whose reply was whole) is billed exactly.
    if (s.upstream === "honest" && !gone) expect(record.billed).toBe(bill);
    if (s.upstream !== "lies_high") expect((await writtenOff()) - before).toBe(0n);
    // The hold bounds the charge (asserted in the code too: it throws under test).
    expect(record.billed).toBeLessThanOrEqual(record.metered);
  });
  await fc.assert(property, { numRuns: FUZZ_RUNS, verbose: 1, seed: process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : undefined });
  const audit = await t.admin("GET", "/admin/ledger/audit");
  expect(audit.body.ok).toBe(true);
}, 240_000);
