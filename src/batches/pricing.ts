/**
 * A batch's price, decided once at create and kept on its row: each model its lines name is at
 * the batch price when the vendor bills the batch price too, that is when the model has one and
 * its pool has an in-country backend (the operator's own GPUs, billed at the operator's batch
 * price); those lines then run in the country only, at the batch prices, through the one pricing
 * path (catalog.ts atBatchPrices). Every other line runs against a vendor's live API at the live
 * price, and the estimate says so. BATCH_PRICING `batch_only` refuses a batch with any such line.
 * In full: docs/batches.md#money.
 */
import type { GatewayDeps } from "../admission/deps.ts";
import { atBatchPrice, type Catalog, type CatalogModel } from "../catalog/catalog.ts";
import { z } from "zod";
import { fail, type Failure } from "../errors.ts";
import { FILE_LINES_MAX } from "../files/files.ts";
import { type ByteSource, lineTexts, turns } from "./lines.ts";

export const BATCH_PRICINGS = ["batch", "live", "mixed"] as const;
/** `batch`: every line at the batch price; `live`: none; `mixed`: some models' lines at it. */
export type BatchPricing = (typeof BATCH_PRICINGS)[number];

/** Why a model's lines are at the live price. */
export type LiveReason = "no_batch_price" | "no_in_country_backend";

/** One model of a batch's lines, as the batch object's `estimate` shows it. */
export interface ModelEstimate {
  model: string;
  lines: number;
  pricing: "batch" | "live";
  reason?: LiveReason;
  /** Toman per 1M units of each unit, at the price its lines are billed at, in the price version in effect at create. */
  toman_per_1m: Record<string, number>;
}

export interface BatchEstimate {
  pricing: BatchPricing;
  models: ModelEstimate[];
}

/** Lines of each model a batch-only refusal names (the first ones). */
export const REFUSED_LINES_NAMED_MAX = 10;

const REASON_TEXT: Record<LiveReason, string> = {
  no_batch_price: "has no batch price",
  no_in_country_backend: "has no in-country backend, and abroad it runs on the vendor's live API",
};

/** The body's `model` of a line's JSON, or null (a line the validation will fail). */
function modelNamed(text: string): string | null {
  try {
    const line = JSON.parse(text) as { body?: { model?: unknown } } | null;
    return typeof line?.body?.model === "string" ? line.body.model : null;
  } catch {
    return null;
  }
}

/** One model's lines in a file: how many, and the first of them (what a batch-only refusal names). */
export interface ModelLines {
  lines: number;
  /** Line numbers (from 1), ascending, at most REFUSED_LINES_NAMED_MAX. */
  first: number[];
}

/** The models a file's lines name, each as the lines spell it (the catalog reads them at create, as it is then). */
export type LineModels = Map<string, ModelLines>;

/** Model names a file's stored summary holds; a file naming more is counted again at create (pricing needs every name). */
export const FILE_MODEL_NAMES_MAX = 100;
/** A model name a stored summary holds (the longest catalog id is far shorter). */
export const MODEL_NAME_CHARS_MAX = 256;

/** The stored form of LineModels (the `files.line_models` column), checked when read back. */
const storedLineModels = z
  .array(
    z.strictObject({
      model: z.string().max(MODEL_NAME_CHARS_MAX),
      lines: z.number().int().min(1).max(FILE_LINES_MAX),
      first: z.array(z.number().int().min(1).max(FILE_LINES_MAX)).min(1).max(REFUSED_LINES_NAMED_MAX),
    }),
  )
  .max(FILE_MODEL_NAMES_MAX);
export type StoredLineModels = z.infer<typeof storedLineModels>;

function addLines(models: LineModels, name: string, seen: ModelLines): void {
  const known = models.get(name);
  if (!known) {
    models.set(name, { lines: seen.lines, first: [...seen.first] });
    return;
  }
  known.lines += seen.lines;
  known.first = [...known.first, ...seen.first].sort((a, b) => a - b).slice(0, REFUSED_LINES_NAMED_MAX);
}

/**
 * The models a file's lines name, read a slice at a time (turns()), once: at upload, kept with the
 * file (toStoredLineModels). Lines that are not JSON or name no model are left out, and lines past
 * FILE_LINES_MAX: the validation fails them.
 * @example await lineModels(inOnePiece(content)) // Map { "gpt-4o-mini" → { lines: 2, first: [1, 3] } }
 */
export async function lineModels(content: ByteSource): Promise<LineModels> {
  const models: LineModels = new Map();
  const turn = turns();
  let line = 0;
  for await (const text of lineTexts(content)) {
    if (++line > FILE_LINES_MAX) break;
    await turn();
    const name = modelNamed(text);
    if (name !== null) addLines(models, name, { lines: 1, first: [line] });
  }
  return models;
}

/** The summary as the file keeps it, or null when it names more than the column holds (create counts again). */
export function toStoredLineModels(models: LineModels): StoredLineModels | null {
  if (models.size > FILE_MODEL_NAMES_MAX) return null;
  const stored = [...models].map(([model, m]) => ({ model, lines: m.lines, first: m.first }));
  return stored.every((m) => m.model.length <= MODEL_NAME_CHARS_MAX) ? stored : null;
}

/** A file's kept summary, or null: a file uploaded before summaries were kept, or one too large to keep. */
export function fromStoredLineModels(stored: unknown): LineModels | null {
  const parsed = storedLineModels.safeParse(stored);
  if (!parsed.success) return null;
  return new Map(parsed.data.map((m) => [m.model, { lines: m.lines, first: m.first }]));
}

/**
 * The file's models by catalog id (an alias is its model); a name the catalog does not serve is
 * left to the validation. A slice at a time: an unknown name costs a search for the closest ids.
 * @example await byCatalogModel(catalog, models) // Map { "gpt-4o-mini" → { lines: 3, first: [1, 2, 5] } }
 */
export async function byCatalogModel(catalog: Catalog, models: LineModels): Promise<Map<string, ModelLines>> {
  const byModel = new Map<string, ModelLines>();
  const turn = turns();
  for (const [name, seen] of models) {
    await turn();
    const model = catalog.get(name);
    if (model) addLines(byModel, model.id, seen);
  }
  return byModel;
}

function pricesShown(model: CatalogModel): Record<string, number> {
  return Object.fromEntries([...model.price.tomanPer1m].map(([unit, toman]) => [unit, Number(toman)]));
}

/** One model's lines: at the batch price when it has one and an in-country backend, else live and why. */
function modelEstimate(deps: Pick<GatewayDeps, "pools">, model: CatalogModel, lines: number): ModelEstimate {
  const batch = atBatchPrice(model);
  if (!batch) return { model: model.id, lines, pricing: "live", reason: "no_batch_price", toman_per_1m: pricesShown(model) };
  if (!(deps.pools.get(model.id)?.hasRegion("in-country") ?? false))
    return { model: model.id, lines, pricing: "live", reason: "no_in_country_backend", toman_per_1m: pricesShown(model) };
  return { model: model.id, lines, pricing: "batch", toman_per_1m: pricesShown(batch) };
}

/**
 * How a batch of these lines is priced, model by model.
 * @example batchEstimate(deps, new Map([["deepseek-v3", { lines: 2, first: [1, 2] }]])) // { pricing: "batch", models: [{ model: "deepseek-v3", lines: 2, pricing: "batch", … }] }
 */
export function batchEstimate(deps: Pick<GatewayDeps, "catalog" | "pools">, byModel: ReadonlyMap<string, ModelLines>): BatchEstimate {
  const models: ModelEstimate[] = [];
  for (const id of [...byModel.keys()].sort()) {
    const model = deps.catalog.get(id);
    if (model) models.push(modelEstimate(deps, model, byModel.get(id)!.lines));
  }
  const atBatch = models.filter((m) => m.pricing === "batch").length;
  const pricing: BatchPricing = atBatch === 0 ? "live" : atBatch === models.length ? "batch" : "mixed";
  return { pricing, models };
}

/** The refusal of a batch with lines at the live price, naming them, where BATCH_PRICING is `batch_only`; else null. */
export function batchOnlyRefusal(estimate: BatchEstimate, byModel: ReadonlyMap<string, ModelLines>): Failure | null {
  const live = estimate.models.filter((m) => m.pricing === "live");
  if (live.length === 0) return null;
  const named = live.map((m) => {
    const { first } = byModel.get(m.model) ?? { first: [] };
    const more = m.lines > first.length ? ` and ${m.lines - first.length} more` : "";
    return `line ${first.join(", ")}${more} (${m.model} ${REASON_TEXT[m.reason!]})`;
  });
  const message = `This gateway runs batches only at the batch price (BATCH_PRICING batch_only), and these lines cannot get it: ${named.join("; ")}.`;
  return fail("invalid_request", message, { param: "input_file_id" });
}

/**
 * Whether a line of the batch runs at the batch price: its model's lines were put at it at create.
 * @example atBatchPriceLine(row.estimate, catalog, { model: "deepseek-v3" }) // true
 */
export function atBatchPriceLine(estimate: unknown, catalog: Catalog, body: Record<string, unknown>): boolean {
  const models = (estimate as { models?: ModelEstimate[] } | null)?.models ?? [];
  const id = catalog.get(String(body.model))?.id;
  return models.some((m) => m.model === id && m.pricing === "batch");
}
