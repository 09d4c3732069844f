/**
 * When each key was last used, without a database write per request: authentication notes the
 * time in memory (a Map of at most LAST_USE_ENTRIES_MAX keys), and every LAST_USE_FLUSH_MS one
 * UPDATE writes all keys noted since (newer times only, so nodes flushing out of order never
 * move a key's last use back). `updated_at` is left alone: it is the key cache's change signal.
 */
import { sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";

export const LAST_USE_FLUSH_MS = 5_000;
export const LAST_USE_ENTRIES_MAX = 100_000;
/** Keys per UPDATE: two parameters each, well under PostgreSQL's 65,535 per statement. */
const LAST_USE_STATEMENT_KEYS_MAX = 2_000;

export class LastUse {
  private pending = new Map<string, number>();

  /** Notes a use now (epoch ms). A full map drops the note: last use is informative, not billing. */
  note(keyId: string, atMs: number = Date.now()): void {
    if (this.pending.size >= LAST_USE_ENTRIES_MAX && !this.pending.has(keyId)) return;
    this.pending.set(keyId, atMs);
  }

  get size(): number {
    return this.pending.size;
  }

  /** Writes what was noted; returns how many keys. On failure the notes are kept for the next flush. */
  async flush(db: Db): Promise<number> {
    if (this.pending.size === 0) return 0;
    const batch = this.pending;
    this.pending = new Map();
    const entries = [...batch];
    try {
      for (let i = 0; i < entries.length; i += LAST_USE_STATEMENT_KEYS_MAX) {
        const rows = entries
          .slice(i, i + LAST_USE_STATEMENT_KEYS_MAX)
          .map(([id, atMs]) => sql`(${id}, ${new Date(atMs).toISOString()}::timestamptz)`);
        await db.rows(sql`
          UPDATE api_keys AS k SET last_used_at = u.at
          FROM (VALUES ${sql.join(rows, sql`, `)}) AS u(id, at)
          WHERE k.id = u.id AND (k.last_used_at IS NULL OR k.last_used_at < u.at)`);
      }
    } catch (error) {
      for (const [id, at] of batch) if (!this.pending.has(id)) this.note(id, at);
      throw error;
    }
    return entries.length;
  }
}
