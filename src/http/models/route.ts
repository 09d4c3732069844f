/**
 * GET /v1/models and /v1/models/{id}: the catalog in the OpenAI list/object shape, with
 * `context_window`, `output_max`, `aliases`, `capabilities`, `pricing` (toman per 1M units, and
 * per image, per second and per call where that is the unit), `pricing_tier`, `pricing_batch`, `vendor` and `in_country` as extra
 * fields. A model is found by its id or any alias; the reply names its catalog id. The replies
 * are built once per price version (every catalog change makes one) and served as prepared strings.
 */
import type { PoolHost } from "../../../actors/pool/host.ts";
import { type Catalog, type CatalogModel, contextWindowOf } from "../../catalog/catalog.ts";
import { UNIT_PRICE_KEYS } from "../../units.ts";

export interface ModelObject {
  id: string;
  object: "model";
  created: number;
  owned_by: string;
  operation: string;
  /** Other names the model answers to on every route (dated ids, `-latest`, short names). */
  aliases: readonly string[];
  context_window: number;
  output_max: number | null;
  capabilities: CatalogModel["capabilities"];
  /** Toman per 1M units of each priced unit (`input`, `output`, `cache_read`, `cache_write`, `character`, …). */
  pricing: {
    currency: "toman";
    per: number;
    price_version: number;
    [unit: string]: number | string | Record<string, number | Record<string, number>>;
  };
  /**
   * The long-context tier: toman per 1M units of each token unit for every token of a request
   * whose prompt is above `above_input_tokens` (a model that takes context-1m: only with it); null: none.
   */
  pricing_tier: { above_input_tokens: number; [unit: string]: number } | null;
  /**
   * The batch price: toman per 1M units of each unit a batch line served in the country is billed
   * at (units not named keep `pricing`'s); null: none (docs/batches.md#money).
   */
  pricing_batch: Record<string, number> | null;
  vendor: string;
  in_country: boolean;
}

/** Catalog units → `pricing` fields; a chat model without a cache price bills those tokens as `input`. */
const PRICING_FIELD: Record<string, string> = {
  input_token: "input",
  output_token: "output",
  ...Object.fromEntries(UNIT_PRICE_KEYS),
  image_input_token: "image_input",
  image_output_token: "image_output",
};

export function modelObject(model: CatalogModel, pools: PoolHost): ModelObject {
  const pricing: Record<string, number | Record<string, number | Record<string, number>>> = fieldsOf(model.price.tomanPer1m);
  Object.assign(pricing, perUseDisplay(model));
  return {
    id: model.id,
    object: "model",
    created: model.createdS,
    owned_by: model.vendor,
    operation: model.operation,
    aliases: model.aliases,
    // A model that takes context-1m shows its standard window; its 1M is the tier's, with the beta.
    context_window: contextWindowOf(model, { context1m: false }),
    output_max: model.outputMax,
    capabilities: model.capabilities,
    pricing: { ...pricing, currency: "toman", per: 1_000_000, price_version: model.price.versionId },
    pricing_tier: tierDisplay(model),
    pricing_batch: model.price.batch ? fieldsOf(model.price.batch) : null,
    vendor: model.vendor,
    in_country: pools.inCountry(model.id),
  };
}

function tierDisplay(model: CatalogModel): ModelObject["pricing_tier"] {
  const tier = model.price.tier;
  if (!tier) return null;
  return { above_input_tokens: tier.aboveInputTokens, ...fieldsOf(tier.tomanPer1m) };
}

/** Prices by unit as `pricing` names them. */
function fieldsOf(prices: ReadonlyMap<string, bigint>): Record<string, number> {
  const shown: Record<string, number> = {};
  for (const [unit, toman] of prices) shown[PRICING_FIELD[unit] ?? unit] = Number(toman);
  return shown;
}

/**
 * The same prices per use, as customers read them: toman per image by size and quality, per
 * second of audio, per hosted-tool call. Exact per 1M units above; these may have a fractional toman.
 */
function perUseDisplay(model: CatalogModel): Record<string, number | Record<string, number | Record<string, number>>> {
  const out: Record<string, number | Record<string, number | Record<string, number>>> = {};
  const perImage: Record<string, Record<string, number>> = {};
  const perCall: Record<string, number> = {};
  for (const [unit, toman] of model.price.tomanPer1m) {
    const image = /^image_(\d+x\d+)_([a-z]+)$/.exec(unit);
    if (image) (perImage[image[1]!] ??= {})[image[2]!] = Number(toman) / 1_000_000;
    if (unit === "audio_second") out.per_second = Number(toman) / 1_000_000;
    const call = /^([a-z][a-z0-9_]*)_call$/.exec(unit);
    if (call) perCall[call[1]!] = Number(toman) / 1_000_000;
  }
  if (Object.keys(perImage).length > 0) out.per_image = perImage;
  if (Object.keys(perCall).length > 0) out.per_call = perCall;
  return out;
}

export interface ModelReplies {
  versionId: number | undefined;
  list: string;
  byId: Map<string, string>;
}

export function buildModelReplies(catalog: Catalog, pools: PoolHost): ModelReplies {
  const objects = catalog.list().map((m) => modelObject(m, pools));
  return {
    versionId: catalog.currentVersion()?.versionId,
    list: JSON.stringify({ object: "list", data: objects }),
    byId: new Map(objects.map((o) => [o.id, JSON.stringify(o)])),
  };
}
