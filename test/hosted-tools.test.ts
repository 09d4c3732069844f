/**
 * Hosted tools, bounded and billed: Anthropic's web search through the Messages wire. The
 * simulator runs the searches the way the vendor does (at most the `max_uses` it is sent, each
 * billed per call, its results read as input) and keeps its own bill; the gateway's usage record
 * is checked against it: charged ≥ the simulator's bill, calls never above the `max_uses` the
 * client sent, the tool left out where no backend runs it or the wallet covers no call.
 *
 * Prices are the catalog's list prices at the test rate (USD × 90,000), written out here:
 * claude-sonnet-4 $3 / $15 per 1M tokens, web search $10 per 1,000 calls (900 toman a call).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Simulator } from "../src/sim/server.ts";
import { sseEvents } from "./wireFixtures.ts";
import { SETUP_MS_MAX, startSimGateway, type SimGateway, type TestGateway } from "./helpers.ts";
import { until } from "./until.ts";

const SONNET = { in: 270_000n, out: 1_350_000n, call: 900_000_000n };
const RECORD_WAIT_MS_MAX = 20_000;
const SEARCH = { type: "web_search_20250305", name: "web_search" };

function poolsFile(sim: Simulator): string {
  const path = join(mkdtempSync(join(tmpdir(), "darvaze-pools-")), "pools.json");
  const backend = (name: string, kind: string, upstream_model: string) => ({
    backends: [{ name, kind, url: kind === "openai" ? `${sim.url}/v1` : sim.url, upstream_model, region: "abroad" }],
  });
  const pools = {
    "claude-sonnet-4": backend("anthropic-sim", "anthropic", "claude-sonnet-4-20250514"),
    // A Claude model served by an OpenAI-style backend: it runs no hosted tool.
    "claude-3-7-sonnet": backend("openai-style-sim", "openai", "claude-3-7-sonnet"),
    "gpt-4o-mini": backend("openai-sim", "openai", "gpt-4o-mini"),
  };
  writeFileSync(path, JSON.stringify({ pools }));
  return path;
}

let setup: SimGateway | undefined;
let sim: Simulator;
let t: TestGateway;

beforeAll(async () => {
  setup = await startSimGateway({ outputTokens: 8 }, poolsFile, 1_000_000);
  ({ sim, t } = setup);
}, SETUP_MS_MAX);

afterAll(() => setup?.stop(), SETUP_MS_MAX);

/** Posts a Messages request with the web search tool; the request id and the reply's text. */
async function message(key: string, body: Record<string, unknown>): Promise<{ requestId: string; status: number; text: string }> {
  const response = await fetch(`${t.url}/v1/messages`, {
    method: "POST",
    headers: { "x-api-key": key, "content-type": "application/json", "anthropic-version": "2023-06-01" },
    body: JSON.stringify({ max_tokens: 4096, messages: [{ role: "user", content: "What happened today?" }], ...body }),
  });
  return { requestId: response.headers.get("x-request-id")!, status: response.status, text: await response.text() };
}

/** The request's usage record, as the admin account view shows it. */
async function usageRecord(accountId: string, requestId: string): Promise<Record<string, string>> {
  let record: Record<string, string> | undefined;
  await until(async () => {
    const account = await t.admin("GET", `/admin/accounts/${accountId}`);
    record = account.body.recent_usage.find((u: { request_id: string }) => u.request_id === requestId);
    return record !== undefined;
  }, RECORD_WAIT_MS_MAX);
  return record!;
}

/**
 * The reply as the client reads it: its content blocks' types in order and the searches its usage
 * tells; a stream's blocks are checked to start, stream and stop on their own index, in order.
 */
function replyRead(text: string, stream: boolean): { types: string[]; searches: number | undefined } {
  if (!stream) {
    const message = JSON.parse(text) as { content: { type: string }[]; usage: { server_tool_use?: { web_search_requests: number } } };
    return { types: message.content.map((b) => b.type), searches: message.usage.server_tool_use?.web_search_requests };
  }
  const events = sseEvents(text).map((e) => e.data as Record<string, any>);
  let open = -1;
  const types: string[] = [];
  for (const e of events) {
    if (e.type === "content_block_start") {
      expect(e.index).toBe(types.length);
      open = e.index;
      types.push(e.content_block.type);
    } else if (e.type === "content_block_delta") expect(e.index).toBe(open);
    else if (e.type === "content_block_stop") expect(e.index).toBe(open);
  }
  return { types, searches: events.findLast((e) => e.type === "message_delta")!.usage.server_tool_use?.web_search_requests };
}

/** What the simulator billed for the request, by its own log. */
function vendorBill(requestId: string): { micro: bigint; calls: number } {
  const entries = sim.log.byRequestId(requestId);
  expect(entries).toHaveLength(1);
  const e = entries[0]!;
  const calls = e.webSearchCalls ?? 0;
  return { micro: BigInt(e.promptTokens) * SONNET.in + BigInt(e.completionTokens) * SONNET.out + BigInt(calls) * SONNET.call, calls };
}

describe.each([false, true])("stream: %p", (stream) => {
  test.each([
    { maxUses: 3, searches: 5, calls: 3 },
    { maxUses: 4, searches: 2, calls: 2 },
    { maxUses: 500, searches: 40, calls: 10 },
    { maxUses: undefined, searches: 40, calls: 10 },
  ])("max_uses $maxUses, the model searching $searches times: $calls calls run and billed", async (c) => {
    sim.options.webSearchCalls = c.searches;
    const funded = await t.fundedKey(1_000_000);
    const { requestId, status, text } = await message(funded.key, {
      model: "claude-sonnet-4",
      stream,
      tools: [{ ...SEARCH, ...(c.maxUses ? { max_uses: c.maxUses } : {}) }],
    });
    expect(status).toBe(200);
    expect(text.length).toBeGreaterThan(0);
    const bill = vendorBill(requestId);
    expect(bill.calls).toBe(c.calls);
    // The client sees each search as Anthropic sends it, and its usage tells the searches billed.
    const read = replyRead(text, stream);
    expect(read.types).toEqual([...Array.from({ length: c.calls }, () => ["server_tool_use", "web_search_tool_result"]).flat(), "text"]);
    expect(read.searches).toBe(c.calls);
    const record = await usageRecord(funded.accountId, requestId);
    expect(record).toMatchObject({ hosted_call_units: String(c.calls), hosted_call_unit: "web_search_call" });
    expect((record.prices_toman_per_1m as unknown as Record<string, string>).hosted_call).toBe(String(SONNET.call));
    // An honest vendor: charged exactly its bill.
    expect(BigInt(record.billed_micro_toman!)).toBe(bill.micro);
  });
});

test("where no backend runs the tool it is left out and the request answers: a Claude model on an OpenAI-style backend, a model without a search price", async () => {
  sim.options.webSearchCalls = 3;
  const funded = await t.fundedKey(1_000_000);
  for (const model of ["claude-3-7-sonnet", "gpt-4o-mini"]) {
    const { requestId, status } = await message(funded.key, { model, tools: [{ ...SEARCH, max_uses: 3 }] });
    expect(status).toBe(200);
    expect(sim.log.byRequestId(requestId)[0]!.webSearchCalls).toBeUndefined();
    expect(await usageRecord(funded.accountId, requestId)).toMatchObject({ hosted_call_units: "0" });
  }
});

// At the wallet's edge: the least output (4,096 tokens, 5,529.6 toman) and a prompt of some
// hundred tokens fit; each call holds 900 toman and 16,384 result tokens (5,323.68 toman).
test.each([
  { toman: 13_000, calls: 1 },
  { toman: 6_000, calls: 0 },
])("a wallet of $toman toman covers $calls of the 5 searches asked for; the rest are not sent", async (c) => {
  sim.options.webSearchCalls = 5;
  const funded = await t.fundedKey(c.toman);
  const { requestId, status } = await message(funded.key, { model: "claude-sonnet-4", tools: [{ ...SEARCH, max_uses: 5 }] });
  expect(status).toBe(200);
  const bill = vendorBill(requestId);
  expect(bill.calls).toBe(c.calls);
  const record = await usageRecord(funded.accountId, requestId);
  expect(BigInt(record.billed_micro_toman!)).toBe(bill.micro);
  expect(BigInt(record.billed_micro_toman!)).toBeLessThanOrEqual(BigInt(c.toman) * 1_000_000n);
});

test.each([false, true])(
  "the Responses wire's web_search on a Claude model runs as Anthropic's web search, max_tool_calls as its max_uses, each search a web_search_call item (stream: %p)",
  async (stream) => {
    sim.options.webSearchCalls = 5;
    const funded = await t.fundedKey(1_000_000);
    const response = await fetch(`${t.url}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${funded.key}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: "claude-sonnet-4",
        input: "What happened today?",
        tools: [{ type: "web_search" }],
        max_tool_calls: 2,
        stream,
      }),
    });
    const requestId = response.headers.get("x-request-id")!;
    const text = await response.text();
    const events = stream ? sseEvents(text).map((e) => e.data as Record<string, any>) : [];
    const reply = (stream ? events.at(-1)!.response : JSON.parse(text)) as { status: string; output: { type: string; status: string }[] };
    expect(reply.status).toBe("completed");
    expect(reply.output.map((item) => item.type)).toEqual(["web_search_call", "web_search_call", "message"]);
    expect(reply.output.slice(0, 2).map((item) => item.status)).toEqual(["completed", "completed"]);
    if (stream) expect(events.filter((e) => e.type === "response.web_search_call.completed")).toHaveLength(2);
    const bill = vendorBill(requestId);
    expect(bill.calls).toBe(2);
    const record = await usageRecord(funded.accountId, requestId);
    expect(record).toMatchObject({ hosted_call_units: "2" });
    expect(BigInt(record.billed_micro_toman!)).toBe(bill.micro);
  },
);
