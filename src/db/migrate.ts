/**
 * Applies the drizzle-kit SQL migrations in migrations/ in journal order, each once. All of it
 * runs in one transaction under a transaction-scoped advisory lock, so nodes that start together
 * wait for each other instead of racing, and a failed migration leaves nothing half-applied.
 */
import { readFileSync } from "node:fs";
import { sql } from "drizzle-orm";
import { z } from "zod";
import { txRows, type Db } from "./client.ts";

const MIGRATIONS_DIR = new URL("../../migrations/", import.meta.url);
/** Any fixed number; every node must use the same one. */
const MIGRATION_LOCK_ID = 7_341_925_001;

const journalSchema = z.object({ entries: z.array(z.object({ idx: z.number(), tag: z.string() })) });

export interface Migration {
  tag: string;
  statements: string[];
}

export function readMigrations(dir: URL = MIGRATIONS_DIR): Migration[] {
  const journal = journalSchema.parse(JSON.parse(readFileSync(new URL("meta/_journal.json", dir), "utf8")));
  return [...journal.entries]
    .sort((a, b) => a.idx - b.idx)
    .map(({ tag }) => ({
      tag,
      statements: readFileSync(new URL(`${tag}.sql`, dir), "utf8")
        .split("--> statement-breakpoint")
        .map((s) => s.trim())
        .filter(Boolean),
    }));
}

/** Returns the tags applied by this call (empty when the database was up to date). */
export async function migrate(db: Db, migrations: Migration[] = readMigrations()): Promise<string[]> {
  return db.orm.transaction(async (tx) => {
    await tx.execute(sql`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK_ID})`);
    await tx.execute(sql`CREATE TABLE IF NOT EXISTS darvaze_migrations (
      tag text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`);
    const rows = await txRows<{ tag: string }>(tx, sql`SELECT tag FROM darvaze_migrations`);
    const applied = new Set(rows.map((r) => r.tag));
    const done: string[] = [];
    for (const migration of migrations) {
      if (applied.has(migration.tag)) continue;
      for (const statement of migration.statements) await tx.execute(sql.raw(statement));
      await tx.execute(sql`INSERT INTO darvaze_migrations (tag) VALUES (${migration.tag})`);
      done.push(migration.tag);
    }
    return done;
  });
}
