/**
 * `gw catalog …`: the catalog's admin API (src/http/admin/catalog.ts) from a shell. The entry
 * file `catalog set` sends is checked here by the schema the gateway checks it with, so a
 * mistake in it is a usage error naming the field, before anything is sent.
 */
import { z } from "zod";
import type { putModelBody } from "../http/admin/catalog.ts";
import { modelEntrySchema, parseCatalogFile } from "../catalog/file.ts";
import { zodFailure } from "../errors.ts";
import type { Command } from "./args.ts";
import { messageOf } from "./exit.ts";

type CatalogCommand = Extract<Command, { kind: `catalog${string}` }>;

export function isCatalogCommand(command: Command): command is CatalogCommand {
  return command.kind === "catalog" || command.kind.startsWith("catalog.");
}

/** The audit lists this many changes in a terminal (the gateway sends up to 200). */
const CHANGES_SHOWN_MAX = 50;

const entryReply = z.object({
  id: z.string(),
  operation: z.string(),
  vendor: z.string(),
  aliases: z.array(z.string()),
  context_window: z.number(),
  usd_per_1m: z.record(z.string(), z.string()),
  batch_usd_per_1m: z.record(z.string(), z.string()).nullish(),
  retired: z.object({ successor: z.string() }).nullable(),
});
const previewReply = z.object({
  model: z.string(),
  action: z.string(),
  toman_per_usd: z.number(),
  prices: z.array(
    z.object({
      key: z.string(),
      usd_per_1m_before: z.string().nullable(),
      usd_per_1m_after: z.string().nullable(),
      toman_per_1m_before: z.string().nullable(),
      toman_per_1m_after: z.string().nullable(),
    }),
  ),
});
const catalogReply = z.object({ price_version: z.number().nullable(), data: z.array(entryReply) });
const changeReply = z.object({ action: z.string(), price_version: z.number().nullable(), model: entryReply });
const importReply = z.object({
  applied: z.boolean(),
  price_version: z.number().nullable(),
  changes: z.number(),
  diff: z.object({
    added: z.array(z.string()),
    prices: z.array(z.object({ model: z.string(), unit: z.string(), old: z.string().nullable(), new: z.string().nullable() })),
    limits: z.array(z.object({ model: z.string(), field: z.string(), old: z.unknown(), new: z.unknown() })),
    aliases: z.array(z.object({ model: z.string(), added: z.array(z.string()), removed: z.array(z.string()) })),
    retired: z.array(z.object({ model: z.string(), successor: z.string() })),
    changed: z.array(z.object({ model: z.string(), fields: z.array(z.string()) })),
    absent: z.array(z.string()),
  }),
});
const changesReply = z.object({
  data: z.array(
    z.object({
      id: z.number(),
      model: z.string(),
      action: z.string(),
      by: z.string(),
      declared_by: z.string().nullish(),
      price_version: z.number(),
      at: z.string(),
    }),
  ),
});

export class EntryUnreadable extends Error {}

/** The body `catalog set` sends: the file's entry without its id (the command names the model). */
export async function entryBody(model: string, file: string, by: string | undefined): Promise<z.input<typeof putModelBody>> {
  let raw: unknown;
  try {
    raw = JSON.parse(await Bun.file(file).text());
  } catch (error) {
    throw new EntryUnreadable(`cannot read ${file} as JSON: ${messageOf(error)}`);
  }
  const parsed = modelEntrySchema.safeParse({ id: model, ...(raw as object) });
  if (!parsed.success) throw new EntryUnreadable(`${file} is not a model entry the gateway takes: ${zodFailure(parsed.error).message}`);
  if (parsed.data.id !== model) throw new EntryUnreadable(`${file} is the entry of ${parsed.data.id}, not of ${model}`);
  const { id: _, ...entry } = parsed.data;
  return { ...entry, ...(by === undefined ? {} : { by }) };
}

/**
 * The body `catalog import` sends: a URL as it is (the gateway fetches it), a file's catalog
 * checked here as the gateway checks it (parseCatalogFile), so a mistake is a usage error.
 */
export async function importBody(command: Extract<CatalogCommand, { kind: "catalog.import" }>): Promise<object> {
  if (/^https?:\/\//.test(command.source)) return { url: command.source };
  let text: string;
  try {
    text = await Bun.file(command.source).text();
  } catch (error) {
    throw new EntryUnreadable(`cannot read ${command.source}: ${messageOf(error)}`);
  }
  try {
    parseCatalogFile(text, command.source);
  } catch (error) {
    throw new EntryUnreadable(messageOf(error));
  }
  return JSON.parse(text) as object;
}

/** The admin API call of a catalog command. */
export function catalogCall(command: CatalogCommand, operator: string | undefined, body?: unknown) {
  const by =
    command.kind === "catalog" || command.kind === "catalog.changes" || command.kind === "catalog.preview"
      ? undefined
      : (command.by ?? operator);
  const path = (model: string) => `/admin/catalog/models/${encodeURIComponent(model)}`;
  switch (command.kind) {
    case "catalog":
      return { method: "GET" as const, path: "/admin/catalog" };
    case "catalog.set":
      return { method: "PUT" as const, path: path(command.model), body: { ...(by ? { by } : {}), ...(body as object) } };
    case "catalog.preview":
      return { method: "POST" as const, path: `${path(command.model)}/preview`, body };
    case "catalog.alias":
      return { method: "POST" as const, path: `${path(command.model)}/aliases`, body: { alias: command.alias, ...(by ? { by } : {}) } };
    case "catalog.retire":
      return {
        method: "POST" as const,
        path: `${path(command.model)}/retire`,
        body: { successor: command.successor, ...(by ? { by } : {}) },
      };
    case "catalog.import":
      return {
        method: "POST" as const,
        path: "/admin/catalog/import",
        body: { ...(body as object), apply: command.apply, ...(by ? { by } : {}) },
      };
    case "catalog.changes":
      return {
        method: "GET" as const,
        path: `/admin/catalog/changes${command.model ? `?model=${encodeURIComponent(command.model)}` : ""}`,
      };
  }
}

/** An import's diff, one line a change, and whether it was applied. */
function renderImport(reply: z.infer<typeof importReply>): string {
  const { diff } = reply;
  const usd = (price: string | null) => (price === null ? "-" : `$${price}`);
  const lines = [
    ...diff.added.map((m) => `added    ${m}`),
    ...diff.prices.map((p) => `price    ${p.model} ${p.unit}: ${usd(p.old)} → ${usd(p.new)}`),
    ...diff.limits.map((l) => `limit    ${l.model} ${l.field}: ${JSON.stringify(l.old)} → ${JSON.stringify(l.new)}`),
    ...diff.aliases.map((a) => `aliases  ${a.model}: ${[...a.added.map((x) => `+${x}`), ...a.removed.map((x) => `-${x}`)].join(" ")}`),
    ...diff.retired.map((r) => `retired  ${r.model} → ${r.successor}`),
    ...diff.changed.map((c) => `changed  ${c.model}: ${c.fields.join(", ")}`),
    ...diff.absent.map((m) => `absent   ${m} (kept: not in the file)`),
  ];
  const outcome = reply.applied
    ? `applied: ${reply.changes} models changed, price version ${reply.price_version}, on every node within a second`
    : reply.changes === 0
      ? "nothing to apply: the catalog already matches the file"
      : `not applied (a dry run): ${reply.changes} models would change; run again with --apply`;
  return [...lines, outcome].join("\n");
}

/** Who made a change: the audit's caller, and beside it the name they declared when it differs (the shared admin token). */
const shownBy = (c: { by: string; declared_by?: string | null }) =>
  c.declared_by && c.declared_by !== c.by ? `${c.by} (${c.declared_by})` : c.by;

/** USD prices by unit as one cell: `input_token $0.15, output_token $0.6`. */
const listedUsd = (usd: Record<string, string>) =>
  Object.entries(usd)
    .map(([unit, price]) => `${unit} $${price}`)
    .join(", ");

/** The reply as an operator reads it, or null when it is not the shape the command expects. */
export function renderCatalog(command: CatalogCommand, reply: unknown, table: (rows: string[][], indent: string) => string): string | null {
  if (command.kind === "catalog") {
    const parsed = catalogReply.safeParse(reply);
    if (!parsed.success) return null;
    const rows = parsed.data.data.map((m) => [
      m.id,
      m.retired ? `retired → ${m.retired.successor}` : "active",
      m.vendor,
      m.operation,
      String(m.context_window),
      listedUsd(m.usd_per_1m) + (m.batch_usd_per_1m ? `; batch: ${listedUsd(m.batch_usd_per_1m)}` : ""),
      m.aliases.join(", ") || "-",
    ]);
    return `price version ${parsed.data.price_version ?? "-"}; USD per 1M units\n${table([["MODEL", "STATUS", "VENDOR", "OPERATION", "CONTEXT", "PRICES", "ALIASES"], ...rows], "")}`;
  }
  if (command.kind === "catalog.import") {
    const parsed = importReply.safeParse(reply);
    return parsed.success ? renderImport(parsed.data) : null;
  }
  if (command.kind === "catalog.preview") {
    const parsed = previewReply.safeParse(reply);
    if (!parsed.success) return null;
    const toman = (v: string | null) => (v === null ? "-" : v);
    const rows = parsed.data.prices.map((p) => [
      p.key,
      toman(p.usd_per_1m_before),
      toman(p.usd_per_1m_after),
      toman(p.toman_per_1m_before),
      toman(p.toman_per_1m_after),
    ]);
    return `${parsed.data.action} ${parsed.data.model} at ${parsed.data.toman_per_usd} toman per USD (nothing changed)\n${table([["PRICE", "USD BEFORE", "USD AFTER", "TOMAN BEFORE", "TOMAN AFTER"], ...rows], "")}`;
  }
  if (command.kind === "catalog.changes") {
    const parsed = changesReply.safeParse(reply);
    if (!parsed.success) return null;
    if (parsed.data.data.length === 0) return "no changes";
    const rows = parsed.data.data
      .slice(0, CHANGES_SHOWN_MAX)
      .map((c) => [String(c.id), c.at, shownBy(c), c.action, c.model, String(c.price_version)]);
    return table([["ID", "AT", "BY", "ACTION", "MODEL", "VERSION"], ...rows], "");
  }
  const parsed = changeReply.safeParse(reply);
  if (!parsed.success) return null;
  const version = parsed.data.price_version === null ? "nothing changed" : `price version ${parsed.data.price_version}`;
  return `catalog ${parsed.data.action}: ${parsed.data.model.id} (${version}), on every node within a second`;
}
