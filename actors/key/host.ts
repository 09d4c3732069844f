/**
 * Hosts the key actors of the partitions this node serves, behind the bus. A request for a key
 * is routed by partition (`subjects.keyAdmit(partitionOf(keyId))`); on one node every partition
 * is served here, so every admission is an in-process call. The host also answers wallet
 * recalls (every actor of the account gives its lease slack back), returns idle actors' leases,
 * and drops idle actors when there are more than `KEY_ACTORS_MAX`.
 *
 * In a cluster every node still admits locally, each key actor from this node's own leases (the
 * database keeps the wallet whole whoever holds them); what crosses nodes is the key's
 * concurrency: an admission first takes a slot from this node's share (capacity.ts), granted by
 * the key's partition owner, and a settlement carries that owner's fencing token; and the key's
 * `rpm`, `tpm` and monthly cap: the actor admits from this node's permits (rates.ts), also
 * granted by the owner.
 */
import type { Bus, Unsubscribe } from "../../src/bus/bus.ts";
import { fail } from "../../src/errors.ts";
import {
  ADMIT,
  EXTEND,
  SETTLE,
  WALLET_RECALLS,
  type AdmitReply,
  type AdmitTicket,
  type ExtendReply,
  type ExtendTicket,
  type SettleReply,
  type Settlement,
  type WalletRecall,
} from "../protocol.ts";
import { KEY_PARTITIONS, partitionOf, type Subjects } from "../subjects.ts";
import { keyClassOf } from "../../src/metrics/snapshot.ts";
import { KeyActor, type KeyActorDeps } from "./actor.ts";
import type { SlotShares } from "./capacity.ts";
import type { RatePermits } from "./rates.ts";

/** What a node in a cluster admits from: its shares of keys' slots and its permits of their rates and spend. */
export interface ClusterGates {
  shares: SlotShares;
  permits: RatePermits;
}

export const KEY_ACTORS_MAX = 100_000;
/** A key with no request for this long returns its lease. */
export const KEY_IDLE_MS = 30_000;
export const IDLE_SWEEP_INTERVAL_MS = 5_000;
/** At most one recall per wallet per this interval from this node. */
export const RECALL_INTERVAL_MS = 20;

export class KeyActorHost {
  private readonly actors = new Map<string, KeyActor>();
  private readonly accountOf = new Map<string, string>();
  /** Each key's concurrency tier, for in-flight metrics by key class. */
  private readonly classOf = new Map<string, string>();
  private readonly lastRecallMs = new Map<string, number>();
  private readonly deps: KeyActorDeps;
  private readonly shares: SlotShares | undefined;
  private sweeper: ReturnType<typeof setInterval> | null = null;

  constructor(
    deps: Omit<KeyActorDeps, "recall">,
    private readonly publishRecall: (recall: WalletRecall) => void,
    /** Cluster only; absent, each actor's own counts, windows and month are the limits. */
    private readonly cluster?: ClusterGates,
  ) {
    this.deps = { ...deps, recall: (accountId, fromKeyId) => this.recall(accountId, fromKeyId), rates: cluster?.permits };
    this.shares = cluster?.shares;
  }

  private actor(keyId: string): KeyActor {
    let actor = this.actors.get(keyId);
    if (!actor) {
      if (this.actors.size >= KEY_ACTORS_MAX) this.evictIdle();
      actor = new KeyActor(keyId, this.deps);
      this.actors.set(keyId, actor);
    }
    return actor;
  }

  private evictIdle(): void {
    for (const [id, actor] of this.actors) {
      if (actor.inFlight === 0 && actor.slackMicro === 0n) {
        this.actors.delete(id);
        this.accountOf.delete(id);
        this.classOf.delete(id);
      }
      if (this.actors.size < KEY_ACTORS_MAX / 2) return;
    }
  }

  async admit(ticket: AdmitTicket): Promise<AdmitReply> {
    const key = await this.deps.keys.get(ticket.keyId);
    if (!key || key.revokedAt) return { ok: false, failure: fail("invalid_api_key", "This API key has been revoked.") };
    this.accountOf.set(key.id, key.accountId);
    this.classOf.set(key.id, keyClassOf(key.concurrencyMax));
    if (!this.shares) return this.actor(ticket.keyId).admit(ticket, key);
    const refused = await this.shares.take(key);
    if (refused) return { ok: false, failure: refused };
    const reply = await this.actor(ticket.keyId).admit(ticket, key);
    if (!reply.ok) this.shares.give(key.id);
    return reply;
  }

  async extend(ticket: ExtendTicket): Promise<ExtendReply> {
    const key = await this.deps.keys.get(ticket.keyId);
    if (!key || key.revokedAt) return { ok: false, failure: fail("invalid_api_key", "This API key has been revoked.") };
    return this.actor(ticket.keyId).extend(ticket, key);
  }

  async settle(settlement: Settlement): Promise<SettleReply> {
    const accountId = this.accountOf.get(settlement.keyId) ?? (await this.deps.keys.get(settlement.keyId))?.accountId;
    if (!accountId) return { ok: false, failure: fail("invalid_request", `Unknown key ${settlement.keyId}.`) };
    const actor = this.actor(settlement.keyId);
    if (!this.shares) return actor.settle(settlement, accountId);
    const mine = actor.admitted(settlement.requestId);
    const fence = { partition: partitionOf(settlement.keyId), fenceToken: this.shares.fenceOf(settlement.keyId) };
    const reply = await actor.settle(settlement, accountId, fence);
    if (mine) this.shares.give(settlement.keyId);
    return reply;
  }

  /** Admissions by path (local share, own partition, another node's partition): metrics and bench. */
  admissionsByPath(): Record<string, number> {
    return { ...(this.shares?.admissions ?? {}) };
  }

  /** Rate admissions by path (this node's permits, as the key's owner, after asking the owner): metrics. */
  rateAdmissionsByPath(): Record<string, number> {
    return { ...(this.cluster?.permits.admissions ?? {}) };
  }

  /** Money this node's leases hold and have not committed to a request (metrics). */
  slackMicro(): bigint {
    let slack = 0n;
    for (const actor of this.actors.values()) slack += actor.slackMicro;
    return slack;
  }

  /** This node's open leases and what they hold (metrics). */
  leaseTotals(): { open: number; heldMicro: bigint } {
    let open = 0;
    let held = 0n;
    for (const actor of this.actors.values()) {
      const t = actor.leaseTotals;
      open += t.open;
      held += t.heldMicro;
    }
    return { open, heldMicro: held };
  }

  /** Slots in use on this node by key class (metrics): never by key. */
  inFlightByClass(): Map<string, number> {
    const byClass = new Map<string, number>();
    for (const [id, actor] of this.actors) {
      const keyClass = this.classOf.get(id);
      if (keyClass !== undefined) byClass.set(keyClass, (byClass.get(keyClass) ?? 0) + actor.inFlight);
    }
    return byClass;
  }

  /** Slots in use for a key on this node (tests and metrics). */
  inFlight(keyId: string): number {
    return this.actors.get(keyId)?.inFlight ?? 0;
  }

  private recall(accountId: string, fromKeyId: string): void {
    const now = performance.now();
    if (now - (this.lastRecallMs.get(accountId) ?? -Infinity) < RECALL_INTERVAL_MS) return;
    this.lastRecallMs.set(accountId, now);
    if (this.lastRecallMs.size > KEY_ACTORS_MAX) this.lastRecallMs.clear();
    this.publishRecall({ accountId, fromKeyId });
    void this.releaseAccount({ accountId, fromKeyId }); // this node at once, without waiting for the echo
  }

  private async releaseAccount(recall: WalletRecall): Promise<void> {
    for (const [keyId, actor] of this.actors) {
      if (keyId !== recall.fromKeyId && this.accountOf.get(keyId) === recall.accountId) await actor.recall();
    }
  }

  /** Returns the leases of keys idle for KEY_IDLE_MS. */
  async sweepIdle(): Promise<void> {
    const now = performance.now();
    for (const actor of this.actors.values()) {
      if (actor.inFlight === 0 && actor.slackMicro > 0n && now - actor.lastUseMs > KEY_IDLE_MS) await actor.release();
    }
  }

  /** Serves the given partitions (default all) on the bus, shared with other nodes by queue group. */
  serve(bus: Bus, subjects: Subjects, partitions: number[] = [...Array(KEY_PARTITIONS).keys()]): Unsubscribe {
    const stops = partitions.flatMap((p) => [
      bus.serve(ADMIT, subjects.keyAdmit(p), (t) => this.admit(t), { queue: "keys" }),
      bus.serve(SETTLE, subjects.keySettle(p), (s) => this.settle(s), { queue: "keys" }),
      bus.serve(EXTEND, subjects.keyExtend(p), (t) => this.extend(t), { queue: "keys" }),
    ]);
    stops.push(bus.subscribe(WALLET_RECALLS, subjects.walletRecalls, (m) => void this.releaseAccount(m)));
    this.sweeper = setInterval(() => void this.sweepIdle(), IDLE_SWEEP_INTERVAL_MS);
    return () => {
      for (const stop of stops) stop();
      if (this.sweeper) clearInterval(this.sweeper);
    };
  }

  /** Gives every lease back (shutdown): waits for in-flight requests to settle first. */
  async releaseAll(): Promise<void> {
    for (const actor of this.actors.values()) await actor.release();
    await this.deps.writer.flush();
  }
}
