/**
 * The model a request names: in the catalog, of this operation, allowed to the key, priced for
 * its units; and a pool that has a backend where the request may go.
 */
import type { PoolActor, Region } from "../../actors/pool/pool.ts";
import type { Catalog, CatalogModel } from "../catalog/catalog.ts";
import type { Operation } from "../catalog/seed.ts";
import { fail, isFailure, type Failure } from "../errors.ts";
import type { KeyRecord } from "../keys/store.ts";
import { modelRefusal } from "../keys/restrictions.ts";
import type { Caller } from "./caller.ts";
import type { GatewayDeps } from "./deps.ts";

/**
 * Whether a text's o200k count is the vendor's own (OpenAI's models). Elsewhere a text is bounded
 * by its UTF-8 bytes: byte-level BPE never makes more tokens than bytes.
 */
export function countsExactly(model: Pick<CatalogModel, "vendor">): boolean {
  return model.vendor === "openai";
}

/**
 * The model a request names (by id or alias), or the refusal: 410 naming the successor of a
 * retired model, 404 naming the closest catalog ids of an unknown one.
 */
export function servedModel(catalog: Catalog, id: string): CatalogModel | Failure {
  const found = catalog.lookup(id);
  switch (found.kind) {
    case "found":
      return found.model;
    case "retired":
      return fail("model_retired", `The model \`${id}\` has been retired; use \`${found.successor}\` instead.`, { param: "model" });
    case "unknown": {
      const closest = found.suggestions.map((s) => `\`${s}\``).join(", ");
      const hint = closest ? ` The closest models are ${closest}.` : "";
      return fail(
        "model_not_found",
        `The model \`${id}\` is not in this gateway's catalog; an operator can add it with \`gw catalog import\` (docs/catalog.md).${hint}`,
        { param: "model" },
      );
    }
  }
}

/**
 * The catalog model for an operation, or the 404/410/400 a client expects, or the 403 of a key
 * whose allowlist does not name it (an alias counts as its catalog id).
 */
export function operationModel(
  deps: Pick<GatewayDeps, "catalog">,
  id: string,
  operation: Operation,
  key: Pick<KeyRecord, "allowedModels">,
): CatalogModel | Failure {
  const model = servedModel(deps.catalog, id);
  if (isFailure(model)) return model;
  const refused = modelRefusal(key, model);
  if (refused) return refused;
  if (model.operation !== operation) {
    return fail("invalid_request", `\`${model.id}\` is a ${model.operation} model, not a ${operation} model.`, { param: "model" });
  }
  return model;
}

/** The unit price of a model, or a 403 naming what is missing. */
export function unitPrice(model: CatalogModel, unit: string, param = "model"): bigint | Failure {
  const price = model.price.tomanPer1m.get(unit);
  if (price === undefined)
    return fail("model_forbidden", `${model.id} has no price for \`${unit}\` and cannot serve this request.`, { param });
  return price;
}

/** The model's pool, when it has a backend where the caller's request may go; else a 503. */
export function servingPool(deps: Pick<GatewayDeps, "pools">, model: CatalogModel, region: Region | undefined): PoolActor | Failure {
  const pool = deps.pools.get(model.id);
  if (!pool) return fail("no_healthy_backend", `No backend is configured for ${model.id}.`, { retryAfterS: 5 });
  if (region && !pool.hasRegion(region)) {
    return fail("no_healthy_backend", `${model.id} has no in-country backend, and this request must stay in the country.`, {
      retryAfterS: 5,
    });
  }
  return pool;
}

/** A model of `operation`, its price per 1M of `unit`, and a pool that may serve the caller. */
export interface PricedModel {
  model: CatalogModel;
  pricePer1m: bigint;
  pool: PoolActor;
}

/** The model (of this operation), its price for `unit` and a pool that may serve the caller. */
export function pricedModel(
  deps: Pick<GatewayDeps, "catalog" | "pools">,
  caller: Caller,
  id: string,
  operation: Operation,
  unit: string | ((model: CatalogModel) => string | Failure),
): PricedModel | Failure {
  const model = operationModel(deps, id, operation, caller.key);
  if (isFailure(model)) return model;
  const unitName = typeof unit === "string" ? unit : unit(model);
  if (isFailure(unitName)) return unitName;
  const pricePer1m = unitPrice(model, unitName);
  if (isFailure(pricePer1m)) return pricePer1m;
  const pool = servingPool(deps, model, caller.region);
  if (isFailure(pool)) return pool;
  return { model, pricePer1m, pool };
}
