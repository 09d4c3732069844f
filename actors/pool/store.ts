/**
 * Pools changed at run time, persisted in the `pools` table (one row per model; a row overrides
 * the pools file). Secrets are never stored: a backend names the environment variable holding
 * its key (`api_key_env`), and each node resolves it from its own environment.
 */
import { eq, gt } from "drizzle-orm";
import { z } from "zod";
import { backendSchema, paidFieldsSchema, type BackendConfig, type PaidFields } from "../../src/config.ts";
import type { Db } from "../../src/db/client.ts";
import { pools } from "../../src/db/schema.ts";
import { BACKENDS_MAX } from "./pool.ts";

/** A backend as the admin API takes it and the table keeps it. */
export const storedBackendSchema = z.strictObject({
  name: backendSchema.shape.name,
  kind: backendSchema.shape.kind,
  url: backendSchema.shape.url,
  /** The environment variable that holds the backend's key on every node. */
  api_key_env: z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, "an environment variable name")
    .optional(),
  upstream_model: backendSchema.shape.upstream_model,
  region: backendSchema.shape.region,
  weight: backendSchema.shape.weight,
  concurrency_max: backendSchema.shape.concurrency_max,
  responses_api: backendSchema.shape.responses_api,
});
export type StoredBackend = z.infer<typeof storedBackendSchema>;

export const poolBodySchema = z.strictObject({
  backends: z
    .array(storedBackendSchema)
    .min(1)
    .max(BACKENDS_MAX)
    .refine((list) => new Set(list.map((b) => b.name)).size === list.length, "backend names must be unique within a pool"),
  /** Chat fields the pool enables, with their prices (src/config.ts). */
  paid_fields: paidFieldsSchema.optional(),
});
export type PoolBody = z.infer<typeof poolBodySchema>;

/** The backends with their keys read from `env`; a named variable that is unset is a problem. */
export function resolveBackends(
  stored: StoredBackend[],
  env: Record<string, string | undefined>,
): { backends: BackendConfig[]; problems: string[] } {
  const problems: string[] = [];
  const backends = stored.map(({ api_key_env, ...rest }) => {
    const apiKey = api_key_env === undefined ? undefined : env[api_key_env];
    if (api_key_env !== undefined && apiKey === undefined)
      problems.push(`backend ${rest.name}: environment variable ${api_key_env} is not set`);
    return { ...rest, ...(apiKey !== undefined ? { api_key: apiKey } : {}) };
  });
  return { backends, problems };
}

export interface PoolRow {
  model: string;
  backends: StoredBackend[];
  paidFields?: PaidFields;
  updatedAt: Date;
}

export async function savePool(db: Db, model: string, backends: StoredBackend[], paidFields?: PaidFields): Promise<PoolRow> {
  const now = new Date();
  const stored = paidFields ?? null;
  await db.orm
    .insert(pools)
    .values({ model, backends, paidFields: stored, updatedAt: now })
    .onConflictDoUpdate({ target: pools.model, set: { backends, paidFields: stored, updatedAt: now } });
  return { model, backends, paidFields, updatedAt: now };
}

/** Rows changed after `since` (all rows without it); a row that no longer validates is skipped and reported. */
export async function loadPools(db: Db, since?: Date): Promise<{ rows: PoolRow[]; invalid: string[] }> {
  const query = db.orm.select().from(pools);
  const raw = since ? await query.where(gt(pools.updatedAt, since)) : await query;
  return parseRows(raw);
}

export async function loadPool(db: Db, model: string): Promise<PoolRow | null> {
  const raw = await db.orm.select().from(pools).where(eq(pools.model, model));
  return parseRows(raw).rows[0] ?? null;
}

function parseRows(raw: (typeof pools.$inferSelect)[]): { rows: PoolRow[]; invalid: string[] } {
  const rows: PoolRow[] = [];
  const invalid: string[] = [];
  for (const row of raw) {
    const parsed = poolBodySchema.safeParse({ backends: row.backends, paid_fields: row.paidFields ?? undefined });
    if (parsed.success)
      rows.push({ model: row.model, backends: parsed.data.backends, paidFields: parsed.data.paid_fields, updatedAt: row.updatedAt });
    else invalid.push(row.model);
  }
  return { rows, invalid };
}
