/**
 * Fencing tokens for key partitions. A node that takes a partition raises the partition's token
 * in `key_partitions` to the JetStream KV revision of its lease before it grants any capacity.
 * The rule postUsageBatch (usage.ts) keeps: a settlement is refused (billed nothing) only when
 * another node has owned its partition since the settlement's token, so an owner that was
 * deposed (its lease expired while it was cut off and someone else took over) cannot post.
 *
 * A node that takes its own partition again (its lease lapsed while NATS was away, and nobody
 * else claimed it) continues its run: `owner_since_token` stays at the run's first token, and
 * every settlement of the run still posts, however many re-takes (and tokens) later it arrives.
 *
 * One exception, bounded by the database's own clock: a settlement of the previous owner's run
 * posts within FENCE_GRACE_MS of the takeover. Usage is posted asynchronously (the usage writer's
 * group commit, then the usage stream's consumer), so settlements made before the takeover are
 * still arriving: other nodes settle under the old owner's token while its grants last
 * (GRANT_TTL_MS, 10 s), and a killed node's published usage that its own consumer had pulled
 * comes back only after the stream's ack wait (30 s). Refusing them would give away served usage
 * at each partition move, so the grace covers that whole delivery (the same bound as a hold's
 * expiry grace): a run's settlements post until FENCE_GRACE_MS after the takeover that ended it,
 * taken as the previous owner's takeover for any run before that one (a killed node's partitions
 * may move twice, to a survivor and on to the node started in its place, while its usage is still
 * on its way). After that the refusal is absolute.
 *
 *   raise by the same owner:    fence_token ← new (the run goes on)
 *   raise by another node:      previous_fence_token ← owner_since_token, owner_since_token ←
 *                               fence_token ← new, previous_acquired_at ← acquired_at,
 *                               acquired_at ← now()
 *   a settlement's token T is refused when T < owner_since_token and the grace is over since
 *                               acquired_at (T ≥ previous_fence_token) or previous_acquired_at
 *
 * Invariant: a partition's token only grows (the UPDATE is conditional on a lower token). A raise
 * refused for a token not above the database's is logged by the node (`partition_fence_refused`,
 * both tokens and the database's owner): a deposed node's late claim, or, should the KV's
 * revisions ever go back (none did in whole-cluster kill -9s of nats-server 2.9.10 under writes),
 * the place to see it; the node gives the partition back and the next claim carries a higher one.
 *
 * Judging a record already written (an audit, the chaos suite's write-off reasons), the rule is
 * evaluated at the record's `created_at` (`fencedOut(token, at)`): a takeover after the record
 * was billed makes its token older than `owner_since_token` without it having been refused.
 */
import { sql, type SQL } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { HOLD_EXPIRY_GRACE_MS } from "./holds.ts";

/** After a takeover, settlements of the previous owner's run still post for this long (see above). */
export const FENCE_GRACE_MS = HOLD_EXPIRY_GRACE_MS;

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
 * node has owned the partition since the token, and the takeover that ended the token's run is
 * older than the grace at `at` (for a run before the previous owner's, its end is at the latest
 * the previous owner's takeover). The ledger judges at `now()`; an audit of a record already
 * written judges at its `created_at`, so that a later takeover does not make it look refused.
 */
export function fencedOut(token: SQL, at: SQL = sql`now()`): SQL {
  return sql`(${token} < kp.owner_since_token
    AND ${at} > CASE WHEN ${token} >= kp.previous_fence_token THEN kp.acquired_at ELSE kp.previous_acquired_at END
                + make_interval(secs => ${FENCE_GRACE_MS / 1000}))`;
}

/** A partition's row as the database holds it: what a refused raise is logged against. */
export async function fenceOf(db: Db, partition: number): Promise<{ fenceToken: bigint; owner: string } | null> {
  const [row] = await db.rows<{ fence_token: unknown; owner: string }>(
    sql`SELECT fence_token, owner FROM key_partitions WHERE partition = ${partition}`,
  );
  return row ? { fenceToken: BigInt(String(row.fence_token)), owner: row.owner } : null;
}
