/**
 * The catalog as operators change it (catalog/changes.ts holds the rule):
 *
 *   GET  /admin/catalog                        every model as the catalog file writes it, retired ones too
 *   PUT  /admin/catalog/models/{id}            add or change a model (its entry, prices in USD per 1M units)
 *   POST /admin/catalog/models/{id}/aliases    `{alias}`: one more name for the model
 *   POST /admin/catalog/models/{id}/retire     `{successor}`: the model answers 410 naming it
 *   GET  /admin/catalog/changes                the catalog's rows of the operators' audit: who, when, what, which price version
 *   POST /admin/catalog/import                 a whole catalog file (or `{url}`): its diff, applied with `apply: true`
 *   GET  /admin/catalog/import                 the last scheduled pull of CATALOG_IMPORT_URL and its diff
 *
 * Each change is one new price version and its rows of the operators' audit trail (one, or one per
 * model for an import), written in the change's transaction; the node reloads at once and announces
 * it on the bus (the price event every node already reloads on), so every node serves it within
 * a second. The audit names who the guard found; `by` is the name the caller declares beside it
 * (the admin token is shared), kept in the row's `after`.
 */
import { z } from "zod";
import { PRICE_EVENTS } from "../../../actors/protocol.ts";
import { reloadCatalog } from "../../catalog/catalog.ts";
import {
  applyCatalogChange,
  applyCatalogChanges,
  type CatalogAction,
  CatalogChangeRefused,
  catalogEntries,
} from "../../catalog/changes.ts";
import { CatalogFileError, catalogFileSchema, catalogProblems, modelEntrySchema, modelId, type ModelEntry } from "../../catalog/file.ts";
import {
  CATALOG_IMPORT_BYTES_MAX,
  CatalogImportRefused,
  type CatalogPullStatus,
  diffCatalog,
  fetchCatalogFile,
} from "../../catalog/import.ts";
import { pricePreview } from "../../catalog/preview.ts";
import { fail, isFailure } from "../../errors.ts";
import type { GatewayDeps } from "../../admission/deps.ts";
import { failed, json } from "../guard.ts";
import { auditEachWithin, auditWithin, catalogHistory } from "../../operators/audit.ts";
import { parseBody } from "./body.ts";

/** The audit lists at most this many changes per reply. */
export const CHANGES_SHOWN_MAX = 200;

const by = z.string().trim().min(1).max(100).default("admin");
export const putModelBody = modelEntrySchema.omit({ id: true }).extend({ by });
export const aliasBody = z.strictObject({ alias: modelId, by });
export const retireBody = z.strictObject({ successor: modelId, by });
/** A whole catalog file as models.json has it, or the URL to fetch one from; `apply` to apply the diff. */
export const importBody = catalogFileSchema
  .partial({ models: true })
  .extend({ url: z.string().url().max(2_000).optional(), apply: z.boolean().default(false), by })
  .refine((b) => (b.models === undefined) !== (b.url === undefined), {
    message: "give either the catalog file's `models` or a `url` to fetch it from",
    path: ["models"],
  });

/** Every model of the catalog as entries, USD prices from the version in effect. */
const entries = (deps: GatewayDeps): Promise<ModelEntry[]> => catalogEntries(deps.db, deps.catalog);

/**
 * Every model as the catalog file writes it (an entry PUT takes back as it is), and beside them
 * `toman_per_1m_today`: each model's prices at the rate in effect, by model id.
 */
export async function catalogView(deps: GatewayDeps, requestId: string): Promise<Response> {
  const rate = deps.catalog.currentVersion()?.tomanPerUsd;
  const data = await entries(deps);
  const today = (entry: ModelEntry) =>
    Object.fromEntries(pricePreview(undefined, entry, rate!).map((r) => [r.key, r.tomanAfter!.toString()]));
  return json(
    {
      object: "list",
      price_version: deps.catalog.currentVersion()?.versionId ?? null,
      data,
      toman_per_1m_today: rate === undefined ? null : Object.fromEntries(data.map((entry) => [entry.id, today(entry)])),
    },
    requestId,
  );
}

/** Reloads this node's catalog and pools on a new version, and tells every other node. */
async function adopted(deps: GatewayDeps, versionId: number): Promise<void> {
  await reloadCatalog(deps.db, deps.catalog);
  deps.pools.adopt();
  deps.bus.publish(PRICE_EVENTS, deps.subjects.priceEvents, { versionId });
}

/** A change as its reply and its audit row's `after` show it. */
const changeObject = (action: CatalogAction, versionId: number | null, entry: ModelEntry, by: string) => ({
  object: "catalog_change" as const,
  action,
  price_version: versionId,
  model: entry,
  by,
});

/** Applies one change, audited in its transaction, reloads this node's catalog and pools, and tells every other node. */
async function change(deps: GatewayDeps, action: CatalogAction, entry: ModelEntry, actor: string, requestId: string): Promise<Response> {
  let versionId: number;
  try {
    ({ versionId } = await applyCatalogChange(deps.db, deps.catalog, { action, entry }, (tx, version) =>
      auditWithin(tx, changeObject(action, version, entry, actor)),
    ));
  } catch (error) {
    if (error instanceof CatalogChangeRefused)
      return failed(fail("invalid_request", `The catalog refuses this change: ${error.message}.`), requestId);
    throw error;
  }
  await adopted(deps, versionId);
  deps.log("info", "catalog_changed", { model: entry.id, action, actor, versionId });
  return json(changeObject(action, versionId, entry, actor), requestId, action === "add" ? 201 : 200);
}

export async function existingEntry(deps: GatewayDeps, id: string): Promise<ModelEntry | undefined> {
  return (await entries(deps)).find((e) => e.id === id);
}

export async function putModel(deps: GatewayDeps, request: Request, id: string, requestId: string): Promise<Response> {
  const parsedId = modelId.safeParse(id);
  if (!parsedId.success) return failed(fail("invalid_request", `\`${id}\` is not a model id.`, { param: "id" }), requestId);
  const body = await parseBody(request, putModelBody);
  if (isFailure(body)) return failed(body, requestId);
  const { by: actor, ...rest } = body;
  const before = await existingEntry(deps, id);
  return change(deps, before ? "change" : "add", { id, ...rest }, actor, requestId);
}

/** What PUT would do to today's prices, changing nothing: each price before and after, USD and toman per 1M at today's rate. */
export async function previewModel(deps: GatewayDeps, request: Request, id: string, requestId: string): Promise<Response> {
  const parsedId = modelId.safeParse(id);
  if (!parsedId.success) return failed(fail("invalid_request", `\`${id}\` is not a model id.`, { param: "id" }), requestId);
  const body = await parseBody(request, putModelBody);
  if (isFailure(body)) return failed(body, requestId);
  const { by: _, ...rest } = body;
  const before = await existingEntry(deps, id);
  const rate = deps.catalog.currentVersion()?.tomanPerUsd;
  if (rate === undefined) return failed(fail("service_unavailable", "No exchange rate is in effect yet."), requestId);
  const rows = pricePreview(before, rest.retired ? null : { id, ...rest }, rate);
  return json(
    {
      object: "price_preview",
      model: id,
      action: before ? "change" : "add",
      toman_per_usd: Number(rate),
      prices: rows.map((r) => ({
        key: r.key,
        usd_per_1m_before: r.usdBefore,
        usd_per_1m_after: r.usdAfter,
        toman_per_1m_before: r.tomanBefore?.toString() ?? null,
        toman_per_1m_after: r.tomanAfter?.toString() ?? null,
      })),
    },
    requestId,
  );
}

export async function addAlias(deps: GatewayDeps, request: Request, id: string, requestId: string): Promise<Response> {
  const body = await parseBody(request, aliasBody);
  if (isFailure(body)) return failed(body, requestId);
  const before = await existingEntry(deps, id);
  if (!before) return failed(fail("model_not_found", `No model \`${id}\` in the catalog.`, { param: "id" }), requestId);
  if (before.aliases.includes(body.alias)) return json(changeObject("alias", null, before, body.by), requestId);
  return change(deps, "alias", { ...before, aliases: [...before.aliases, body.alias] }, body.by, requestId);
}

export async function retireModel(deps: GatewayDeps, request: Request, id: string, requestId: string): Promise<Response> {
  const body = await parseBody(request, retireBody);
  if (isFailure(body)) return failed(body, requestId);
  const before = await existingEntry(deps, id);
  if (!before) return failed(fail("model_not_found", `No model \`${id}\` in the catalog.`, { param: "id" }), requestId);
  return change(deps, "retire", { ...before, retired: { successor: body.successor } }, body.by, requestId);
}

/** The last scheduled pull of CATALOG_IMPORT_URL: when, how it went, and its diff (never applied by itself). */
export function catalogPullView(status: CatalogPullStatus | null, requestId: string): Response {
  return json({ object: "catalog_pull", ...(status ?? { source: null }) }, requestId);
}

export async function catalogChangesView(deps: GatewayDeps, request: Request, requestId: string): Promise<Response> {
  const query = new URL(request.url).searchParams;
  const model = query.get("model") ?? undefined;
  const rows = await catalogHistory(deps.db, { model, limit: CHANGES_SHOWN_MAX });
  const shown = (r: (typeof rows)[number]) => {
    const after = r.after as ReturnType<typeof changeObject>;
    return {
      id: Number(r.id),
      model: r.target,
      action: after.action,
      by: r.actor,
      declared_by: after.by ?? null,
      price_version: after.price_version,
      at: r.createdAt.toISOString(),
      entry: after.model,
      before: r.before,
    };
  };
  return json({ object: "list", data: rows.map(shown) }, requestId);
}

/** The models a body imports: its own, or those of the file at its URL, checked as a whole file is. */
async function importedModels(body: z.infer<typeof importBody>): Promise<ModelEntry[] | string> {
  try {
    if (body.url !== undefined) return await fetchCatalogFile(body.url);
  } catch (error) {
    if (error instanceof CatalogImportRefused || error instanceof CatalogFileError) return error.message;
    throw error;
  }
  const problems = catalogProblems(body.models!);
  return problems.length > 0 ? `the catalog file is refused: ${problems.join("; ")}` : body.models!;
}

/** The diff of a catalog file against the catalog; applied (one price version) only with `apply`. */
export async function importCatalog(deps: GatewayDeps, request: Request, requestId: string): Promise<Response> {
  const body = await parseBody(request, importBody, CATALOG_IMPORT_BYTES_MAX);
  if (isFailure(body)) return failed(body, requestId);
  const imported = await importedModels(body);
  if (typeof imported === "string") return failed(fail("invalid_request", `The catalog import is refused: ${imported}.`), requestId);
  const current = await entries(deps);
  const { diff, changes } = diffCatalog(current, imported);
  const reply = (applied: boolean, versionId: number | null) =>
    json({ object: "catalog_import", applied, price_version: versionId, changes: changes.length, diff }, requestId);
  if (!body.apply || changes.length === 0) return reply(false, null);
  let versionId: number;
  try {
    const rows = (version: number) =>
      changes.map((c) => ({
        action: "catalog.import",
        target: c.entry.id,
        before: current.find((e) => e.id === c.entry.id) ?? null,
        after: changeObject(c.action, version, c.entry, body.by),
      }));
    ({ versionId } = await applyCatalogChanges(deps.db, deps.catalog, changes, (tx, version) => auditEachWithin(tx, rows(version))));
  } catch (error) {
    if (error instanceof CatalogChangeRefused)
      return failed(fail("invalid_request", `The catalog refuses this import: ${error.message}.`), requestId);
    throw error;
  }
  await adopted(deps, versionId);
  deps.log("info", "catalog_imported", { models: changes.length, actor: body.by, versionId });
  return reply(true, versionId);
}
