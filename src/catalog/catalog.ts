/**
 * The model catalog and its prices, held in memory: the hot path never asks the database for a
 * model or a price. Prices come in versions, one per exchange rate; each has an effective time,
 * and a request is priced by the version in effect when it is admitted (the version id travels
 * into its usage record). A version set for a future time takes over by itself when that time
 * comes.
 *
 * Seeding is idempotent and runs at every start-up: it adds models the seed has and the
 * database lacks, the first exchange rate and price version when there is none, and prices in
 * the existing versions for the models and units that have none yet (a unit added to the seed,
 * such as a cache price, is priced in every version at that version's rate).
 */
import { MODEL_ALIASES } from "./aliases.ts";
import { asc, eq, sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { exchangeRates, models, prices, priceVersions } from "../db/schema.ts";
import { usdToTomanPer1m } from "./prices.ts";
import { SEED_MODELS, SEED_TOMAN_PER_USD, type Operation, type SeedModel } from "./seed.ts";

export interface PriceList {
  versionId: number;
  tomanPerUsd: bigint;
  /** unit → toman per 1M units */
  tomanPer1m: ReadonlyMap<string, bigint>;
}

export interface CatalogModel {
  id: string;
  operation: Operation;
  vendor: string;
  contextWindow: number;
  openWeight: boolean;
  listing: number;
  createdS: number;
  price: PriceList;
}

export interface PriceVersion {
  versionId: number;
  tomanPerUsd: bigint;
  effectiveAtMs: number;
  /** model → unit → toman per 1M units */
  prices: ReadonlyMap<string, ReadonlyMap<string, bigint>>;
}

type ModelRow = Omit<CatalogModel, "price">;

export class Catalog {
  private byId = new Map<string, CatalogModel>();
  private ordered: CatalogModel[] = [];
  private versions: PriceVersion[] = [];
  private currentIndex = -1;

  constructor(
    private modelRows: ModelRow[],
    versions: PriceVersion[],
    private readonly nowMs: () => number = Date.now,
  ) {
    this.replace(modelRows, versions);
  }

  /** Swaps in a newly loaded catalog (a rate change on any node). */
  replace(modelRows: ModelRow[], versions: PriceVersion[]): void {
    this.modelRows = modelRows;
    this.versions = [...versions].sort((a, b) => a.effectiveAtMs - b.effectiveAtMs || a.versionId - b.versionId);
    this.currentIndex = -1;
    this.advance();
  }

  /** Moves to the newest version in effect, rebuilding the priced models when it changes. */
  private advance(): void {
    const now = this.nowMs();
    let index = this.currentIndex;
    while (index + 1 < this.versions.length && this.versions[index + 1]!.effectiveAtMs <= now) index++;
    if (index === this.currentIndex && this.ordered.length > 0) return;
    this.currentIndex = index;
    const version = this.versions[index];
    const entries = this.modelRows.map((m) => ({
      ...m,
      price: {
        versionId: version?.versionId ?? 0,
        tomanPerUsd: version?.tomanPerUsd ?? 0n,
        tomanPer1m: version?.prices.get(m.id) ?? new Map<string, bigint>(),
      },
    }));
    this.byId = new Map(entries.map((e) => [e.id, e]));
    this.ordered = entries.sort((a, b) => a.listing - b.listing || a.id.localeCompare(b.id));
  }

  private refresh(): void {
    const next = this.versions[this.currentIndex + 1];
    if (next && next.effectiveAtMs <= this.nowMs()) this.advance();
  }

  /** The model of a catalog id, or of a vendor's dated id (aliases.ts). */
  get(id: string): CatalogModel | undefined {
    this.refresh();
    const model = this.byId.get(id);
    if (model) return model;
    const aliased = MODEL_ALIASES.get(id);
    return aliased === undefined ? undefined : this.byId.get(aliased);
  }

  list(): readonly CatalogModel[] {
    this.refresh();
    return this.ordered;
  }

  /** The version in effect now. */
  currentVersion(): PriceVersion | undefined {
    this.refresh();
    return this.versions[this.currentIndex];
  }

  allVersions(): readonly PriceVersion[] {
    return this.versions;
  }
}

async function seedModels(db: Db, seed: readonly SeedModel[]): Promise<void> {
  await db.orm
    .insert(models)
    .values(
      seed.map((m) => ({
        id: m.id,
        operation: m.operation,
        vendor: m.vendor,
        contextWindow: m.contextWindow,
        openWeight: m.openWeight,
        listing: m.listing,
      })),
    )
    .onConflictDoNothing();
}

/** Creates the first rate and price version when there is none (under a lock: nodes start together). */
async function seedFirstVersion(db: Db): Promise<void> {
  if ((await db.orm.select({ id: priceVersions.id }).from(priceVersions).limit(1)).length > 0) return;
  await db.orm.transaction(async (tx) => {
    await tx.execute(sql`LOCK TABLE price_versions IN EXCLUSIVE MODE`);
    if ((await tx.select({ id: priceVersions.id }).from(priceVersions).limit(1)).length > 0) return;
    const [rate] = await tx
      .insert(exchangeRates)
      .values({ tomanPerUsd: SEED_TOMAN_PER_USD, effectiveAt: new Date(0) })
      .returning({ id: exchangeRates.id });
    await tx.insert(priceVersions).values({ rateId: rate!.id, effectiveAt: new Date(0) });
  });
}

/** Adds prices, in every version, for the seed's models and units that have none there. */
async function seedPrices(db: Db, seed: readonly SeedModel[]): Promise<void> {
  const versions = await db.orm
    .select({ versionId: priceVersions.id, tomanPerUsd: exchangeRates.tomanPerUsd })
    .from(priceVersions)
    .innerJoin(exchangeRates, eq(exchangeRates.id, priceVersions.rateId));
  const rows = versions.flatMap((v) =>
    seed.flatMap((m) =>
      Object.entries(m.usdPer1m).map(([unit, usd]) => ({
        versionId: v.versionId,
        modelId: m.id,
        unit,
        usdPer1m: usd,
        tomanPer1m: usdToTomanPer1m(usd, v.tomanPerUsd),
      })),
    ),
  );
  if (rows.length > 0) await db.orm.insert(prices).values(rows).onConflictDoNothing();
}

async function readVersions(db: Db): Promise<PriceVersion[]> {
  const versionRows = await db.orm
    .select({ versionId: priceVersions.id, tomanPerUsd: exchangeRates.tomanPerUsd, effectiveAt: priceVersions.effectiveAt })
    .from(priceVersions)
    .innerJoin(exchangeRates, eq(exchangeRates.id, priceVersions.rateId))
    .orderBy(asc(priceVersions.effectiveAt), asc(priceVersions.id));
  const priceRows = await db.orm.select().from(prices);
  const byVersion = new Map<number, Map<string, Map<string, bigint>>>();
  for (const row of priceRows) {
    const version = byVersion.get(row.versionId) ?? new Map<string, Map<string, bigint>>();
    const units = version.get(row.modelId) ?? new Map<string, bigint>();
    units.set(row.unit, row.tomanPer1m);
    version.set(row.modelId, units);
    byVersion.set(row.versionId, version);
  }
  return versionRows.map((v) => ({
    versionId: v.versionId,
    tomanPerUsd: v.tomanPerUsd,
    effectiveAtMs: v.effectiveAt.getTime(),
    prices: byVersion.get(v.versionId) ?? new Map(),
  }));
}

async function readModels(db: Db): Promise<ModelRow[]> {
  return (await db.orm.select().from(models)).map((m) => ({
    id: m.id,
    operation: m.operation as Operation,
    vendor: m.vendor,
    contextWindow: m.contextWindow,
    openWeight: m.openWeight,
    listing: m.listing,
    createdS: Math.floor(m.createdAt.getTime() / 1000),
  }));
}

/** Seeds what is missing, then loads every model and price version. */
export async function loadCatalog(db: Db, seed: readonly SeedModel[] = SEED_MODELS): Promise<Catalog> {
  await seedModels(db, seed);
  await seedFirstVersion(db);
  await seedPrices(db, seed);
  return new Catalog(await readModels(db), await readVersions(db));
}

/** Re-reads models and versions into an existing catalog (after a rate change). */
export async function reloadCatalog(db: Db, catalog: Catalog): Promise<void> {
  catalog.replace(await readModels(db), await readVersions(db));
}
