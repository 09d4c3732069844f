/**
 * Importing a catalog file (docs/catalog.md, "Importing a catalog"): a whole file, as
 * models.json has it, compared with the catalog as it stands. The diff comes first; applying it
 * is changes.ts's batch path (one price version, one audit row per changed model). A model of the
 * catalog that the file does not have is only reported as absent: an import never retires by
 * omission.
 */
import { insecureLoopback } from "../addresses.ts";
import { every, runTask } from "../background.ts";
import type { Db } from "../db/client.ts";
import type { Logger } from "../log.ts";
import type { Catalog } from "./catalog.ts";
import { catalogEntries } from "./changes.ts";
import { readTextBounded } from "../providers/upstream.ts";
import type { CatalogAction, CatalogChange } from "./changes.ts";
import { entryPrices, type ModelEntry, parseCatalogFile } from "./file.ts";
import { parseUsd } from "./prices.ts";

/** A fetched catalog file larger than this is refused (models.json is about 75 KiB). */
export const CATALOG_IMPORT_BYTES_MAX = 4 * 1024 * 1024;
export const CATALOG_IMPORT_TIMEOUT_MS = 10_000;

export interface PriceChange {
  model: string;
  /** The prices table's key: a unit, or a tier's (`input_token>200000`). */
  unit: string;
  old: string | null;
  new: string | null;
}
export interface FieldChange {
  model: string;
  field: string;
  old: unknown;
  new: unknown;
}
export interface CatalogDiff {
  added: string[];
  prices: PriceChange[];
  limits: FieldChange[];
  aliases: { model: string; added: string[]; removed: string[] }[];
  retired: { model: string; successor: string }[];
  /** Other fields changed (capabilities, listing, source…), by name. */
  changed: { model: string; fields: string[] }[];
  /** In the catalog, not in the file: kept as they are. */
  absent: string[];
}

const LIMIT_FIELDS = ["context_window", "output_max"] as const;
const PRICED_FIELDS = new Set(["usd_per_1m", "tier", "batch_usd_per_1m", "aliases", "retired", "id", ...LIMIT_FIELDS]);

/** Prices compared by value: "0.15" and "0.150000000" are one price. */
function priceChanges(before: ModelEntry | undefined, after: ModelEntry): PriceChange[] {
  const old = new Map(before ? entryPrices(before) : []);
  const now = new Map(entryPrices(after));
  const changes: PriceChange[] = [];
  for (const unit of new Set([...old.keys(), ...now.keys()])) {
    const [a, b] = [old.get(unit) ?? null, now.get(unit) ?? null];
    if (a === null || b === null ? a !== b : parseUsd(a) !== parseUsd(b)) changes.push({ model: after.id, unit, old: a, new: b });
  }
  return changes;
}

function limitChanges(before: ModelEntry, after: ModelEntry): FieldChange[] {
  const changes: FieldChange[] = LIMIT_FIELDS.filter((f) => before[f] !== after[f]).map((field) => ({
    model: after.id,
    field,
    old: before[field],
    new: after[field],
  }));
  const [a, b] = [before.tier?.above_input_tokens ?? null, after.tier?.above_input_tokens ?? null];
  if (a !== b) changes.push({ model: after.id, field: "tier.above_input_tokens", old: a, new: b });
  return changes;
}

/** What one model's import changes, and the action its audit row names. */
function modelDiff(before: ModelEntry, after: ModelEntry, diff: CatalogDiff): CatalogAction | null {
  const prices = priceChanges(before, after);
  const limits = limitChanges(before, after);
  const added = after.aliases.filter((a) => !before.aliases.includes(a));
  const removed = before.aliases.filter((a) => !after.aliases.includes(a));
  const fields = (Object.keys(after) as (keyof ModelEntry)[]).filter((f) => !PRICED_FIELDS.has(f) && !Bun.deepEquals(before[f], after[f]));
  const retiring = after.retired !== null && before.retired?.successor !== after.retired.successor;
  const unretired = after.retired === null && before.retired !== null;
  diff.prices.push(...prices);
  diff.limits.push(...limits);
  if (added.length + removed.length > 0) diff.aliases.push({ model: after.id, added, removed });
  if (retiring) diff.retired.push({ model: after.id, successor: after.retired!.successor });
  if (unretired) fields.push("retired");
  if (fields.length > 0) diff.changed.push({ model: after.id, fields });
  if (retiring) return "retire";
  if (prices.length + limits.length + removed.length + fields.length > 0) return "change";
  return added.length > 0 ? "alias" : null;
}

/** The diff of a file against the catalog's entries, and the changes that would apply it. */
export function diffCatalog(
  current: readonly ModelEntry[],
  imported: readonly ModelEntry[],
): { diff: CatalogDiff; changes: CatalogChange[] } {
  const diff: CatalogDiff = { added: [], prices: [], limits: [], aliases: [], retired: [], changed: [], absent: [] };
  const changes: CatalogChange[] = [];
  const byId = new Map(current.map((e) => [e.id, e]));
  for (const entry of imported) {
    const before = byId.get(entry.id);
    if (!before) {
      diff.added.push(entry.id);
      diff.prices.push(...priceChanges(undefined, entry));
      if (entry.retired) diff.retired.push({ model: entry.id, successor: entry.retired.successor });
      changes.push({ action: "add", entry });
      continue;
    }
    const action = modelDiff(before, entry, diff);
    if (action) changes.push({ action, entry });
  }
  const importedIds = new Set(imported.map((e) => e.id));
  diff.absent = current.filter((e) => !importedIds.has(e.id) && !e.retired).map((e) => e.id);
  return { diff, changes };
}

export class CatalogImportRefused extends Error {}

/**
 * Fetches and checks a catalog file from an operator's URL: https (or http to a loopback host),
 * no redirect followed, within CATALOG_IMPORT_BYTES_MAX and CATALOG_IMPORT_TIMEOUT_MS.
 * @throws CatalogImportRefused saying why (CatalogFileError for a file the schema refuses)
 */
export async function fetchCatalogFile(url: string, bytesMax = CATALOG_IMPORT_BYTES_MAX): Promise<ModelEntry[]> {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new CatalogImportRefused(`${url} is not a URL`);
  }
  if (parsed.protocol !== "https:" && !insecureLoopback(parsed.origin))
    throw new CatalogImportRefused("a catalog is fetched over https (plain http only from a loopback host)");
  let response: Response;
  try {
    response = await fetch(parsed, { redirect: "manual", signal: AbortSignal.timeout(CATALOG_IMPORT_TIMEOUT_MS) });
  } catch (error) {
    throw new CatalogImportRefused(`fetching ${parsed.origin} failed: ${(error as Error).message}`);
  }
  if (response.status >= 300 && response.status < 400)
    throw new CatalogImportRefused(`${parsed.origin} answered a redirect (${response.status}), which is not followed`);
  if (!response.ok) throw new CatalogImportRefused(`${parsed.origin} answered ${response.status}`);
  const { text, truncated } = await readTextBounded(response, bytesMax);
  if (truncated) throw new CatalogImportRefused(`the catalog file is larger than ${bytesMax} bytes`);
  return parseCatalogFile(text, "the fetched catalog file");
}

export interface CatalogPullStatus {
  source: string;
  lastAttemptAt: string | null;
  lastSuccessAt: string | null;
  lastError: string | null;
  /** How many models the last pulled file would change; its diff. Nothing is applied by a pull. */
  changes: number | null;
  diff: CatalogDiff | null;
}

/**
 * Pulls CATALOG_IMPORT_URL every CATALOG_IMPORT_INTERVAL_MS and records its diff against the
 * catalog (GET /admin/catalog/import), as the rate fetcher does for rates; it never applies: an
 * operator reviews the diff and imports with `apply`.
 */
export class CatalogPuller {
  readonly status: CatalogPullStatus;
  private stopPulling: (() => void) | null = null;

  constructor(
    private readonly db: Db,
    private readonly catalog: Catalog,
    private readonly source: { url: string; intervalMs: number },
    private readonly log: Logger,
  ) {
    this.status = { source: source.url, lastAttemptAt: null, lastSuccessAt: null, lastError: null, changes: null, diff: null };
  }

  start(): void {
    runTask("catalog_pull", this.log, () => this.pullOnce());
    this.stopPulling = every("catalog_pull", this.source.intervalMs, this.log, () => this.pullOnce());
  }

  stop(): void {
    this.stopPulling?.();
  }

  async pullOnce(): Promise<void> {
    this.status.lastAttemptAt = new Date().toISOString();
    try {
      const imported = await fetchCatalogFile(this.source.url);
      const { diff, changes } = diffCatalog(await catalogEntries(this.db, this.catalog), imported);
      Object.assign(this.status, { lastSuccessAt: new Date().toISOString(), lastError: null, changes: changes.length, diff });
      if (changes.length > 0) this.log("info", "catalog_pulled", { changes: changes.length, added: diff.added.length });
    } catch (error) {
      this.status.lastError = (error as Error).message;
      this.log("warn", "catalog_pull_failed", { error: this.status.lastError });
    }
  }
}
