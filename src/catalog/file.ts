/**
 * The catalog file (`src/catalog/models.json`): every model the product ships with, its aliases,
 * limits, wire capabilities and vendor list prices in USD by unit, validated by the schema below.
 * The database seeds from it at start-up; operators change models afterwards through the admin
 * API and `gw catalog` (catalog/changes.ts), which validate with the same schema.
 *
 * A model must have a price for every unit it reports (`reportedUnits`): a file or a change that
 * leaves one out is refused, naming the model and the unit, so no unit is ever billed at zero by
 * omission.
 */
import { z } from "zod";
import { batchPriceKey, parseUsd, splitPriceKeys, tierPriceKey, USD_PER_1M_MAX } from "./prices.ts";
import { UNIT_PRICE_KEYS } from "../units.ts";

export const OPERATIONS = ["chat", "embeddings", "images", "speech", "transcription"] as const;
export type Operation = (typeof OPERATIONS)[number];

/** Model ids and aliases: what clients write in `model`. */
export const MODEL_ID_CHARS_MAX = 128;
export const ALIASES_MAX = 32;
export const HOSTED_TOOLS_MAX = 8;
export const SOURCE_PAGES_MAX = 8;
export const CONTEXT_WINDOW_MAX = 100_000_000;

export const modelId = z
  .string()
  .min(1)
  .max(MODEL_ID_CHARS_MAX)
  .regex(/^[a-z0-9][a-z0-9._:-]*$/, "lower-case letters, digits, `.`, `_`, `:` and `-`, starting with a letter or digit");

/** The units of the catalog by name: the priced units' own keys (cache reads and writes) among them. */
const NAMED_UNITS = [
  "input_token",
  "output_token",
  ...UNIT_PRICE_KEYS.keys(),
  "image_input_token",
  "image_output_token",
  "character",
  "audio_second",
];

/**
 * Units, each priced in USD per 1M units. Tokens: `input_token`, `output_token`,
 * `cache_read_token`, `cache_write_token` (a 5-minute cache write), `cache_write_1h_token`,
 * `image_input_token`, `image_output_token`; `character` (speech input), `audio_second`
 * (transcription), `image_<W>x<H>_<quality>` (one image), `<tool>_call` (one hosted-tool call).
 */
export const unitName = z
  .string()
  .regex(
    new RegExp(`^(${[...NAMED_UNITS, "image_\\d+x\\d+_[a-z]+", "[a-z][a-z0-9_]*_call"].join("|")})$`),
    `a known unit: ${NAMED_UNITS.join(", ")}, image_<W>x<H>_<quality> or <tool>_call`,
  );

const usdPrice = z.string().refine(
  (usd) => {
    try {
      return parseUsd(usd) <= parseUsd(String(USD_PER_1M_MAX));
    } catch {
      return false;
    }
  },
  { message: `a non-negative decimal string of USD, at most 9 decimals ("0.55"), at most ${USD_PER_1M_MAX}` },
);

/**
 * How a model's reasoning reaches the client and the bill: `none`; `hidden` (counted in the
 * output tokens, not shown: OpenAI, Gemini); `thinking_blocks` (Anthropic's thinking content,
 * billed as output); `reasoning_content` (a separate text field, billed as output).
 */
export const reasoningReport = z.enum(["none", "hidden", "thinking_blocks", "reasoning_content"]);

export const capabilitiesSchema = z.strictObject({
  streaming: z.boolean(),
  tools: z.boolean(),
  /** Vendor-run tools (`web_search`, `code_execution`): each is billed per call at `<tool>_call`. */
  hosted_tools: z
    .array(z.string().regex(/^[a-z][a-z0-9_]*$/))
    .max(HOSTED_TOOLS_MAX)
    .default([]),
  reasoning: reasoningReport,
  /** Takes a reasoning effort (`reasoning_effort`, `reasoning.effort`, Messages' `thinking`). */
  reasoning_effort: z.boolean().default(false),
  images_in: z.boolean(),
  images_out: z.boolean().default(false),
  audio_in: z.boolean().default(false),
  audio_out: z.boolean().default(false),
  /**
   * Prompt cache: `none`; `read` (the vendor caches by itself and reports reads, OpenAI and
   * Gemini); `read_write` (the client asks for writes, 5-minute and 1-hour, Anthropic).
   */
  cache: z.enum(["none", "read", "read_write"]).default("none"),
  /** The reply reports image tokens (`usage.input_tokens_details`), billed by token unit (gpt-image-1). */
  image_tokens: z.boolean().default(false),
  /**
   * Takes Anthropic's `context-1m-2025-08-07` beta: the prompt may pass the standard window only
   * with it, so its long-context tier (`tier`) applies only to a request that asks for it.
   */
  context_1m: z.boolean().default(false),
});
export type Capabilities = z.infer<typeof capabilitiesSchema>;

const sourcePages = z
  .array(z.strictObject({ url: z.string().url(), read: z.iso.date() }))
  .max(SOURCE_PAGES_MAX)
  .default([]);

/**
 * Where a model's prices were read: the vendor's public pages and the date, or a note saying why
 * there is none; `limits`: where its output_max and price tiers were read, the same way (a note
 * is required: it says which figure is whose, and which was not on a stored page).
 */
export const sourceSchema = z.strictObject({
  pages: sourcePages,
  note: z.string().max(2_000).optional(),
  limits: z.strictObject({ pages: sourcePages, note: z.string().min(1).max(2_000) }).optional(),
});
export type ModelSource = z.infer<typeof sourceSchema>;

/**
 * A price tier by prompt length, as the vendors bill it: once a request's prompt (every input
 * token, cached ones included) is above `above_input_tokens`, every token of the request, input
 * and output, is billed at these prices. A model with `capabilities.context_1m` has the
 * threshold as its window unless a request asks for context-1m (catalog.ts `contextWindowOf`).
 */
export const priceTierSchema = z.strictObject({
  above_input_tokens: z.number().int().positive().max(CONTEXT_WINDOW_MAX),
  usd_per_1m: z.record(unitName, usdPrice),
});
export type PriceTier = z.infer<typeof priceTierSchema>;

/** One model as the file and the admin API write it (prices in USD per 1M units). */
export const modelEntrySchema = z.strictObject({
  id: modelId,
  operation: z.enum(OPERATIONS),
  vendor: z.string().min(1).max(64),
  /** Dated ids, `-latest` names, short names: each resolves to this model on every route. */
  aliases: z.array(modelId).max(ALIASES_MAX).default([]),
  context_window: z.number().int().min(0).max(CONTEXT_WINDOW_MAX),
  /** The most output tokens the vendor lets one request ask for; null where not published. */
  output_max: z.number().int().positive().max(CONTEXT_WINDOW_MAX).nullable().default(null),
  open_weight: z.boolean().default(false),
  /** Position in the listing (`GET /v1/models` order). */
  listing: z.number().int().min(0).max(1_000_000),
  capabilities: capabilitiesSchema,
  usd_per_1m: z.record(unitName, usdPrice),
  /** The long-context price tier (one per model: the vendors have one threshold each); null: one price per unit. */
  tier: priceTierSchema.nullable().default(null),
  /**
   * The batch price by unit, USD per 1M (the vendor's batch price; an in-country model's, the
   * operator's): a batch line served in the country is billed at it (docs/batches.md#money).
   * Each unit one the model prices, at most its price; a unit left out keeps its price. Null: no batch price.
   */
  batch_usd_per_1m: z.record(unitName, usdPrice).nullable().default(null),
  /** Retired: the model answers 410 naming this successor. */
  retired: z.strictObject({ successor: modelId }).nullable().default(null),
  source: sourceSchema,
});
export type ModelEntry = z.infer<typeof modelEntrySchema>;

export const catalogFileSchema = z.strictObject({
  $comment: z.string().optional(),
  models: z.array(modelEntrySchema).min(1),
});

/**
 * The units a model reports in its replies, each of which must have a price.
 * @example reportedUnits(claudeSonnet5) // ["input_token", "output_token", "cache_read_token", "cache_write_token", "cache_write_1h_token"]
 */
export function reportedUnits(entry: Pick<ModelEntry, "operation" | "capabilities" | "usd_per_1m">): string[] {
  const c = entry.capabilities;
  switch (entry.operation) {
    case "chat": {
      const units = ["input_token", "output_token"];
      if (c.cache !== "none") units.push("cache_read_token");
      if (c.cache === "read_write") units.push("cache_write_token", "cache_write_1h_token");
      return [...units, ...c.hosted_tools.map((tool) => `${tool}_call`)];
    }
    case "embeddings":
      return ["input_token"];
    case "images": {
      if (c.image_tokens) return ["input_token", "image_output_token", ...(c.images_in ? ["image_input_token"] : [])];
      const perImage = Object.keys(entry.usd_per_1m).filter((unit) => unit.startsWith("image_") && /\d+x\d+/.test(unit));
      return perImage.length > 0 ? [] : ["image_<W>x<H>_<quality>"];
    }
    case "speech":
      return ["character"];
    case "transcription":
      return ["audio_second"];
  }
}

/** Every price of an entry by the prices table's key: the standard ones, its tier's (tierPriceKey), its batch prices (batchPriceKey). */
export function entryPrices(entry: Pick<ModelEntry, "usd_per_1m" | "tier" | "batch_usd_per_1m">): [string, string][] {
  const tier = entry.tier;
  const tiered = tier
    ? Object.entries(tier.usd_per_1m).map(([unit, usd]) => [tierPriceKey(unit, tier.above_input_tokens), usd] as [string, string])
    : [];
  const batch = Object.entries(entry.batch_usd_per_1m ?? {}).map(([unit, usd]) => [batchPriceKey(unit), usd] as [string, string]);
  return [...Object.entries(entry.usd_per_1m), ...tiered, ...batch];
}

/** An entry's prices, tier and batch prices from the prices table's keys (entryPrices undone). */
export function entryOfPrices(usdByKey: Record<string, string>): Pick<ModelEntry, "usd_per_1m" | "tier" | "batch_usd_per_1m"> {
  const { standard, tier, batch } = splitPriceKeys(Object.entries(usdByKey));
  return {
    usd_per_1m: Object.fromEntries(standard),
    tier: tier ? { above_input_tokens: tier.aboveInputTokens, usd_per_1m: Object.fromEntries(tier.prices) } : null,
    batch_usd_per_1m: batch ? Object.fromEntries(batch) : null,
  };
}

/**
 * A batch price's problems: each unit one the model prices, at most its price (a batch price is a
 * discount, never a surcharge), and none on a model with a long-context tier (the catalog has no
 * batch tier: such a model's lines stay at the live price).
 */
function batchProblems(entry: ModelEntry): string[] {
  const batch = entry.batch_usd_per_1m;
  if (!batch) return [];
  if (entry.tier) return [`model ${entry.id} has a price tier and a batch price; a tiered model takes no batch price (batch_usd_per_1m)`];
  const problems: string[] = [];
  for (const [unit, usd] of Object.entries(batch)) {
    const live = entry.usd_per_1m[unit];
    if (live === undefined)
      problems.push(`model ${entry.id}'s batch price names ${unit}, which it does not price (batch_usd_per_1m.${unit})`);
    else if (parseUsd(usd) > parseUsd(live))
      problems.push(`model ${entry.id}'s batch price of ${unit}, USD ${usd}, is above its price of USD ${live} (batch_usd_per_1m.${unit})`);
  }
  return problems;
}

/** The first unit the model reports and has no price for, or null. */
export function missingPrice(entry: Pick<ModelEntry, "operation" | "capabilities" | "usd_per_1m">): string | null {
  return reportedUnits(entry).find((unit) => entry.usd_per_1m[unit] === undefined) ?? null;
}

/** A tier's problems: a threshold within the window, a price for every token unit the model prices and no other (hosted-tool calls keep theirs). */
function tierProblems(entry: ModelEntry): string[] {
  const problems: string[] = [];
  const tier = entry.tier;
  if (entry.capabilities.context_1m && !tier)
    problems.push(`model ${entry.id} takes context-1m but has no tier (its window without context-1m is the tier's threshold)`);
  if (!tier) return problems;
  const window = entry.context_window;
  if (entry.operation !== "chat") problems.push(`model ${entry.id} has a price tier, which only chat models take`);
  if (tier.above_input_tokens >= window)
    problems.push(`model ${entry.id}'s tier starts above ${tier.above_input_tokens} input tokens, not within its window of ${window}`);
  for (const unit of Object.keys(entry.usd_per_1m).filter((u) => u.endsWith("_token")))
    if (tier.usd_per_1m[unit] === undefined) problems.push(`model ${entry.id}'s tier has no price for ${unit} (tier.usd_per_1m.${unit})`);
  for (const unit of Object.keys(tier.usd_per_1m))
    if (entry.usd_per_1m[unit] === undefined || !unit.endsWith("_token"))
      problems.push(`model ${entry.id}'s tier prices ${unit}, which is not one of its token units`);
  return problems;
}

/**
 * Checks what no single entry can: prices for every reported unit, ids and aliases each naming
 * one model, successors that exist and are not retired themselves. Returns the problems, one line each.
 */
export function catalogProblems(entries: readonly ModelEntry[]): string[] {
  const problems: string[] = [];
  const owner = new Map<string, string>();
  for (const entry of entries) {
    if (entry.output_max !== null && entry.output_max > entry.context_window && entry.operation === "chat")
      problems.push(`model ${entry.id} has output_max ${entry.output_max} above its context_window ${entry.context_window}`);
    problems.push(...tierProblems(entry), ...batchProblems(entry));
    const missing = missingPrice(entry);
    if (missing) problems.push(`model ${entry.id} reports ${missing} but has no price for it (usd_per_1m.${missing})`);
    for (const name of [entry.id, ...entry.aliases]) {
      const taken = owner.get(name);
      if (taken !== undefined) problems.push(`${name} names both ${taken} and ${entry.id}`);
      else owner.set(name, entry.id);
    }
  }
  const byId = new Map(entries.map((e) => [e.id, e]));
  for (const entry of entries) {
    if (!entry.retired) continue;
    const successor = byId.get(entry.retired.successor);
    if (!successor) problems.push(`model ${entry.id} is retired for ${entry.retired.successor}, which is not in the catalog`);
    else if (successor.retired) problems.push(`model ${entry.id} is retired for ${successor.id}, which is retired too`);
  }
  return problems;
}

export class CatalogFileError extends Error {}

/** Parses and checks a catalog file's text; throws CatalogFileError naming every problem. */
export function parseCatalogFile(text: string, name = "the catalog file"): ModelEntry[] {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new CatalogFileError(`${name} is not JSON: ${(error as Error).message}`);
  }
  const parsed = catalogFileSchema.safeParse(json);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`);
    throw new CatalogFileError(`${name} is refused:\n  ${lines.join("\n  ")}`);
  }
  const problems = catalogProblems(parsed.data.models);
  if (problems.length > 0) throw new CatalogFileError(`${name} is refused:\n  ${problems.join("\n  ")}`);
  return parsed.data.models;
}

export const CATALOG_FILE_PATH = new URL("./models.json", import.meta.url).pathname;
