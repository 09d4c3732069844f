import { describe, expect, test } from "bun:test";
import type { Catalog, CatalogModel } from "../catalog/catalog.ts";
import type { KeyRecord } from "../keys/store.ts";
import { pricedModel, servedModel, servingPool, unitPrice } from "./model.ts";

const model = {
  id: "tts-1",
  operation: "speech",
  price: { versionId: 1, tomanPer1m: new Map([["character", 1_350_000n]]) },
} as unknown as CatalogModel;
const catalog = {
  lookup: (id: string) =>
    id === "tts-1"
      ? { kind: "found", model }
      : id === "tts-0"
        ? { kind: "retired", successor: "tts-1" }
        : { kind: "unknown", suggestions: id.startsWith("tts") ? ["tts-1"] : [] },
} as unknown as Catalog;
const abroadOnly = { hasRegion: (region: string) => region !== "in-country" };
const pools = (pool: unknown) => ({ get: (id: string) => (id === "tts-1" ? pool : undefined) }) as never;
const caller = { key: { allowedModels: null } as unknown as KeyRecord, region: undefined };

describe("servedModel", () => {
  test("a model found, a retired one's 410 naming its successor, an unknown one's 404 naming the closest", () => {
    expect(servedModel(catalog, "tts-1")).toBe(model);
    expect(servedModel(catalog, "tts-0")).toMatchObject({ code: "model_retired", param: "model" });
    expect((servedModel(catalog, "tts-0") as { message: string }).message).toContain("`tts-1`");
    const unknown = servedModel(catalog, "tts-2") as { code: string; message: string };
    expect([unknown.code, unknown.message.includes("The closest models are `tts-1`.")]).toEqual(["model_not_found", true]);
  });
});

describe("price and pool", () => {
  test("a unit the model does not price is a 403 naming it", () => {
    expect(unitPrice(model, "character")).toBe(1_350_000n);
    expect(unitPrice(model, "audio_second")).toMatchObject({ code: "model_forbidden", param: "model" });
  });

  test("no pool, or none in the country for a request that must stay there: a 503 to retry", () => {
    expect(servingPool({ pools: pools(abroadOnly) }, model, undefined)).toBe(abroadOnly as never);
    expect(servingPool({ pools: pools(undefined) }, model, undefined)).toMatchObject({ code: "no_healthy_backend", retryAfterS: 5 });
    const home = servingPool({ pools: pools(abroadOnly) }, model, "in-country") as { message: string };
    expect(home.message).toContain("no in-country backend");
  });

  test("pricedModel: the model of the operation, its unit's price and its pool, or the first refusal", () => {
    const deps = { catalog, pools: pools(abroadOnly) };
    expect(pricedModel(deps, caller, "tts-1", "speech", "character")).toEqual({ model, pricePer1m: 1_350_000n, pool: abroadOnly as never });
    expect(pricedModel(deps, caller, "tts-1", "embeddings", "character")).toMatchObject({ code: "invalid_request", param: "model" });
    const chosen = pricedModel(deps, caller, "tts-1", "speech", () => ({ code: "invalid_request", message: "no size" }));
    expect(chosen).toEqual({ code: "invalid_request", message: "no size" });
  });
});
