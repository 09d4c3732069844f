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
import { startTestGateway, type TestGateway } from "./helpers.ts";

export const UPSTREAM_KEY = "upstream-secret";
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

/** A one-pixel PNG, as a data URL. */
export const PIXEL_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

export const WEATHER_PARAMETERS = {
  type: "object",
  properties: { city: { type: "string" }, days: { type: "integer" } },
  required: ["city"],
};

export async function startWireSuite(): Promise<{ sim: Simulator; t: TestGateway; key: string; accountId: string }> {
  const sim = await startSimulator({ apiKey: UPSTREAM_KEY, seed: SEED, outputTokens: OUTPUT_TOKENS });
  const path = join(mkdtempSync(join(tmpdir(), "darvaze-pools-")), "pools.json");
  const backend = (v: Vendor) => {
    const common = { name: `${v.kind}-sim`, api_key: UPSTREAM_KEY, upstream_model: v.upstream, region: "abroad" };
    if (v.kind === "openai-responses") return { ...common, kind: "openai", url: `${sim.url}/v1`, responses_api: true };
    return { ...common, kind: v.kind, url: v.kind === "openai" ? `${sim.url}/v1` : sim.url };
  };
  const pools = Object.fromEntries(VENDORS.map((v) => [v.model, { backends: [backend(v)] }]));
  writeFileSync(path, JSON.stringify({ pools }));
  const t = await startTestGateway({ DARVAZE_CONFIG: path });
  const funded = await t.fundedKey(10_000);
  return { sim, t, key: funded.key, accountId: funded.accountId };
}

/** The simulator's text for a prompt of these messages (chat shape: role and text content). */
export function expectedText(messages: { role: string; content: string }[], tokens = OUTPUT_TOKENS): string {
  return simCompletion({ seed: SEED, promptText: simPromptText(messages), tokens }).join("");
}

export async function simEntry(sim: Simulator, requestId: string) {
  for (let i = 0; i < 200; i++) {
    const [entry] = sim.log.byRequestId(requestId);
    if (entry) return entry;
    await Bun.sleep(25);
  }
  throw new Error(`the simulator logged nothing for ${requestId}`);
}

export async function usageRecord(t: TestGateway, requestId: string) {
  await t.gw.deps.writer.flush();
  for (let i = 0; i < 100; i++) {
    const audit = await t.admin("GET", "/admin/ledger/audit"); // writes pending usage first
    expect(audit.body.ok).toBe(true);
    const rows = await t.gw.deps.db.rows<{
      model: string;
      input_units: unknown;
      output_units: unknown;
      billed_micro: unknown;
      status: number;
    }>(sql`SELECT model, input_units, output_units, billed_micro, status FROM usage_records WHERE request_id = ${requestId}`);
    if (rows[0]) {
      const r = rows[0];
      return {
        model: r.model,
        input: BigInt(String(r.input_units)),
        output: BigInt(String(r.output_units)),
        billed: BigInt(String(r.billed_micro)),
        status: Number(r.status),
      };
    }
    await Bun.sleep(50);
  }
  throw new Error(`no usage record for ${requestId}`);
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
export async function expectAbortedAndBilled(ctx: { sim: Simulator; t: TestGateway }, requestId: string, vendor: Vendor, seen: number) {
  const entry = await simEntry(ctx.sim, requestId);
  expect(entry.aborted).toBe(true);
  const record = await usageRecord(ctx.t, requestId);
  expect(record.status).toBe(499);
  expect(record.output).toBeGreaterThanOrEqual(BigInt(seen));
  expect(record.output).toBeLessThanOrEqual(BigInt(entry.completionTokens));
  expect(record.input).toBe(BigInt(entry.promptTokens));
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
