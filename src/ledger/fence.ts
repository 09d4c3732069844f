/**
 * Fencing tokens for key partitions. A node that takes a partition raises the partition's token
 * in `key_partitions` to the JetStream KV revision of its lease before it grants any capacity;
 * from then on postUsageBatch (usage.ts) bills nothing from a settlement carrying a lower token,
 * so an owner that was deposed (its lease expired while it was cut off) cannot post.
 *
 * Invariant: a partition's token only grows (the UPDATE is conditional on a lower token).
 */
import { sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";

/** Raises a partition's fencing token; false when the database already holds a token as high (this node was deposed). */
export async function raiseFence(db: Db, partition: number, fenceToken: bigint, owner: string): Promise<boolean> {
  const rows = await db.rows(sql`
    INSERT INTO key_partitions (partition, fence_token, owner, acquired_at)
    VALUES (${partition}, ${fenceToken}::bigint, ${owner}, now())
    ON CONFLICT (partition) DO UPDATE SET fence_token = excluded.fence_token, owner = excluded.owner, acquired_at = now()
    WHERE key_partitions.fence_token < excluded.fence_token
    RETURNING partition`);
  return rows.length === 1;
}
