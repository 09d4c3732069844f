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
import { fail, type Failure } from "../errors.ts";
import { lineTexts, turns } from "./lines.ts";

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

/**
 * The models a file's lines name, by catalog id, each with its line numbers (from 1). Lines that
 * are not JSON or name no served model are left out: the validation fails them.
 * @example await linesByModel(catalog, text) // Map { "deepseek-v3" → [1, 2] }
 */
export async function linesByModel(catalog: Catalog, text: string): Promise<Map<string, number[]>> {
  const byModel = new Map<string, number[]>();
  const turn = turns();
  for (const [i, t] of lineTexts(text).entries()) {
    await turn();
    const name = modelNamed(t);
    const model = name === null ? undefined : catalog.get(name);
    if (!model) continue;
    const lines = byModel.get(model.id);
    if (lines) lines.push(i + 1);
    else byModel.set(model.id, [i + 1]);
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
 * @example batchEstimate(deps, new Map([["deepseek-v3", [1, 2]]])) // { pricing: "batch", models: [{ model: "deepseek-v3", lines: 2, pricing: "batch", … }] }
 */
export function batchEstimate(deps: Pick<GatewayDeps, "catalog" | "pools">, byModel: ReadonlyMap<string, number[]>): BatchEstimate {
  const models: ModelEstimate[] = [];
  for (const id of [...byModel.keys()].sort()) {
    const model = deps.catalog.get(id);
    if (model) models.push(modelEstimate(deps, model, byModel.get(id)!.length));
  }
  const atBatch = models.filter((m) => m.pricing === "batch").length;
  const pricing: BatchPricing = atBatch === 0 ? "live" : atBatch === models.length ? "batch" : "mixed";
  return { pricing, models };
}

/** The refusal of a batch with lines at the live price, naming them, where BATCH_PRICING is `batch_only`; else null. */
export function batchOnlyRefusal(estimate: BatchEstimate, byModel: ReadonlyMap<string, number[]>): Failure | null {
  const live = estimate.models.filter((m) => m.pricing === "live");
  if (live.length === 0) return null;
  const named = live.map((m) => {
    const lines = byModel.get(m.model) ?? [];
    const more = lines.length > REFUSED_LINES_NAMED_MAX ? ` and ${lines.length - REFUSED_LINES_NAMED_MAX} more` : "";
    return `line ${lines.slice(0, REFUSED_LINES_NAMED_MAX).join(", ")}${more} (${m.model} ${REASON_TEXT[m.reason!]})`;
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
