/**
 * Operators' changes to the catalog, without a release: add or change a model (its description
 * and USD prices), alias it, retire it for a successor. One path for all of them:
 *
 *   check    the changed model against the whole catalog (file.ts: every reported unit priced,
 *            names unique, the successor served), refused before anything is written
 *   version  a new price version at the current rate, effective now: every other model's prices
 *            copied, the changed model's priced from its USD list; versions set for a later time
 *            (a rate announced for tomorrow) get the changed model's prices at their own rate
 *   audit    the change's rows of the operators' audit trail, written by the caller's `audit`
 *            inside the transaction with the version made (a row the database refuses undoes
 *            the change): who, the entry before and after, the version
 *
 * all in one transaction under the lock that serialises price versions. Requests admitted from
 * then on are priced by the new version, and their usage records name it. The caller reloads its
 * catalog and announces the change on the bus, as a rate change does, so every node reloads.
 */
import { and, desc, eq, gt, inArray, lte, ne, sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { exchangeRates, models, prices, priceVersions } from "../db/schema.ts";
import type { Catalog, CatalogModel } from "./catalog.ts";
import { modelColumns } from "./catalog.ts";
import { catalogProblems, entryOfPrices, entryPrices, type ModelEntry } from "./file.ts";
import { priceProblem, usdToTomanPer1m } from "./prices.ts";

export type CatalogAction = "add" | "change" | "alias" | "retire";

export interface CatalogChange {
  action: CatalogAction;
  entry: ModelEntry;
}

type Tx = Parameters<Parameters<Db["orm"]["transaction"]>[0]>[0];
/** Writes a change's audit rows inside its transaction, given the price version it made. */
export type CatalogAudit = (tx: Tx, versionId: number) => Promise<void>;

export class CatalogChangeRefused extends Error {}

/** A served or retired model as the file would write it, USD prices from the version in effect. */
export function entryOf(model: CatalogModel, usdPer1m: Record<string, string>): ModelEntry {
  return {
    id: model.id,
    operation: model.operation,
    vendor: model.vendor,
    aliases: [...model.aliases],
    context_window: model.contextWindow,
    output_max: model.outputMax,
    open_weight: model.openWeight,
    listing: model.listing,
    capabilities: model.capabilities,
    ...entryOfPrices(usdPer1m),
    retired: model.successor === null ? null : { successor: model.successor },
    source: model.source ?? { pages: [] },
  };
}

/** Every model of the catalog as entries, with the USD prices of one version's rows. */
export function currentEntries(catalog: Catalog, rows: readonly { modelId: string; unit: string; usdPer1m: string }[]): ModelEntry[] {
  const usd = new Map<string, Record<string, string>>();
  for (const row of rows) usd.set(row.modelId, { ...usd.get(row.modelId), [row.unit]: row.usdPer1m });
  return catalog.listAll().map((m) => entryOf(m, usd.get(m.id) ?? {}));
}

/** Every model of the catalog as entries, USD prices from the version in effect. */
export async function catalogEntries(db: Db, catalog: Catalog): Promise<ModelEntry[]> {
  const versionId = catalog.currentVersion()?.versionId;
  const rows = versionId === undefined ? [] : await db.orm.select().from(prices).where(eq(prices.versionId, versionId));
  return currentEntries(catalog, rows);
}

/**
 * Applies a change: checked, versioned and audited in one transaction.
 * @throws CatalogChangeRefused naming what is wrong (a missing price names the model and unit)
 */
export async function applyCatalogChange(
  db: Db,
  catalog: Catalog,
  change: CatalogChange,
  audit: CatalogAudit,
): Promise<{ versionId: number }> {
  return applyCatalogChanges(db, catalog, [change], audit);
}

type PriceRow = typeof prices.$inferSelect;

/**
 * Applies several changes as one (an import): the whole catalog after all of them is checked,
 * then ONE new price version prices every changed model, audited by `audit` (a row per change).
 * @throws CatalogChangeRefused naming what is wrong, before anything is written
 */
export async function applyCatalogChanges(
  db: Db,
  catalog: Catalog,
  changes: readonly CatalogChange[],
  audit: CatalogAudit,
): Promise<{ versionId: number }> {
  if (changes.length === 0) throw new CatalogChangeRefused("there is nothing to change");
  return db.orm.transaction(async (tx) => {
    await tx.execute(sql`LOCK TABLE price_versions IN EXCLUSIVE MODE`);
    const now = new Date();
    const [latest] = await tx
      .select({ id: priceVersions.id, rateId: priceVersions.rateId })
      .from(priceVersions)
      .where(lte(priceVersions.effectiveAt, now))
      .orderBy(desc(priceVersions.effectiveAt), desc(priceVersions.id))
      .limit(1);
    if (!latest) throw new CatalogChangeRefused("the catalog has no price version in effect yet");
    const current = await tx.select().from(prices).where(eq(prices.versionId, latest.id));
    const changed = new Map(changes.map((c) => [c.entry.id, c.entry]));
    const others = currentEntries(catalog, current).filter((e) => !changed.has(e.id));
    const problems = catalogProblems([...others, ...changed.values()]);
    if (problems.length > 0) throw new CatalogChangeRefused(problems.join("; "));

    for (const entry of changed.values()) {
      const retiredAt = entry.retired ? now : null;
      await tx
        .insert(models)
        .values({ id: entry.id, ...modelColumns(entry), retiredAt })
        .onConflictDoUpdate({ target: models.id, set: { ...modelColumns(entry), retiredAt } });
    }
    const versionId = await versionWith(tx, latest.rateId, now, current, [...changed.values()]);
    await audit(tx, versionId);
    return { versionId };
  });
}

/**
 * A new version effective now: every other model's prices copied, the changed ones priced from
 * their USD lists; versions that take effect later keep their own rate but price the changed models too.
 */
async function versionWith(tx: Tx, rateId: number, now: Date, current: PriceRow[], entries: ModelEntry[]): Promise<number> {
  const ids = entries.map((e) => e.id);
  const [rate] = await tx.select().from(exchangeRates).where(eq(exchangeRates.id, rateId));
  // Every price bounded at today's rate, so that the largest request's units × price fits the ledger's integers.
  for (const entry of entries) {
    for (const [unit, usd] of Object.entries(entry.usd_per_1m)) {
      const problem = priceProblem(unit, usd, rate!.tomanPerUsd);
      if (problem) throw new CatalogChangeRefused(problem);
    }
  }
  const [version] = await tx.insert(priceVersions).values({ rateId, effectiveAt: now }).returning({ id: priceVersions.id });
  const kept = current.filter((p) => !ids.includes(p.modelId));
  const priced = (versionId: number, tomanPerUsd: bigint) =>
    entries.flatMap((entry) =>
      entryPrices(entry).map(([unit, usd]) => ({
        versionId,
        modelId: entry.id,
        unit,
        usdPer1m: usd,
        tomanPer1m: usdToTomanPer1m(usd, tomanPerUsd),
      })),
    );
  await tx.insert(prices).values([...kept.map((p) => ({ ...p, versionId: version!.id })), ...priced(version!.id, rate!.tomanPerUsd)]);
  const later = await tx
    .select({ id: priceVersions.id, tomanPerUsd: exchangeRates.tomanPerUsd })
    .from(priceVersions)
    .innerJoin(exchangeRates, eq(exchangeRates.id, priceVersions.rateId))
    .where(and(gt(priceVersions.effectiveAt, now), ne(priceVersions.id, version!.id)));
  if (later.length > 0) {
    await tx.delete(prices).where(
      and(
        inArray(prices.modelId, ids),
        inArray(
          prices.versionId,
          later.map((v) => v.id),
        ),
      ),
    );
    const rows = later.flatMap((v) => priced(v.id, v.tomanPerUsd));
    if (rows.length > 0) await tx.insert(prices).values(rows);
  }
  return version!.id;
}
