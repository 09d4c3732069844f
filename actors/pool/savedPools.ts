/**
 * Pools changed at run time, persisted in the `pools` table (one row per model; a row overrides
 * the pools file). A row holds a pool as `PUT /admin/pools/{model}` takes it (`poolSchema`, the
 * pools file's own schema): secrets are never stored, a backend names the environment variable
 * holding its key (`api_key_env`), and each node resolves it from its own environment.
 */
import { eq, gt } from "drizzle-orm";
import { poolSchema, type BackendSpec, type PaidFields } from "../../src/config.ts";
import type { Db } from "../../src/db/client.ts";
import { pools } from "../../src/db/schema.ts";

export interface PoolRow {
  model: string;
  backends: BackendSpec[];
  paidFields?: PaidFields;
  updatedAt: Date;
}

export async function savePool(db: Db, model: string, backends: BackendSpec[], paidFields?: PaidFields): Promise<PoolRow> {
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
    const parsed = poolSchema.safeParse({ backends: row.backends, paid_fields: row.paidFields ?? undefined });
    if (parsed.success)
      rows.push({ model: row.model, backends: parsed.data.backends, paidFields: parsed.data.paid_fields, updatedAt: row.updatedAt });
    else invalid.push(row.model);
  }
  return { rows, invalid };
}
