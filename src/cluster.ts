/**
 * Joining the cluster (NATS_URL and DATABASE_URL set): key partition leases in JetStream KV
 * (actors/cluster/partitions.ts), the slot and permit allocators this node runs for the
 * partitions it owns, this node's shares of every key's slots (actors/key/capacity.ts) and its
 * permits of keys' rates and spend (actors/key/permits.ts).
 *
 *   start: claim partitions → for each, raise its fencing token in the database, then serve
 *          grants and permits for it and tell every node (PARTITION_EVENTS) so their shares
 *          re-register and their permits are reported to the new owner.
 *   leave: give every share back, then every partition (deleted, so others take them at once).
 *   pools: this node's quota of each backend's cap (actors/pool/quota.ts), once the pools exist.
 */
import { hostname } from "node:os";
import { runTask, taskFailed } from "./background.ts";
import { PARTITION_LEASE_TTL_MS, PartitionLeases, partitionBucket } from "../actors/cluster/partitions.ts";
import { GRANT_REQUEST_TIMEOUT_MS, SlotAllocator, SlotShares, TAKEOVER_QUIET_MS, type Tenure } from "../actors/key/capacity.ts";
import type { PoolHost } from "../actors/pool/host.ts";
import { BackendQuotas, QUOTA_TTL_MS, quotaBucket } from "../actors/pool/quota.ts";
import { PermitAllocator, PERMIT_REQUEST_TIMEOUT_MS, RATE_TAKEOVER_QUIET_MS, RatePermits } from "../actors/key/permits.ts";
import { GRANT, PARTITION_EVENTS, PERMITS } from "../actors/protocol.ts";
import { partitionOf, type Subjects } from "../actors/subjects.ts";
import type { Unsubscribe } from "./bus/bus.ts";
import type { NatsBus } from "./bus/nats.ts";
import { monthSpentMicro } from "../actors/key/actor.ts";
import type { Db } from "./db/client.ts";
import { randomBase62 } from "./ids.ts";
import type { KeyStore } from "./keys/store.ts";
import { fenceOf, raiseFence } from "./ledger/fence.ts";
import type { Logger } from "./log.ts";

/** After a key event, how long a node waits before re-registering its share of the key. */
export const KEY_EVENT_RENEW_DELAY_MS = 200;

export interface ClusterDeps {
  bus: NatsBus;
  db: Db;
  keys: KeyStore;
  subjects: Subjects;
  prefix: string;
  /** Copies JetStream keeps of the partition and quota buckets (NATS_KV_REPLICAS). */
  kvReplicas: number;
  log: Logger;
}

export class Cluster {
  readonly node = `${hostname()}-${process.pid}-${randomBase62(6)}`;
  readonly shares: SlotShares;
  readonly allocator: SlotAllocator;
  readonly permits: RatePermits;
  readonly permitAllocator: PermitAllocator;
  private leases: PartitionLeases | null = null;
  private readonly tenures = new Map<number, Tenure>();
  private readonly serving = new Map<number, Unsubscribe>();
  private stopEvents: Unsubscribe | null = null;
  private quotas: BackendQuotas | null = null;

  constructor(private readonly deps: ClusterDeps) {
    const { bus, subjects } = deps;
    const tenure = (p: number) => (this.leases?.owns(p) ? (this.tenures.get(p) ?? null) : null);
    const ownsPartition = (p: number) => this.leases?.owns(p) ?? false;
    // Accounts' limits are held like keys' (src/keys/accountLimits.ts): one allocator, one partition space.
    const holders = { get: (id: string) => deps.keys.holder(id) };
    this.allocator = new SlotAllocator(holders, tenure);
    this.shares = new SlotShares({
      node: this.node,
      ask: (req) => bus.request(GRANT, subjects.keyGrant(partitionOf(req.keyId)), req, { timeoutMs: GRANT_REQUEST_TIMEOUT_MS }),
      ownsPartition,
      log: deps.log,
    });
    this.permitAllocator = new PermitAllocator({ keys: holders, tenure, monthSpent: (keyId) => monthSpentMicro(deps.db, keyId) });
    this.permits = new RatePermits({
      node: this.node,
      ask: (req) => bus.request(PERMITS, subjects.keyPermits(partitionOf(req.keyId)), req, { timeoutMs: PERMIT_REQUEST_TIMEOUT_MS }),
      ownsPartition,
      allocator: this.permitAllocator,
      log: deps.log,
    });
  }

  /** The nodes this one sees alive (itself included), as of its last lease round. */
  get liveNodes(): number {
    return this.leases?.liveNodes ?? 1;
  }

  get partitionsOwned(): number {
    return this.leases?.ownedCount ?? 0;
  }

  ownedPartitions(): number[] {
    return this.leases?.ownedPartitions() ?? [];
  }

  async start(): Promise<void> {
    const { bus, db, subjects, log } = this.deps;
    const kv = await bus.nc.jetstream().views.kv(partitionBucket(this.deps.prefix), {
      ttl: PARTITION_LEASE_TTL_MS,
      history: 1,
      replicas: this.deps.kvReplicas,
    });
    this.stopEvents = bus.subscribe(PARTITION_EVENTS, subjects.partitionEvents, (e) => {
      if (e.owner === "")
        runTask("partition_tick", log, () => this.leases?.tick()); // given back: take it now rather than at the next renewal
      else if (e.owner !== this.node) {
        this.shares.partitionMoved(e.partition);
        this.permits.partitionMoved(e.partition);
      }
    });
    this.leases = new PartitionLeases(
      kv,
      this.node,
      {
        acquired: async (p, fenceToken) => {
          if (!(await raiseFence(db, p, fenceToken, this.node))) {
            // A later claim was raised first (this node was deposed), or the bucket's revisions went back.
            const held = await fenceOf(db, p);
            log("warn", "partition_fence_refused", {
              partition: p,
              fenceToken,
              databaseToken: held?.fenceToken ?? null,
              databaseOwner: held?.owner ?? null,
            });
            return false;
          }
          this.tenures.set(p, { fenceToken, acquiredAtMs: performance.now() });
          const grants = bus.serve(GRANT, subjects.keyGrant(p), (req) => this.allocator.grant(req));
          const permits = bus.serve(PERMITS, subjects.keyPermits(p), (req) => this.permitAllocator.grant(req));
          this.serving.set(p, () => {
            grants();
            permits();
          });
          bus.publish(PARTITION_EVENTS, subjects.partitionEvents, { partition: p, owner: this.node, fenceToken });
          this.shares.partitionMoved(p);
          this.permits.partitionMoved(p);
          return true;
        },
        lost: (p) => {
          this.serving.get(p)?.();
          this.serving.delete(p);
          this.tenures.delete(p);
          this.allocator.forget(p);
          this.permitAllocator.forget(p);
        },
      },
      log,
    );
    await this.leases.start();
    this.shares.start();
    this.permits.start();
    log("info", "cluster_joined", { node: this.node, partitions: this.leases.ownedCount, nodes: this.leases.liveNodes });
  }

  /**
   * A key's limits changed: this node's share is re-registered with the owner shortly, once the
   * owner has surely dropped its cached copy of the key on the same event, so the new limit
   * holds cluster-wide within KEY_EVENT_RENEW_DELAY_MS plus a round trip (each node applies a
   * lowered limit to its own admissions at once).
   */
  keyChanged(keyId: string): void {
    const renew = () => Promise.all(this.shares.renew({ keyIds: [keyId], force: true }));
    setTimeout(() => runTask("slot_share_renew", this.deps.log, renew), KEY_EVENT_RENEW_DELAY_MS);
  }

  /** Splits every backend's cap with the other nodes, by demand. */
  async startQuotas(pools: PoolHost): Promise<void> {
    const kv = await this.deps.bus.nc.jetstream().views.kv(quotaBucket(this.deps.prefix), {
      ttl: QUOTA_TTL_MS,
      history: 1,
      replicas: this.deps.kvReplicas,
    });
    this.quotas = new BackendQuotas(kv, this.node, pools, this.deps.log);
    await this.quotas.tick().catch((error: unknown) => taskFailed("quota_tick", this.deps.log, error));
    this.quotas.start();
  }

  /**
   * How long the quiet periods of the partitions this node owns last yet (≤ 0: over): for
   * TAKEOVER_QUIET_MS and RATE_TAKEOVER_QUIET_MS after each takeover an owner grows no share, so a
   * key's first request here would wait out the rest of it.
   */
  quietLeftMs(): number {
    let lastAcquiredMs = Number.NEGATIVE_INFINITY;
    for (const tenure of this.tenures.values()) lastAcquiredMs = Math.max(lastAcquiredMs, tenure.acquiredAtMs);
    return lastAcquiredMs + Math.max(TAKEOVER_QUIET_MS, RATE_TAKEOVER_QUIET_MS) - performance.now();
  }

  /** Ends once quietLeftMs() is over: start-up awaits it before the port opens. */
  async quietOver(): Promise<void> {
    const leftMs = this.quietLeftMs();
    if (leftMs > 0) await Bun.sleep(leftMs + 1);
  }

  /** Leaving (after the node's requests drained): shares first, then partitions. */
  async leave(): Promise<void> {
    await this.quotas?.stop();
    await this.shares.stop();
    await this.permits.stop();
    this.stopEvents?.();
    const given = this.ownedPartitions();
    await this.leases?.stop();
    for (const p of given)
      this.deps.bus.publish(PARTITION_EVENTS, this.deps.subjects.partitionEvents, { partition: p, owner: "", fenceToken: 0n });
    this.deps.log("info", "cluster_left", { node: this.node });
  }
}
