/**
 * Fencing tokens for key partitions. A node that takes a partition raises the partition's token
 * in `key_partitions` to the JetStream KV revision of its lease before it grants any capacity.
 * The rule postUsageBatch (usage.ts) keeps: a settlement is refused (billed nothing) only when
 * another node has owned its partition since the settlement's token, so an owner that was
 * deposed (its lease expired while it was cut off and someone else took over) cannot post.
 *
 * Invariant: a partition's token only grows (the UPDATE is conditional on a lower token). A raise
 * refused for a token not above the database's is logged by the node (`partition_fence_refused`,
 * both tokens and the database's owner): a deposed node's late claim, or, should the KV's
 * revisions ever go back (none did in whole-cluster kill -9s of nats-server 2.9.10 under writes),
 * the place to see it; the node gives the partition back and the next claim carries a higher one.
 *
 * In full, with the reasoning: docs/internals.md#fencing-tokens.
 */
import { sql, type SQL } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { HOLD_EXPIRY_GRACE_MS } from "./holds.ts";

/** A record without its admission time: after a takeover, settlements of the previous owner's run still post for this long (see above). */
export const FENCE_GRACE_MS = HOLD_EXPIRY_GRACE_MS;

/** How long after its run's end a request admitted under the run's token is still the run's work (see above). */
export const FENCE_ADMISSION_SLACK_MS = 15_000;

/** How far a node's clock may be from the database's for the admission rule (part of FENCE_ADMISSION_SLACK_MS). */
export const FENCE_CLOCK_SKEW_MS_MAX = 1_500;

/**
 * Raises a partition's fencing token; false when the database already holds a token as high
 * (this node was deposed). The SET expressions read the row as it was before the update.
 */
export async function raiseFence(db: Db, partition: number, fenceToken: bigint, owner: string): Promise<boolean> {
  const rows = await db.rows(sql`
    INSERT INTO key_partitions (partition, fence_token, owner_since_token, owner, acquired_at)
    VALUES (${partition}, ${fenceToken}::bigint, ${fenceToken}::bigint, ${owner}, now())
    ON CONFLICT (partition) DO UPDATE SET
      previous_fence_token = CASE WHEN key_partitions.owner = excluded.owner THEN key_partitions.previous_fence_token
                                  ELSE key_partitions.owner_since_token END,
      owner_since_token = CASE WHEN key_partitions.owner = excluded.owner THEN key_partitions.owner_since_token
                               ELSE excluded.fence_token END,
      previous_acquired_at = CASE WHEN key_partitions.owner = excluded.owner THEN key_partitions.previous_acquired_at
                                  ELSE key_partitions.acquired_at END,
      acquired_at = CASE WHEN key_partitions.owner = excluded.owner THEN key_partitions.acquired_at ELSE now() END,
      fence_token = excluded.fence_token, owner = excluded.owner
    WHERE key_partitions.fence_token < excluded.fence_token
    RETURNING partition`);
  return rows.length === 1;
}

/**
 * The refusal rule as SQL over `kp` (key_partitions) and a settlement's token: true when another
 * node has owned the partition since the token, and the request was admitted more than
 * FENCE_ADMISSION_SLACK_MS after the end of the token's run (for a run before the previous
 * owner's, its end is at the latest the previous owner's takeover). A record without an admission
 * time is judged at `at` against FENCE_GRACE_MS: the ledger judges at `now()`; an audit of a record
 * already written at its `created_at`, so that a later takeover does not make it look refused.
 */
export function fencedOut(token: SQL, admittedAt: SQL, at: SQL = sql`now()`): SQL {
  const runEnd = sql`CASE WHEN ${token} >= kp.previous_fence_token THEN kp.acquired_at ELSE kp.previous_acquired_at END`;
  return sql`(${token} < kp.owner_since_token
    AND CASE WHEN ${admittedAt} IS NOT NULL THEN ${admittedAt} > ${runEnd} + make_interval(secs => ${FENCE_ADMISSION_SLACK_MS / 1000})
             ELSE ${at} > ${runEnd} + make_interval(secs => ${FENCE_GRACE_MS / 1000}) END)`;
}

/** A partition's row as the database holds it: what a refused raise is logged against. */
export async function fenceOf(db: Db, partition: number): Promise<{ fenceToken: bigint; owner: string } | null> {
  const [row] = await db.rows<{ fence_token: unknown; owner: string }>(
    sql`SELECT fence_token, owner FROM key_partitions WHERE partition = ${partition}`,
  );
  return row ? { fenceToken: BigInt(String(row.fence_token)), owner: row.owner } : null;
}
