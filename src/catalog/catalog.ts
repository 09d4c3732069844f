/**
 * The model catalog and its current prices, held in memory: the hot path never asks the
 * database for a model or a price. Seeding is idempotent and runs at every start-up: it adds
 * models the seed has and the database lacks, the first exchange rate and price version when
 * there is none, and prices in the current version for models that have none yet.
 */
import { and, desc, eq, sql } from "drizzle-orm";
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

export class Catalog {
  private readonly byId = new Map<string, CatalogModel>();
  private ordered: CatalogModel[] = [];

  constructor(entries: CatalogModel[]) {
    this.replace(entries);
  }

  replace(entries: CatalogModel[]): void {
    this.byId.clear();
    for (const entry of entries) this.byId.set(entry.id, entry);
    this.ordered = [...entries].sort((a, b) => a.listing - b.listing || a.id.localeCompare(b.id));
  }

  get(id: string): CatalogModel | undefined {
    return this.byId.get(id);
  }

  list(): readonly CatalogModel[] {
    return this.ordered;
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

/** The newest price version already in effect, creating the first one if there is none. */
async function currentVersion(db: Db): Promise<{ versionId: number; tomanPerUsd: bigint }> {
  const latest = async () =>
    db.orm
      .select({ versionId: priceVersions.id, tomanPerUsd: exchangeRates.tomanPerUsd })
      .from(priceVersions)
      .innerJoin(exchangeRates, eq(exchangeRates.id, priceVersions.rateId))
      .where(sql`${priceVersions.effectiveAt} <= now()`)
      .orderBy(desc(priceVersions.effectiveAt), desc(priceVersions.id))
      .limit(1);
  const found = await latest();
  if (found[0]) return found[0];
  return db.orm.transaction(async (tx) => {
    await tx.execute(sql`LOCK TABLE price_versions IN EXCLUSIVE MODE`);
    const again = await tx
      .select({ versionId: priceVersions.id })
      .from(priceVersions)
      .limit(1);
    if (again[0]) return (await latest())[0]!;
    const [rate] = await tx
      .insert(exchangeRates)
      .values({ tomanPerUsd: SEED_TOMAN_PER_USD, effectiveAt: new Date(0) })
      .returning({ id: exchangeRates.id });
    const [version] = await tx
      .insert(priceVersions)
      .values({ rateId: rate!.id, effectiveAt: new Date(0) })
      .returning({ id: priceVersions.id });
    return { versionId: version!.id, tomanPerUsd: SEED_TOMAN_PER_USD };
  });
}

async function seedPrices(db: Db, seed: readonly SeedModel[], version: { versionId: number; tomanPerUsd: bigint }) {
  const rows = seed.flatMap((m) =>
    Object.entries(m.usdPer1m).map(([unit, usd]) => ({
      versionId: version.versionId,
      modelId: m.id,
      unit,
      usdPer1m: usd,
      tomanPer1m: usdToTomanPer1m(usd, version.tomanPerUsd),
    })),
  );
  await db.orm.insert(prices).values(rows).onConflictDoNothing();
}

/** Seeds what is missing, then loads the catalog with the current price version. */
export async function loadCatalog(db: Db, seed: readonly SeedModel[] = SEED_MODELS): Promise<Catalog> {
  await seedModels(db, seed);
  const version = await currentVersion(db);
  await seedPrices(db, seed, version);
  const modelRows = await db.orm.select().from(models);
  const priceRows = await db.orm.select().from(prices).where(and(eq(prices.versionId, version.versionId)));
  const byModel = new Map<string, Map<string, bigint>>();
  for (const row of priceRows) {
    const units = byModel.get(row.modelId) ?? new Map<string, bigint>();
    units.set(row.unit, row.tomanPer1m);
    byModel.set(row.modelId, units);
  }
  return new Catalog(
    modelRows.map((m) => ({
      id: m.id,
      operation: m.operation as Operation,
      vendor: m.vendor,
      contextWindow: m.contextWindow,
      openWeight: m.openWeight,
      listing: m.listing,
      createdS: Math.floor(m.createdAt.getTime() / 1000),
      price: { versionId: version.versionId, tomanPerUsd: version.tomanPerUsd, tomanPer1m: byModel.get(m.id) ?? new Map() },
    })),
  );
}
