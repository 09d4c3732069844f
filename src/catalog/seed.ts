/**
 * The catalog the product ships with: src/catalog/models.json, checked by file.ts when this module
 * loads, so a release whose file leaves a reported unit unpriced fails at start-up naming the
 * model and the unit. Prices are vendor list prices in USD per 1M units; toman prices are derived
 * per exchange rate (see prices.ts).
 */
import { readFileSync } from "node:fs";
import { CATALOG_FILE_PATH, type ModelEntry, parseCatalogFile } from "./file.ts";

export type { Operation } from "./file.ts";

export const SEED_MODELS: readonly ModelEntry[] = parseCatalogFile(readFileSync(CATALOG_FILE_PATH, "utf8"), "src/catalog/models.json");

/** The first exchange rate, at which the published toman table was computed. */
export const SEED_TOMAN_PER_USD = 90_000n;
