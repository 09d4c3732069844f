/**
 * What the suites of the translated wires (responses.test.ts, messages.test.ts) share: a gateway
 * whose three models go to the simulator's OpenAI, Anthropic and Gemini routes, and the check
 * that a request was billed exactly what the simulator logged × the published price.
 */
import { expect } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sql } from "drizzle-orm";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { simCompletion, simPromptText } from "../src/sim/text.ts";
import type { Logger } from "../src/log.ts";
import { startTestGateway, type TestGateway } from "./helpers.ts";
import { untilValue } from "./until.ts";
import { COUNT_FRAMING_TOKENS_MAX } from "../src/operations/chat/unreported.ts";

export const UPSTREAM_KEY = "upstream-secret";
/** The gateway's environment variable holding UPSTREAM_KEY, which the pools file names. */
export const UPSTREAM_KEY_ENV = "DARVAZE_TEST_UPSTREAM_KEY";
export const SEED = 5;
export const OUTPUT_TOKENS = 8;

/**
 * Catalog prices in micro-toman per token (toman per 1M tokens), as published (USD × 90,000).
 * `openai-responses` is an OpenAI-compatible backend with `responses_api: true`: the simulator's
 * native /v1/responses serves it.
 */
export const VENDORS = [
  { kind: "openai", model: "gpt-4o-mini", upstream: "gpt-4o-mini", inputMicro: 13_500n, outputMicro: 54_000n },
  { kind: "openai-responses", model: "gpt-4.1-mini", upstream: "gpt-4.1-mini", inputMicro: 36_000n, outputMicro: 144_000n },
  { kind: "anthropic", model: "claude-3-5-haiku", upstream: "claude-3-5-haiku-20241022", inputMicro: 72_000n, outputMicro: 360_000n },
  { kind: "gemini", model: "gemini-2.5-flash", upstream: "gemini-2.5-flash", inputMicro: 27_000n, outputMicro: 225_000n },
] as const;
export type Vendor = (typeof VENDORS)[number];

/** The simulator's route each backend is served by, or its start (chat completions log no path). */
const UPSTREAM_PATHS: Record<Vendor["kind"], string | undefined> = {
  openai: undefined,
  "openai-responses": "/v1/responses",
  anthropic: "/v1/messages",
  gemini: "/v1beta/models/gemini-2.5-flash:",
};

/** The suites' system text and question, and the same conversation as the simulator sees it. */
export const SYSTEM = "Be brief.";
export const QUESTION = "Hello, world!";
export const AS_CHAT = [
  { role: "system", content: SYSTEM },
  { role: "user", content: QUESTION },
];

/** A one-pixel PNG, as a data URL. */
export const PIXEL_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

export const WEATHER_PARAMETERS = {
  type: "object",
  properties: { city: { type: "string" }, days: { type: "integer" } },
  required: ["city"],
};

/**
 * `options.log` receives the gateway's log lines; `options.pools` adds pools beside the vendors'
 * (given the simulator's URL).
 */
export async function startWireSuite(
  options: { log?: Logger; pools?: (simUrl: string) => Record<string, unknown> } = {},
): Promise<{ sim: Simulator; t: TestGateway; key: string; accountId: string }> {
  const sim = await startSimulator({ apiKey: UPSTREAM_KEY, seed: SEED, outputTokens: OUTPUT_TOKENS });
  const path = join(mkdtempSync(join(tmpdir(), "darvaze-pools-")), "pools.json");
  const backend = (v: Vendor) => {
    const common = { name: `${v.kind}-sim`, api_key_env: UPSTREAM_KEY_ENV, upstream_model: v.upstream, region: "abroad" };
    if (v.kind === "openai-responses") return { ...common, kind: "openai", url: `${sim.url}/v1`, responses_api: true };
    return { ...common, kind: v.kind, url: v.kind === "openai" ? `${sim.url}/v1` : sim.url };
  };
  const pools = { ...Object.fromEntries(VENDORS.map((v) => [v.model, { backends: [backend(v)] }])), ...options.pools?.(sim.url) };
  writeFileSync(path, JSON.stringify({ pools }));
  const t = await startTestGateway({ DARVAZE_CONFIG: path, [UPSTREAM_KEY_ENV]: UPSTREAM_KEY }, { log: options.log });
  const funded = await t.fundedKey(100_000); // streams without a limit hold for 16,384 output tokens
  return { sim, t, key: funded.key, accountId: funded.accountId };
}

/** The simulator's text for a prompt of these messages (chat shape: role and text content). */
export function expectedText(messages: { role: string; content: string }[], tokens = OUTPUT_TOKENS): string {
  return simCompletion({ seed: SEED, promptText: simPromptText(messages), tokens }).join("");
}

export function simEntry(sim: Simulator, requestId: string) {
  return untilValue(() => sim.log.byRequestId(requestId)[0], { what: `the simulator's entry for ${requestId}` });
}

/** How long a settled request may take to reach the usage records (group commit). */
const RECORD_WAIT_MS_MAX = 10_000;

export async function usageRecord(t: TestGateway, requestId: string) {
  await t.gw.deps.writer.flush();
  const read = async () => {
    const audit = await t.admin("GET", "/admin/ledger/audit"); // writes pending usage first
    expect(audit.body.ok).toBe(true);
    const rows = await t.gw.deps.db.rows<{
      model: string;
      input_units: unknown;
      output_units: unknown;
      billed_micro: unknown;
      status: number;
      ended_by: string | null;
      output_metered_units: number | null;
      output_allowance_units: number | null;
    }>(sql`SELECT model, input_units, output_units, billed_micro, status, ended_by, output_metered_units, output_allowance_units
           FROM usage_records WHERE request_id = ${requestId}`);
    return rows[0];
  };
  const r = await untilValue(read, { msMax: RECORD_WAIT_MS_MAX, what: `the usage record of ${requestId}`, pollMs: 50 });
  return {
    model: r.model,
    input: BigInt(String(r.input_units)),
    output: BigInt(String(r.output_units)),
    billed: BigInt(String(r.billed_micro)),
    status: Number(r.status),
  };
}

/** How a request that ended early was billed, from its usage record (null: it ran to its end). */
export async function endedEarly(t: TestGateway, requestId: string) {
  await usageRecord(t, requestId);
  const [row] = await t.gw.deps.db.rows<{ ended_by: string | null; metered: number | null; allowance: number | null }>(
    sql`SELECT ended_by, output_metered_units AS metered, output_allowance_units AS allowance FROM usage_records WHERE request_id = ${requestId}`,
  );
  return row!.ended_by === null ? null : { by: row!.ended_by, metered: Number(row!.metered), allowance: Number(row!.allowance) };
}

/**
 * The request's usage record holds the simulator's own token counts × the price, with `status`.
 * Returns the simulator's entry.
 */
export async function expectBilledAsLogged(ctx: { sim: Simulator; t: TestGateway }, requestId: string, vendor: Vendor, status = 200) {
  const entry = await simEntry(ctx.sim, requestId);
  expect(entry.model).toBe(vendor.upstream);
  const path = UPSTREAM_PATHS[vendor.kind];
  if (path === undefined) expect(entry.path).toBeUndefined();
  else expect(entry.path).toStartWith(path);
  const record = await usageRecord(ctx.t, requestId);
  expect(record).toEqual({
    model: vendor.model,
    input: BigInt(entry.promptTokens),
    output: BigInt(entry.completionTokens),
    billed: BigInt(entry.promptTokens) * vendor.inputMicro + BigInt(entry.completionTokens) * vendor.outputMicro,
    status,
  });
  return entry;
}

/**
 * A stream its client left after `seen` deltas: the upstream was aborted, and the record bills
 * what reached the gateway before the abort (at least what the client saw, at most what the
 * simulator sent) at the published prices, with status 499.
 */
/**
 * A stream that broke off: an upstream that reported its usage is billed as logged; one that did
 * not (Anthropic's output count comes only at the end) is billed the request's bounds, which
 * cover the vendor's log (its tokenizer is not o200k, so text is bounded by its bytes).
 */
export async function expectBilledCoveringLogged(
  ctx: { sim: Simulator; t: TestGateway },
  requestId: string,
  vendor: Vendor,
  status: number,
) {
  if (vendor.kind !== "anthropic") return expectBilledAsLogged(ctx, requestId, vendor, status);
  const entry = await simEntry(ctx.sim, requestId);
  const record = await usageRecord(ctx.t, requestId);
  expect(record.status).toBe(status);
  expect(record.input).toBeGreaterThanOrEqual(BigInt(entry.promptTokens));
  expect(record.output).toBeGreaterThanOrEqual(BigInt(entry.completionTokens));
  expect(record.billed).toBe(record.input * vendor.inputMicro + record.output * vendor.outputMicro);
  return entry;
}

export async function expectLeftAndBilled(ctx: { sim: Simulator; t: TestGateway }, requestId: string, vendor: Vendor) {
  // The client left: the upstream was cut (the simulator saw its connection close), and billed
  // at least what it generated until then, at most that plus the stated allowance and a count's framing.
  const entry = await simEntry(ctx.sim, requestId);
  expect(entry.aborted).toBe(true);
  const record = await usageRecord(ctx.t, requestId);
  expect(record.status).toBe(499);
  const early = (await endedEarly(ctx.t, requestId))!;
  expect(early.by).toBe("client");
  expect(record.input).toBeGreaterThanOrEqual(BigInt(entry.promptTokens));
  expect(record.output).toBe(BigInt(early.metered + early.allowance));
  expect(record.output).toBeGreaterThanOrEqual(BigInt(entry.completionTokens));
  expect(early.metered).toBeLessThanOrEqual(entry.completionTokens + COUNT_FRAMING_TOKENS_MAX);
  expect(record.billed).toBe(record.input * vendor.inputMicro + record.output * vendor.outputMicro);
  return entry;
}

/** Runs `body` with these simulator options, then puts the suite's defaults back. */
export async function withSimOptions(sim: Simulator, options: Partial<Simulator["options"]>, body: () => Promise<void>): Promise<void> {
  Object.assign(sim.options, options);
  try {
    await body();
  } finally {
    Object.assign(sim.options, { outputTokens: OUTPUT_TOKENS, itlMs: 0, failAfterChunks: null });
  }
}
