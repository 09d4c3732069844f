/**
 * Hosts the key actors of the partitions this node serves, behind the bus. A request for a key
 * is routed by partition (`subjects.keyAdmit(partitionOf(keyId))`); on one node every partition
 * is served here, so every admission is an in-process call. The host keeps one purse per account
 * (purse.ts): the leases every key of the account draws from on this node. It answers other
 * nodes' wallet recalls (the account's purse gives its slack back), returns idle purses' leases,
 * and drops idle actors and empty purses when there are more than `KEY_ACTORS_MAX`.
 *
 * In full, with the reasoning: docs/internals.md#the-key-actor-host.
 */
import type { Bus, Unsubscribe } from "../../src/bus/bus.ts";
import { every, runTask } from "../../src/background.ts";
import { fail } from "../../src/errors.ts";
import {
  ADMIT,
  EXTEND,
  PURSE_FIGURES,
  SETTLE,
  WALLET_RECALLS,
  type AdmitReply,
  type AdmitTicket,
  type ExtendReply,
  type ExtendTicket,
  type PurseFigures,
  type SettleReply,
  type Settlement,
  type WalletRecall,
} from "../protocol.ts";
import { KEY_PARTITIONS, partitionOf, type Subjects } from "../subjects.ts";
import { newId } from "../../src/ids.ts";
import { ACCOUNT_CONCURRENCY_MAX_DEFAULT } from "../../src/keys/accountLimits.ts";
import { KeyActor, type KeyActorDeps } from "./actor.ts";
import { AccountPurse, type PurseDeps } from "./purse.ts";
import { SlotAllocator, SlotShares, type Tenure } from "./capacity.ts";
import { PermitAllocator, RatePermits } from "./permits.ts";
import type { LimitHolders } from "./gate.ts";
import type { KeyRecord } from "../../src/keys/store.ts";
import { tokensOf } from "../../src/units.ts";

/** Key classes for in-flight gauges: by concurrency tier, never by key. */
export function keyClassOf(concurrencyMax: number): string {
  if (concurrencyMax <= 4) return "concurrency_le_4";
  if (concurrencyMax <= 32) return "concurrency_le_32";
  if (concurrencyMax <= 256) return "concurrency_le_256";
  return "concurrency_gt_256";
}

/** What a node in a cluster admits from: its shares of keys' slots and its permits of their rates and spend. */
export interface ClusterGates {
  shares: SlotShares;
  permits: RatePermits;
}

/**
 * The gates of one node alone: an allocator that owns every partition, asked in process. Accounts'
 * limits are then kept exactly (one claimer), by the same code as in a cluster.
 */
export function localGates(holders: LimitHolders): ClusterGates {
  const always: Tenure = { fenceToken: 0n, acquiredAtMs: Number.NEGATIVE_INFINITY };
  const slots = new SlotAllocator(holders, () => always);
  const shares = new SlotShares({ node: "local", ask: (req) => slots.grant(req), ownsPartition: () => true });
  const allocator = new PermitAllocator({ keys: holders, tenure: () => always, monthSpent: async () => 0n });
  const permits = new RatePermits({ node: "local", ask: (req) => allocator.grant(req), ownsPartition: () => true, allocator });
  return { shares, permits };
}

/** An admission's hold on its account's limits: its tokens, for the tpm correction at settle. */
interface AccountAdmission {
  accountId: string;
  tokens: number;
}

/** Key actors, and account purses, a node keeps at most (idle ones are dropped past it). */
export const KEY_ACTORS_MAX = 100_000;
/** An account with no request on this node for this long returns its leases, unless the node is told otherwise (KEY_IDLE_MS). */
export const KEY_IDLE_MS = 30_000;
/** The idle sweep's interval, or the idle time when that is shorter. */
export const IDLE_SWEEP_INTERVAL_MS = 5_000;
/**
 * Purses the idle sweep works on at once. A lease's close may wait for the node's usage to be posted
 * (up to the writer's bound), so one after another a few slow closes held every purse behind them:
 * after a database outage an idle account's lease came back only when all the others' had.
 */
export const SWEEP_PURSES_AT_ONCE = 8;

export type KeyActorHostDeps = Omit<KeyActorDeps, "purseOf"> &
  Omit<PurseDeps, "recall"> & {
    /** An account with no request here for this long returns its leases (default KEY_IDLE_MS). */
    keyIdleMs?: number;
  };
/** At most one recall per wallet per this interval from this node. */
export const RECALL_INTERVAL_MS = 20;

/** An account whose limits are all the defaults (no operator set one). */
function atDefaults(account: Pick<KeyRecord, "concurrencyMax" | "rpm" | "tpm">): boolean {
  return account.concurrencyMax === ACCOUNT_CONCURRENCY_MAX_DEFAULT && account.rpm === null && account.tpm === null;
}

export class KeyActorHost {
  private readonly actors = new Map<string, KeyActor>();
  private readonly purses = new Map<string, AccountPurse>();
  private readonly accountOf = new Map<string, string>();
  /** Each key's concurrency tier, for in-flight metrics by key class. */
  private readonly classOf = new Map<string, string>();
  private readonly lastRecallMs = new Map<string, number>();
  private readonly deps: KeyActorDeps;
  private readonly purseDeps: PurseDeps;
  private readonly shares: SlotShares | undefined;
  /** What admits accounts' limits: the cluster's gates, or this node's own. */
  private readonly accountGates: ClusterGates;
  /** Requests admitted here, by id, holding their account's slot (and permits). */
  private readonly accountAdmissions = new Map<string, AccountAdmission>();
  private readonly keyIdleMs: number;
  /** This host's name in the recalls it sends, so that it does not answer its own. */
  readonly hostId = newId("host");
  /** The live nodes of the cluster as this node sees them (set once it joins one): in its purse figures. */
  liveNodes: () => number = () => 1;

  constructor(
    deps: KeyActorHostDeps,
    private readonly publishRecall: (recall: WalletRecall) => void,
    /** Cluster only; absent, each actor's own counts, windows and month are the limits. */
    private readonly cluster?: ClusterGates,
  ) {
    this.purseDeps = { ...deps, recall: (accountId, fromKeyId) => this.recall(accountId, fromKeyId) };
    this.deps = { ...deps, purseOf: (accountId) => this.purseOf(accountId), rates: cluster?.permits };
    this.shares = cluster?.shares;
    this.accountGates = cluster ?? localGates({ get: (id) => deps.keys.holder(id) });
    this.keyIdleMs = deps.keyIdleMs ?? KEY_IDLE_MS;
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

  /** The account's purse on this node: every key of the account draws from it. */
  private purseOf(accountId: string): AccountPurse {
    let purse = this.purses.get(accountId);
    if (!purse) {
      if (this.purses.size >= KEY_ACTORS_MAX) this.evictEmptyPurses();
      purse = new AccountPurse(accountId, this.purseDeps);
      this.purses.set(accountId, purse);
    }
    return purse;
  }

  private evictIdle(): void {
    for (const [id, actor] of this.actors) {
      if (actor.inFlight === 0) {
        this.actors.delete(id);
        this.accountOf.delete(id);
        this.classOf.delete(id);
      }
      if (this.actors.size < KEY_ACTORS_MAX / 2) return;
    }
  }

  /** A purse that holds nothing is forgotten; a request in flight keeps its lease, not the purse. */
  private evictEmptyPurses(): void {
    for (const [accountId, purse] of this.purses) {
      if (purse.empty) this.purses.delete(accountId);
      if (this.purses.size < KEY_ACTORS_MAX / 2) return;
    }
  }

  async admit(ticket: AdmitTicket): Promise<AdmitReply> {
    const key = await this.deps.keys.get(ticket.keyId);
    if (!key || key.revokedAt) return { ok: false, failure: fail("invalid_api_key", "This API key has been revoked.") };
    this.accountOf.set(key.id, key.accountId);
    this.classOf.set(key.id, keyClassOf(key.concurrencyMax));
    const account = await this.deps.keys.holder(key.accountId);
    if (!account) return { ok: false, failure: fail("invalid_api_key", "This API key's account no longer exists.") };
    // A batch line takes none of the key's or the account's live slots and rates: the batch worker bounds lines (src/batches/claims.ts).
    if (ticket.batch) return this.actor(ticket.keyId).admit(ticket, key);
    // An account at the defaults has no ceiling its keys could reach (ACCOUNT_KEYS_MAX_DEFAULT keys of at most the
    // console's ceiling): its gate is skipped, so its requests depend on no other partition's owner than their key's.
    if (atDefaults(account)) return this.admitKey(ticket, key);
    const { shares, permits } = this.accountGates;
    const refused = await shares.take(account);
    if (refused) return { ok: false, failure: refused };
    const rated = await permits.admit(account, ticket.reserveTokens, 0n);
    if (!rated.ok) {
      shares.give(account.id);
      return rated.rate ? { ok: false, failure: rated.failure, rate: rated.rate } : { ok: false, failure: rated.failure };
    }
    const reply = await this.admitKey(ticket, key);
    if (!reply.ok) {
      shares.give(account.id);
      permits.release(account.id, { requests: 1, tokens: ticket.reserveTokens, micro: 0n });
    } else this.accountAdmissions.set(ticket.requestId, { accountId: account.id, tokens: ticket.reserveTokens });
    return reply;
  }

  private async admitKey(ticket: AdmitTicket, key: KeyRecord): Promise<AdmitReply> {
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
    const reply = await this.actor(ticket.keyId).extend(ticket, key);
    const held = this.accountAdmissions.get(ticket.requestId);
    const account = reply.ok && held ? await this.deps.keys.holder(held.accountId) : null;
    if (held && account) {
      // Tokens of an extension are counted, never refused, as a key's are.
      await this.accountGates.permits.extend(account, ticket.addTokens, 0n);
      held.tokens += ticket.addTokens;
    }
    return reply;
  }

  /** A request admitted here settled: its account's slot goes back, its tokens correct the account's tpm. */
  private settledAccount(settlement: Settlement): void {
    const held = this.accountAdmissions.get(settlement.requestId);
    if (!held) return;
    this.accountAdmissions.delete(settlement.requestId);
    this.accountGates.shares.give(held.accountId);
    const tokens = Number(tokensOf(settlement.usage)) - held.tokens;
    this.accountGates.permits.settled(held.accountId, { reserveMicro: 0n, billedMicro: 0n, tokens });
  }

  async settle(settlement: Settlement): Promise<SettleReply> {
    const accountId = this.accountOf.get(settlement.keyId) ?? (await this.deps.keys.get(settlement.keyId))?.accountId;
    if (!accountId) return { ok: false, failure: fail("invalid_request", `Unknown key ${settlement.keyId}.`) };
    const actor = this.actor(settlement.keyId);
    if (!this.shares) {
      const reply = await actor.settle(settlement, accountId);
      this.settledAccount(settlement);
      return reply;
    }
    const mine = actor.holdsSlot(settlement.requestId);
    const fence = { partition: partitionOf(settlement.keyId), fenceToken: this.shares.fenceOf(settlement.keyId) };
    const reply = await actor.settle(settlement, accountId, fence);
    if (mine) this.shares.give(settlement.keyId);
    this.settledAccount(settlement);
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

  /** The holds of this node's open leases: renewed while the node lives (see AccountPurse.openHolds). */
  openHolds(): string[] {
    return [...this.purses.values()].flatMap((purse) => purse.openHolds());
  }

  /** Money this node's leases hold and have not committed to a request (metrics). */
  slackMicro(): bigint {
    let slack = 0n;
    for (const purse of this.purses.values()) slack += purse.slackMicro;
    return slack;
  }

  /** This node's open leases and what they hold (metrics). */
  leaseTotals(): { open: number; heldMicro: bigint } {
    let open = 0;
    let held = 0n;
    for (const purse of this.purses.values()) {
      const t = purse.leaseTotals;
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

  /** Asks the other nodes to give back their leases' slack of the account (this node's purse is the asker). */
  private recall(accountId: string, fromKeyId: string): void {
    const now = performance.now();
    if (now - (this.lastRecallMs.get(accountId) ?? -Infinity) < RECALL_INTERVAL_MS) return;
    this.lastRecallMs.set(accountId, now);
    if (this.lastRecallMs.size > KEY_ACTORS_MAX) this.lastRecallMs.clear();
    this.publishRecall({ accountId, fromKeyId, fromHost: this.hostId });
  }

  /** Another node's wallet ran short: this node's purse of the account gives its slack back. */
  private async releaseAccount(recall: WalletRecall): Promise<void> {
    if (recall.fromHost === this.hostId) return; // its own recall, echoed by the bus
    await this.purses.get(recall.accountId)?.recall();
  }

  /**
   * Returns the leases of accounts idle here for `idleMs` (the host's idle time), and closes the drained
   * leases of the others whose close failed (the database was away): their money is the wallet's again.
   */
  async sweepIdle(idleMs = this.keyIdleMs): Promise<void> {
    const now = performance.now();
    const purses = [...this.purses.values()].values();
    const worker = async () => {
      for (const purse of purses) {
        if (purse.outstandingMicro === 0n && purse.slackMicro > 0n && now - purse.lastUseMs >= idleMs) await purse.release();
        else await purse.closeDrained();
      }
    };
    await Promise.all(Array.from({ length: SWEEP_PURSES_AT_ONCE }, worker));
  }

  /** Serves the given partitions (default all) on the bus, shared with other nodes by queue group. */
  serve(bus: Bus, subjects: Subjects, partitions: number[] = [...Array(KEY_PARTITIONS).keys()]): Unsubscribe {
    const stops = partitions.flatMap((p) => [
      bus.serve(ADMIT, subjects.keyAdmit(p), (t) => this.admit(t), { queue: "keys" }),
      bus.serve(SETTLE, subjects.keySettle(p), (s) => this.settle(s), { queue: "keys" }),
      bus.serve(EXTEND, subjects.keyExtend(p), (t) => this.extend(t), { queue: "keys" }),
    ]);
    const log = this.deps.log;
    stops.push(bus.subscribe(WALLET_RECALLS, subjects.walletRecalls, (m) => runTask("wallet_recall", log, () => this.releaseAccount(m))));
    stops.push(bus.serveGather(PURSE_FIGURES, subjects.walletPurses, (ask) => this.purseFigures(ask.accountId)));
    stops.push(every("idle_sweep", Math.min(IDLE_SWEEP_INTERVAL_MS, this.keyIdleMs), log, () => this.sweepIdle()));
    return () => {
      for (const stop of stops) stop();
    };
  }

  /** What this node's purse of the account holds (nothing when it has none). */
  purseFigures(accountId: string): PurseFigures {
    const purse = this.purses.get(accountId);
    return { slackMicro: purse?.slackMicro ?? 0n, outstandingMicro: purse?.outstandingMicro ?? 0n, nodes: this.liveNodes() };
  }

  /** Gives every lease back (shutdown): waits for in-flight requests to settle first. */
  async releaseAll(): Promise<void> {
    for (const purse of this.purses.values()) await purse.release();
    await this.deps.writer.flush();
  }
}
