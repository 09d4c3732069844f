/**
 * Fencing tokens for key partitions. A node that takes a partition raises the partition's token
 * in `key_partitions` to the JetStream KV revision of its lease before it grants any capacity;
 * from then on postUsageBatch (usage.ts) bills nothing from a settlement carrying a lower token,
 * so an owner that was deposed (its lease expired while it was cut off) cannot post.
 *
 * One exception, bounded by the database's own clock: a settlement of the tenure just before
 * posts within FENCE_GRACE_MS of the takeover. Usage is posted asynchronously (the usage writer's
 * group commit, then the usage stream's consumer), so settlements made before the takeover are
 * still arriving for a moment; refusing them would give away every request in that pipeline at
 * each partition move. After the grace, and for any older tenure, the refusal is absolute.
 *
 * Invariant: a partition's token only grows (the UPDATE is conditional on a lower token).
 */
import { sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";

/** After a takeover, settlements of the previous tenure still post for this long (see above). */
export const FENCE_GRACE_MS = 5_000;

/** Raises a partition's fencing token; false when the database already holds a token as high (this node was deposed). */
export async function raiseFence(db: Db, partition: number, fenceToken: bigint, owner: string): Promise<boolean> {
  const rows = await db.rows(sql`
    INSERT INTO key_partitions (partition, fence_token, owner, acquired_at)
    VALUES (${partition}, ${fenceToken}::bigint, ${owner}, now())
    ON CONFLICT (partition) DO UPDATE SET previous_fence_token = key_partitions.fence_token, fence_token = excluded.fence_token,
      owner = excluded.owner, acquired_at = now()
    WHERE key_partitions.fence_token < excluded.fence_token
    RETURNING partition`);
  return rows.length === 1;
}
