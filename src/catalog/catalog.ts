/**
 * The model catalog and its prices, held in memory: the hot path never asks the database for a
 * model or a price. Prices come in versions, one per exchange rate; each has an effective time,
 * and a request is priced by the version in effect when it is admitted (the version id travels
 * into its usage record). A version set for a future time takes over by itself when that time
 * comes.
 *
 * In full, with the reasoning: docs/internals.md#the-catalog-in-memory.
 */
import { asc, eq, inArray, sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { exchangeRates, models, operatorAudit, prices, priceVersions } from "../db/schema.ts";
import { capabilitiesSchema, type Capabilities, entryPrices, type ModelEntry, type ModelSource, sourceSchema } from "./file.ts";
import { splitPriceKeys, usdToTomanPer1m } from "./prices.ts";
import { SEED_MODELS, SEED_TOMAN_PER_USD, type Operation } from "./seed.ts";
import { closestIds } from "./suggest.ts";

export interface PriceList {
  versionId: number;
  tomanPerUsd: bigint;
  /** unit → toman per 1M units */
  tomanPer1m: ReadonlyMap<string, bigint>;
  /** The long-context tier: every token of a request whose prompt is above the threshold, at these prices (unit → toman per 1M). */
  tier?: PriceTierList | null;
  /** The batch prices (unit → toman per 1M) a batch line served in the country is billed at; null: none (docs/batches.md#money). */
  batch?: ReadonlyMap<string, bigint> | null;
}

export interface PriceTierList {
  aboveInputTokens: number;
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
  aliases: readonly string[];
  /** The most output tokens one request may ask for, where the vendor publishes it. */
  outputMax: number | null;
  capabilities: Capabilities;
  /** Set when the model is retired: requests for it answer 410 naming the successor. */
  successor: string | null;
  source: ModelSource | null;
  price: PriceList;
}

/** What a name in a request's `model` field stands for. */
export type ModelLookup =
  | { kind: "found"; model: CatalogModel }
  | { kind: "retired"; model: CatalogModel; successor: string }
  | { kind: "unknown"; suggestions: string[] };

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
  /** Every id and alias → the model id it names. */
  private names = new Map<string, string>();
  /** Models served (not retired), in listing order. */
  private ordered: CatalogModel[] = [];
  private everyModel: CatalogModel[] = [];
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
    this.names = new Map(modelRows.flatMap((m) => [...m.aliases.map((alias) => [alias, m.id] as const), [m.id, m.id] as const]));
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
    const entries = this.modelRows.map((m) => {
      const { standard, tier, batch } = splitPriceKeys(version?.prices.get(m.id) ?? new Map<string, bigint>());
      return {
        ...m,
        price: {
          versionId: version?.versionId ?? 0,
          tomanPerUsd: version?.tomanPerUsd ?? 0n,
          tomanPer1m: standard,
          tier: tier && { aboveInputTokens: tier.aboveInputTokens, tomanPer1m: tier.prices },
          batch,
        },
      };
    });
    this.byId = new Map(entries.map((e) => [e.id, e]));
    this.everyModel = entries.sort((a, b) => a.listing - b.listing || a.id.localeCompare(b.id));
    this.ordered = this.everyModel.filter((e) => e.successor === null);
  }

  private refresh(): void {
    const next = this.versions[this.currentIndex + 1];
    if (next && next.effectiveAtMs <= this.nowMs()) this.advance();
  }

  /** The model served under a catalog id or one of its aliases; undefined for an unknown or retired one. */
  get(id: string): CatalogModel | undefined {
    const found = this.lookup(id);
    return found.kind === "found" ? found.model : undefined;
  }

  /** What `name` stands for: a served model, a retired one (with its successor), or nothing (with the closest ids). */
  lookup(name: string): ModelLookup {
    this.refresh();
    const id = this.names.get(name);
    const model = id === undefined ? undefined : this.byId.get(id);
    if (!model) return { kind: "unknown", suggestions: closestIds(name, this.servedNames()) };
    if (model.successor !== null) return { kind: "retired", model, successor: model.successor };
    return { kind: "found", model };
  }

  private servedNames(): Map<string, string> {
    return new Map([...this.names].filter(([, id]) => this.byId.get(id)?.successor === null));
  }

  /** The models served, in listing order. */
  list(): readonly CatalogModel[] {
    this.refresh();
    return this.ordered;
  }

  /** Every model, retired ones included, in listing order. */
  listAll(): readonly CatalogModel[] {
    this.refresh();
    return this.everyModel;
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

/**
 * The model as a batch line at the batch price sees it: each unit at its batch price where it has
 * one, else at its price (the same price version), so the one pricing path (reserve, hold,
 * settlement) bills the batch price. Never above the unit's price, nor for a unit it does not
 * price, whatever the database holds (a seeded batch price beside an operator's lower price).
 * Null for a model without a batch price.
 * @example atBatchPrice(model)?.price.tomanPer1m.get("input_token") // the batch price of input
 */
export function atBatchPrice(model: CatalogModel): CatalogModel | null {
  const batch = model.price.batch;
  if (!batch || batch.size === 0) return null;
  const prices = new Map(model.price.tomanPer1m);
  for (const [unit, price] of batch) {
    const live = prices.get(unit);
    if (live !== undefined && price < live) prices.set(unit, price);
  }
  return { ...model, price: { ...model.price, tomanPer1m: prices } };
}

/**
 * The catalog as a batch line at the batch price reads it: every model it finds at its batch
 * price where it has one (atBatchPrice), the rest as they are.
 */
export function atBatchPrices(catalog: Catalog): Catalog {
  const view: Catalog = Object.create(catalog);
  view.lookup = (name: string): ModelLookup => {
    const found = catalog.lookup(name);
    const batch = found.kind === "found" ? atBatchPrice(found.model) : null;
    return batch ? { kind: "found", model: batch } : found;
  };
  return view;
}

/** What a request asks of a model's long context: `context1m`, Anthropic's `context-1m-2025-08-07` beta. */
export interface LongContextAsk {
  context1m: boolean;
}

/**
 * The tier a request may be billed at, or null: the model's tier, except that a model that takes
 * context-1m has it only when the request asks for context-1m (without it the prompt cannot pass
 * the threshold: it is the model's window then, contextWindowOf).
 * @example longContextTier(claudeSonnet4, { context1m: false }) // null
 */
export function longContextTier(model: CatalogModel, ask: LongContextAsk): PriceTierList | null {
  const tier = model.price.tier ?? null;
  return tier && (!model.capabilities.context_1m || ask.context1m) ? tier : null;
}

/**
 * The window a request has on the model: its context window, or the tier's threshold for a model
 * that takes context-1m when the request does not ask for it (Anthropic's standard 200K).
 * @example contextWindowOf(claudeSonnet4, { context1m: false }) // 200_000
 */
export function contextWindowOf(model: CatalogModel, ask: LongContextAsk): number {
  const tier = model.price.tier ?? null;
  return tier && model.capabilities.context_1m && !ask.context1m ? tier.aboveInputTokens : model.contextWindow;
}

/** The columns of a model row that describe it (all but its id and creation time). */
export function modelColumns(m: ModelEntry) {
  return {
    operation: m.operation,
    vendor: m.vendor,
    contextWindow: m.context_window,
    openWeight: m.open_weight,
    listing: m.listing,
    aliases: m.aliases,
    outputMax: m.output_max,
    capabilities: m.capabilities,
    successor: m.retired?.successor ?? null,
    source: m.source,
  };
}

/** The actions of the catalog's changes in the operators' audit trail. */
export const CATALOG_CHANGE_ACTIONS = ["catalog.put", "catalog.alias", "catalog.retire", "catalog.import"];

/**
 * The audit rows that are changes of the catalog: a catalog action whose `after` is the change
 * with the price version it made (a dry-run import or an alias the model already had is not).
 */
export const isCatalogChange = sql`${inArray(operatorAudit.action, CATALOG_CHANGE_ACTIONS)} AND ${operatorAudit.after}->>'object' = 'catalog_change' AND ${operatorAudit.after}->>'price_version' IS NOT NULL`;

/**
 * Adds the file's models and refreshes the description of those no operator has changed (an
 * operator's change wins over the file until the model is changed back through the admin API).
 */
async function seedModels(db: Db, seed: readonly ModelEntry[]): Promise<void> {
  const excluded = (column: string) => sql.raw(`excluded.${column}`);
  await db.orm
    .insert(models)
    .values(seed.map((m) => ({ id: m.id, ...modelColumns(m), retiredAt: m.retired ? new Date() : null })))
    .onConflictDoUpdate({
      target: models.id,
      set: {
        operation: excluded("operation"),
        vendor: excluded("vendor"),
        contextWindow: excluded("context_window"),
        openWeight: excluded("open_weight"),
        listing: excluded("listing"),
        aliases: excluded("aliases"),
        outputMax: excluded("output_max"),
        capabilities: excluded("capabilities"),
        successor: excluded("successor"),
        retiredAt: sql`CASE WHEN excluded.successor IS NULL THEN NULL ELSE coalesce(${models.retiredAt}, excluded.retired_at) END`,
        source: excluded("source"),
      },
      setWhere: sql`NOT EXISTS (SELECT 1 FROM operator_audit WHERE ${operatorAudit.target} = ${models.id} AND ${isCatalogChange})`,
    });
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
async function seedPrices(db: Db, seed: readonly ModelEntry[]): Promise<void> {
  const versions = await db.orm
    .select({ versionId: priceVersions.id, tomanPerUsd: exchangeRates.tomanPerUsd })
    .from(priceVersions)
    .innerJoin(exchangeRates, eq(exchangeRates.id, priceVersions.rateId));
  const rows = versions.flatMap((v) =>
    seed.flatMap((m) =>
      entryPrices(m).map(([unit, usd]) => ({
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
  return (await db.orm.select().from(models)).map((m) => {
    const capabilities = capabilitiesSchema.safeParse(m.capabilities);
    const source = sourceSchema.safeParse(m.source);
    return {
      id: m.id,
      operation: m.operation as Operation,
      vendor: m.vendor,
      contextWindow: m.contextWindow,
      openWeight: m.openWeight,
      listing: m.listing,
      createdS: Math.floor(m.createdAt.getTime() / 1000),
      aliases: m.aliases,
      outputMax: m.outputMax,
      // A row written before capabilities existed reads as the plainest model of its operation.
      capabilities: capabilities.success ? capabilities.data : plainCapabilities(m.operation),
      successor: m.successor,
      source: source.success ? source.data : null,
    };
  });
}

function plainCapabilities(operation: string): Capabilities {
  return capabilitiesSchema.parse({ streaming: operation === "chat", tools: false, reasoning: "none", images_in: false });
}

/** Seeds what is missing, then loads every model and price version. */
export async function loadCatalog(db: Db, seed: readonly ModelEntry[] = SEED_MODELS): Promise<Catalog> {
  await seedModels(db, seed);
  await seedFirstVersion(db);
  await seedPrices(db, seed);
  return new Catalog(await readModels(db), await readVersions(db));
}

/** Re-reads models and versions into an existing catalog (after a rate change). */
export async function reloadCatalog(db: Db, catalog: Catalog): Promise<void> {
  catalog.replace(await readModels(db), await readVersions(db));
}
