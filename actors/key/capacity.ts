/**
 * Delegated concurrency capacity across nodes, after Google's Doorman: the owner of a key's
 * partition splits the key's `concurrency_max` into shares, one per node, and each node admits
 * from its own share in memory. A node asks the owner (one request/reply on `keyGrant(p)`) only
 * when its share is used up, and re-registers it every `GRANT_RENEW_MS` while its use changes or
 * half the grant's life has passed, so shares follow use (Doorman's rebalancing).
 *
 * Invariant: Σ over nodes of slots in use ≤ concurrency_max, because inUse ≤ granted on each
 * node and Σ granted ≤ concurrency_max at the owner.
 *
 * In full, with the reasoning: docs/internals.md#slot-shares-across-nodes.
 */
import { every, runTask } from "../../src/background.ts";
import type { Failure } from "../../src/errors.ts";
import { silentLogger, type Logger } from "../../src/log.ts";
import type { KeyRecord } from "../../src/keys/store.ts";
import type { GrantReply, GrantRequest } from "../protocol.ts";
import { partitionOf } from "../subjects.ts";
import { systemClock, type Clock } from "./clock.ts";
import { concurrencyRefused, type LimitHolders } from "./gate.ts";
import { askOwner, awaitGrant, joinAsk, KeyStates, notOwner, ownerUnreachable, PartitionOwner, type Tenure } from "./grant.ts";

export type { Tenure } from "./grant.ts";

/** A grant lives this long: longer than a dead owner's partition takes to move (lease TTL + a renewal). */
export const GRANT_TTL_MS = 10_000;
/** How often a node looks at its shares (renewing those whose use changed or which are half-expired). */
export const GRANT_RENEW_MS = 500;
/** A new owner grows nobody's share for this long after taking a partition. */
export const TAKEOVER_QUIET_MS = 1_000;
/** A share is its node's recent peak use plus this headroom (at least GRANT_HEADROOM_MIN)… */
export const GRANT_HEADROOM_FRACTION = 0.5;
export const GRANT_HEADROOM_MIN = 2;
/** Bound on one grant request/reply. */
export const GRANT_REQUEST_TIMEOUT_MS = 2_000;
/** A share unused this long is given back. */
export const SHARE_IDLE_MS = 30_000;
export const SHARES_MAX = 100_000;
/** Keys with claims an owner keeps before it sweeps the expired ones. */
export const CLAIMED_KEYS_MAX = 100_000;

interface Claim {
  slots: number;
  want: number;
  /**
   * What the node may occupy until its next report: max(slots, the previous grant, its reported
   * use). A node admits up to its previous grant until this reply reaches it, so a share that
   * shrinks frees its slots for others only at the node's next report.
   */
  occupied: number;
  expiresAtMs: number;
}

/** The owner's side: splits each key's slots between the nodes that ask. */
export class SlotAllocator {
  private readonly owner: PartitionOwner;
  private readonly claims = new KeyStates<Map<string, Claim>>({
    sizeMax: CLAIMED_KEYS_MAX,
    idle: (claims) => this.unexpired(claims) === 0,
  });

  constructor(
    private readonly keys: LimitHolders,
    tenure: (partition: number) => Tenure | null,
    private readonly clock: Clock = systemClock,
  ) {
    this.owner = new PartitionOwner({ tenure, clock, quietMs: TAKEOVER_QUIET_MS });
  }

  async grant(req: GrantRequest): Promise<GrantReply> {
    const p = partitionOf(req.keyId);
    const tenure = this.owner.tenureOf(p);
    if (!tenure) return notOwner(p);
    const key = await this.keys.get(req.keyId);
    const max = !key || key.revokedAt ? 0 : key.concurrencyMax;
    const held = () => Math.max(req.held, this.claims.get(req.keyId)?.get(req.node)?.slots ?? 0);
    const grows = req.want > held();
    // A growing ask waits out the quiet period; what its node holds is confirmed before it waits,
    // so that the grants made when the period ends (its own or another node's) count those slots.
    if (grows && this.owner.quietLeftMs(tenure) > 0 && this.owner.holds(p, tenure)) this.allot(req, max, held());
    const quiet = await this.owner.quiet(p, tenure, grows);
    if (quiet === "moved") return this.grant(req);
    // Synchronous from here: no other grant of the key interleaves.
    if (!this.owner.holds(p, tenure)) return notOwner(p);
    // In the quiet period only what the node says it holds is confirmed.
    const slots = this.allot(req, max, quiet === "quiet" ? held() : Infinity);
    return { ok: true, slots, ttlMs: GRANT_TTL_MS, fenceToken: tenure.fenceToken };
  }

  /** Synchronous: no other grant of the key interleaves between reading the claims and writing them. */
  private allot(req: GrantRequest, max: number, cap: number): number {
    const claims = this.claims.of(req.keyId, () => new Map());
    const now = this.clock.now();
    let othersSlots = 0;
    let othersWant = 0;
    for (const [node, c] of claims) {
      if (node === req.node) continue;
      if (c.expiresAtMs <= now) claims.delete(node);
      else {
        othersSlots += c.occupied;
        othersWant += c.want;
      }
    }
    const free = Math.max(0, max - othersSlots);
    let slots = Math.min(req.want, free, cap);
    if (othersWant + req.want > max) {
      // Contended: nobody keeps more than a fair share unless its requests already use it.
      const fair = Math.ceil(max / (claims.size + (claims.has(req.node) ? 0 : 1)));
      slots = Math.min(slots, Math.max(fair, req.inUse));
    }
    const previous = claims.get(req.node)?.slots ?? req.held;
    const occupied = Math.max(slots, previous, req.inUse);
    // A node gives its share back only once it stopped admitting from it (held 0, nothing in use).
    if (req.want === 0 && req.held === 0 && req.inUse === 0) claims.delete(req.node);
    else claims.set(req.node, { slots, want: req.want, occupied, expiresAtMs: now + GRANT_TTL_MS });
    if (claims.size === 0) this.claims.delete(req.keyId);
    return slots;
  }

  /** Drops a key's expired claims: how many are left. */
  private unexpired(claims: Map<string, Claim>): number {
    const now = this.clock.now();
    for (const [node, c] of claims) if (c.expiresAtMs <= now) claims.delete(node);
    return claims.size;
  }

  /** The partition moved away: its claims belong to the next owner now. */
  forget(partition: number): void {
    this.claims.forget(partition);
  }

  /** Slots a key's nodes may occupy, over every node (tests). */
  granted(keyId: string): number {
    let sum = 0;
    for (const c of this.claims.get(keyId)?.values() ?? []) sum += c.occupied;
    return sum;
  }
}

interface Share {
  granted: number;
  inUse: number;
  /** Highest inUse since the last renewal: what the next want is sized on. */
  peak: number;
  /** The want the owner last heard. */
  asked: number;
  fenceToken: bigint | null;
  expiresAtMs: number;
  lastUseMs: number;
  asking: Promise<GrantReply | null> | null;
}

export type AdmissionPath = "local" | "owner_local" | "owner_remote";

export interface ShareDeps {
  node: string;
  /** Sends a grant request to the key's partition owner. */
  ask: (req: GrantRequest) => Promise<GrantReply>;
  /** Whether this node owns the partition (asking it costs no broker hop). */
  ownsPartition: (partition: number) => boolean;
  clock?: Clock;
  /** Where a failed renewal is logged (it is retried by the next one). */
  log?: Logger;
}

/** A node's side: its shares of every key it admits, and the admissions counted by path. */
export class SlotShares {
  private readonly shares = new KeyStates<Share>({ sizeMax: SHARES_MAX, idle: (s) => s.inUse === 0 && s.granted === 0 });
  private readonly clock: Clock;
  private stopRenewing: (() => void) | null = null;
  readonly admissions: Record<AdmissionPath, number> = { local: 0, owner_local: 0, owner_remote: 0 };

  constructor(private readonly deps: ShareDeps) {
    this.clock = deps.clock ?? systemClock;
  }

  private share(keyId: string): Share {
    const blank = (): Share => ({
      granted: 0,
      inUse: 0,
      peak: 0,
      asked: 0,
      fenceToken: null,
      expiresAtMs: 0,
      lastUseMs: this.clock.now(),
      asking: null,
    });
    return this.shares.of(keyId, blank);
  }

  /**
   * Takes a slot if the share has one, within the key's limit as this node knows it (a lowered
   * limit applies here at once) and while the grant is unexpired.
   */
  private tryTake(share: Share, key: KeyRecord): boolean {
    if (share.inUse >= share.granted || share.inUse >= key.concurrencyMax || this.clock.now() >= share.expiresAtMs) return false;
    share.inUse++;
    share.peak = Math.max(share.peak, share.inUse);
    share.lastUseMs = this.clock.now();
    return true;
  }

  /** Takes a slot of the key: from this node's share, or after asking the owner for more. */
  async take(key: KeyRecord): Promise<Failure | null> {
    const share = this.share(key.id);
    if (this.tryTake(share, key)) {
      this.admissions.local++;
      return null;
    }
    const path: AdmissionPath = this.deps.ownsPartition(partitionOf(key.id)) ? "owner_local" : "owner_remote";
    const need = () => Math.min(key.concurrencyMax, this.wantFor(share.inUse + 1));
    const refused = () => concurrencyRefused(key);
    // Refused once the owner has heard a want that covers this admission (an ask already under
    // way may be for less) and answered it; an ask no owner answered is a 503, whatever an
    // earlier answer said (the key's limit was not checked this time).
    const outcome = await awaitGrant(this.clock, {
      ask: () => this.refresh(key.id, share, need()),
      take: () => this.tryTake(share, key),
      refusal: (reply, mine) => {
        if (reply === null) return mine ? ownerUnreachable() : undefined;
        return share.asked >= need() ? refused() : undefined;
      },
      timedOut: refused,
    });
    if (outcome !== "taken") return outcome;
    this.admissions[path]++;
    return null;
  }

  /** A request admitted here settled (or was refused after taking its slot). */
  give(keyId: string): void {
    const share = this.shares.get(keyId);
    if (share && share.inUse > 0) share.inUse--;
  }

  /** The fencing token a settlement of this key carries: the epoch of the owner that granted the share. */
  fenceOf(keyId: string): bigint | null {
    return this.shares.get(keyId)?.fenceToken ?? null;
  }

  private wantFor(use: number): number {
    return use + Math.max(GRANT_HEADROOM_MIN, Math.ceil(use * GRANT_HEADROOM_FRACTION));
  }

  private refresh(keyId: string, share: Share, want: number) {
    return joinAsk(share, () =>
      askOwner(this.clock, async (sentAtMs) => {
        const reply = await this.deps.ask({ keyId, node: this.deps.node, want, held: share.granted, inUse: share.inUse });
        if (!reply.ok) return null; // not the owner (any more): ask again
        share.granted = reply.slots;
        share.asked = want;
        share.fenceToken = reply.fenceToken;
        share.expiresAtMs = sentAtMs + reply.ttlMs;
        return reply;
      }),
    );
  }

  /** Re-registers shares whose use changed or which are half-expired; gives idle ones back. */
  renew(options: { keyIds?: Iterable<string>; force?: boolean } = {}): Promise<unknown>[] {
    const now = this.clock.now();
    const pending: Promise<unknown>[] = [];
    for (const keyId of [...(options.keyIds ?? this.shares.keys())]) {
      const share = this.shares.get(keyId);
      if (!share || share.asking) continue;
      const idle = share.inUse === 0 && now - share.lastUseMs > SHARE_IDLE_MS;
      const want = idle ? 0 : this.wantFor(share.peak);
      share.peak = share.inUse;
      if (share.granted === 0 && want === 0 && share.inUse === 0) {
        if (idle) this.shares.delete(keyId);
        continue;
      }
      // Idle: stop admitting from the share before giving it back, so the owner may re-grant it at once.
      if (idle) share.granted = 0;
      const halfGone = now > share.expiresAtMs - GRANT_TTL_MS / 2;
      // Short of what it asked (contended), needing more, or holding over twice its need: report
      // now, so the owner can move slots. Smaller changes wait for the half-life renewal, which
      // keeps a steady key at one grant request per node per GRANT_TTL_MS / 2.
      const short = share.granted < share.asked;
      const changed = want > share.granted || want * 2 < share.granted;
      if (options.force || halfGone || short || changed) pending.push(this.refresh(keyId, share, want).reply);
    }
    return pending;
  }

  /** Renews at once the shares of keys in a partition that just changed owner. */
  partitionMoved(partition: number): void {
    runTask("slot_share_renew", this.log, () => Promise.all(this.renew({ keyIds: this.shares.inPartition(partition), force: true })));
  }

  private get log(): Logger {
    return this.deps.log ?? silentLogger;
  }

  /** Each tick starts its renewals without waiting for the last tick's: a key whose owner is slow to answer holds up no other. */
  start(): void {
    this.stopRenewing = every("slot_share_renew", GRANT_RENEW_MS, this.log, () => {
      runTask("slot_share_renew", this.log, () => Promise.all(this.renew()));
    });
  }

  /** Leaving: stops renewing and gives every share back (after the node's requests settled). */
  async stop(): Promise<void> {
    this.stopRenewing?.();
    const gone: Promise<unknown>[] = [];
    for (const [keyId, share] of this.shares) {
      if (share.granted === 0) continue;
      share.granted = 0;
      gone.push(this.deps.ask({ keyId, node: this.deps.node, want: 0, held: 0, inUse: share.inUse }).catch(() => {}));
    }
    await Promise.all(gone);
    this.shares.clear();
  }
}
