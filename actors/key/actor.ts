/**
 * The key actor: one per API key, owning its concurrency slots, its per-minute windows and its
 * leases (holds that admit many requests without touching the wallet row each time).
 *
 *   admit(ticket):  slot (429) → requests/tokens per minute (429) → monthly cap (402) → money:
 *                   take the reserve from the current lease in memory; when it has no room, give
 *                   its slack back and open a new lease of LEAST(desired, available) ≥ reserve.
 *                   When the wallet cannot cover the cheap reserve, the edge asks again with an
 *                   exact count; when it cannot cover that either, the actor recalls every
 *                   lease of the wallet and waits (bounded) while any money is still held
 *                   somewhere, and refuses (402) only once nothing is held that could come back.
 *   extend(t):      a stream metered live grows its reserve: from its lease's room in memory, or
 *                   by growing the lease's hold from the wallet (one conditional UPDATE); refused
 *                   (402) when the wallet cannot cover it. Settle may then charge up to the total.
 *   settle(s):      metered = the usage at the admitted prices, Σ units × price over its
 *                   components (input, output, prompt-cache reads and writes). Usage beyond the reserve (hidden
 *                   reasoning, a vendor tokenizer that counts more) is first covered from the
 *                   lease's room, then by growing its hold from what the wallet has (within the
 *                   key's monthly cap); charge = min(metered, what is then covered), appended to
 *                   the usage writer (group commit posts it), and metered − charge is written
 *                   off. Slot freed, lease closed once retired and drained.
 *
 * In a cluster the per-minute windows and the monthly cap are the key's partition owner's, and
 * `deps.rates` (permits.ts) admits from this node's permits; alone, the actor's own windows and its
 * view of the month's spend are the limits.
 *
 * Invariants: slots in use ≤ concurrencyMax; for every lease, consumed + outstanding ≤ amount,
 * so posts never exceed the hold; admission stops at a lease's cut-off (half its life, on the
 * monotonic clock) and whenever the usage writer is failing.
 */
import { sql } from "drizzle-orm";
import type { AdmitReply, AdmitTicket, ExtendReply, ExtendTicket, RateInfo, SettleReply, Settlement } from "../protocol.ts";
import { taskFailed } from "../../src/background.ts";
import type { Db } from "../../src/db/client.ts";
import { fail, type Failure } from "../../src/errors.ts";
import { FifoMap } from "../../src/fifoMap.ts";
import { invariant } from "../../src/invariant.ts";
import { newId } from "../../src/ids.ts";
import { closeHold, growHold, growHoldUpTo, openHold, shrinkHold } from "../../src/ledger/holds.ts";
import type { UsageWriter } from "../../src/ledger/usage.ts";
import { microToToman } from "../../src/catalog/prices.ts";
import type { KeyRecord, KeyStore } from "../../src/keys/store.ts";
import { costOf, tokensOf } from "../../src/units.ts";
import type { Logger } from "../../src/log.ts";
import type { RateGate } from "./gate.ts";
import { RateWindows } from "./window.ts";

/** A lease's hold lives this long by default (LEASE_TTL_MS); past it the sweeper closes it. */
export const LEASE_TTL_MS_DEFAULT = 10 * 60_000;
/** Admission from a lease stops at half its life, so that requests admitted late can finish. */
export const LEASE_ADMIT_FRACTION = 0.5;
/** A lease is sized to cover this many seconds of the key's recent spend… */
export const LEASE_HORIZON_S = 10;
/** …and at least this many reserves of the current size… */
export const LEASE_RESERVES_MIN = 16;
/**
 * …within these bounds. A small lease is no saving: measured with 1,000 keys, 10-toman leases
 * re-opened every few requests and the wallet rows, not the requests, set the pace. Money idle in
 * a lease is recalled as soon as its wallet runs short, so a larger minimum costs nobody.
 */
export const LEASE_MICRO_MIN = 1_000_000_000n; // 1,000 toman
export const LEASE_MICRO_MAX = 100_000_000_000n; // 100,000 toman
/** A wallet that could not fill a lease stays in per-request mode this long. */
export const LOW_BALANCE_MS = 5_000;
/** Longest an admission waits for money held elsewhere to come back. */
export const ADMIT_WAIT_MS_MAX = 3_000;
/** Between two attempts to open a hold while waiting for money. */
export const ADMIT_RETRY_MS = 25;
/** How long a failed open's view of the wallet stands in for another query. */
export const SHORT_MEMO_MS = 50;
const SPEND_HALF_LIFE_MS = 10_000;

export interface KeyActorDeps {
  db: Db;
  keys: KeyStore;
  writer: UsageWriter;
  /** Asks every node to recall the account's leases, except the asking key's. */
  recall: (accountId: string, fromKeyId: string) => void;
  log: Logger;
  /** Cluster-wide rpm, tpm and monthly cap (permits.ts); absent, the actor's own windows and month. */
  rates?: RateGate;
  /** How long a lease's hold lives (a crashed node's money is back after this). */
  leaseTtlMs?: number;
  nowMs?: () => number;
}

export interface Fence {
  partition: number;
  fenceToken: bigint | null;
}

interface Lease {
  holdId: string;
  amount: bigint;
  consumed: bigint;
  outstanding: bigint;
  cutoffMs: number;
  admitting: boolean;
  closing: boolean;
}

interface Admission {
  lease: Lease | null;
  reserve: bigint;
  tokens: number;
  /** Wall-clock time of the admission: the usage record's `admittedAt`, which the fencing rule judges. */
  admittedAtMs: number;
}

/** Request ids this actor settled last, remembered to refuse a second settlement of one. */
export const SETTLED_IDS_MAX = 10_000;

export class KeyActor {
  private readonly admissions = new Map<string, Admission>();
  /** The last SETTLED_IDS_MAX requests settled here, oldest first, with their reply. */
  private readonly settledIds = new FifoMap<string, { reply: SettleReply; meteredMicro: bigint }>(SETTLED_IDS_MAX);
  private readonly leases = new Set<Lease>();
  private current: Lease | null = null;
  private opening: Promise<unknown> | null = null;
  private lowBalanceUntilMs = 0;
  /** The wallet as the last failed open saw it; forgotten on any local change or after SHORT_MEMO_MS. */
  private short: { atMs: number; available: bigint; heldMicro: bigint } | null = null;
  private readonly windows = new RateWindows();
  private spendRate = 0; // micro-toman per second, decaying
  private spendAtMs = 0;
  private month: { key: string; spent: bigint } | null = null;
  private changed = Promise.withResolvers<void>();
  lastUseMs: number;

  constructor(
    readonly keyId: string,
    private readonly deps: KeyActorDeps,
  ) {
    this.lastUseMs = this.now();
  }

  private now(): number {
    return this.deps.nowMs?.() ?? performance.now();
  }

  get inFlight(): number {
    return this.admissions.size;
  }

  /** Whether this actor admitted the request and it has not settled yet. */
  admitted(requestId: string): boolean {
    return this.admissions.has(requestId);
  }

  /** Money this actor holds but has not committed to a request (tests and metrics). */
  get slackMicro(): bigint {
    let slack = 0n;
    for (const lease of this.leases) slack += lease.amount - lease.consumed - lease.outstanding;
    return slack;
  }

  /** Open leases and the money they hold (metrics). */
  get leaseTotals(): { open: number; heldMicro: bigint } {
    let held = 0n;
    for (const lease of this.leases) held += lease.amount;
    return { open: this.leases.size, heldMicro: held };
  }

  private signal(): void {
    this.short = null;
    this.changed.resolve();
    this.changed = Promise.withResolvers<void>();
  }

  async admit(ticket: AdmitTicket, key: KeyRecord): Promise<AdmitReply> {
    this.lastUseMs = this.now();
    if (this.admissions.has(ticket.requestId)) {
      return refuse(fail("invalid_request", `Request ${ticket.requestId} was already admitted.`));
    }
    if (this.admissions.size >= key.concurrencyMax) {
      return refuse(
        fail("concurrency_limit_exceeded", `Too many concurrent requests for this key (limit ${key.concurrencyMax}).`, { retryAfterS: 1 }),
      );
    }
    // The slot is taken before the first await, so the limit holds under concurrency: requests
    // that arrive together (a key's first, waiting for its record) resume together.
    const admission: Admission = { lease: null, reserve: ticket.reserveMicro, tokens: ticket.reserveTokens, admittedAtMs: Date.now() };
    this.admissions.set(ticket.requestId, admission);
    let limits: Awaited<ReturnType<KeyActor["checkLimits"]>>;
    try {
      limits = await this.checkLimits(ticket, key);
    } catch (error) {
      // The month's spend could not be read: nothing was granted, so only the slot goes back.
      this.admissions.delete(ticket.requestId);
      this.deps.log("error", "admit_failed", { keyId: key.id, error: (error as Error).message });
      return unavailable();
    }
    if (!limits.ok) {
      this.admissions.delete(ticket.requestId);
      return limits;
    }
    const gate = this.deps.rates;
    let rate = limits.rate;
    try {
      const got = await this.reserve(admission, key, ticket.exact);
      if ("failure" in got) {
        this.admissions.delete(ticket.requestId);
        gate?.release(key.id, { requests: 1, tokens: ticket.reserveTokens, micro: ticket.reserveMicro });
        const { failure, availableMicro } = got;
        return { ok: false, failure, exactNeeded: !ticket.exact && failure.code === "insufficient_quota", availableMicro };
      }
      if (!gate) {
        this.windows.add(1, ticket.reserveTokens);
        rate = this.windows.info(key);
      }
      return { ok: true, holdId: got.holdId, rate };
    } catch (error) {
      this.admissions.delete(ticket.requestId);
      gate?.release(key.id, { requests: 1, tokens: ticket.reserveTokens, micro: ticket.reserveMicro });
      const cause = (error as { cause?: Error }).cause;
      this.deps.log("error", "admit_failed", { keyId: key.id, error: cause?.message ?? (error as Error).message });
      return refuse(fail("service_unavailable", "The billing database is unavailable; try again shortly.", { retryAfterS: 1 }));
    }
  }

  /** Rates (the cluster's permits, or this actor's windows) and the monthly cap, for an admission whose slot is taken. */
  private async checkLimits(
    ticket: AdmitTicket,
    key: KeyRecord,
  ): Promise<{ ok: true; rate?: RateInfo } | Extract<AdmitReply, { ok: false }>> {
    const gate = this.deps.rates;
    if (gate) {
      if (!this.deps.writer.accepting) return unavailable();
      const verdict = await gate.admit(key, ticket.reserveTokens, ticket.reserveMicro);
      if (!verdict.ok)
        return verdict.rate ? { ok: false, failure: verdict.failure, rate: verdict.rate } : { ok: false, failure: verdict.failure };
      return { ok: true, rate: verdict.rate };
    }
    const limited = this.windows.check(key, 1, ticket.reserveTokens);
    if (limited) return limited.rate ? { ok: false, ...limited } : refuse(limited.failure);
    if (!this.deps.writer.accepting) return unavailable();
    const capped = await this.checkMonthlyCap(key);
    return capped ? refuse(capped) : { ok: true };
  }

  /** Whether this month's charges, every admission's reserve (a new one's included) and `extraMicro` stay within the cap. */
  private async checkMonthlyCap(key: KeyRecord, extraMicro = 0n): Promise<Failure | null> {
    if (key.monthlySpendCapMicro === null) return null;
    const month = await this.monthSpent();
    let outstanding = 0n;
    for (const a of this.admissions.values()) outstanding += a.reserve;
    if (month.spent + outstanding + extraMicro <= key.monthlySpendCapMicro) return null;
    return capExceeded(key.monthlySpendCapMicro, month.spent);
  }

  private async monthSpent(): Promise<{ key: string; spent: bigint }> {
    const monthKey = utcMonth();
    if (this.month?.key === monthKey) return this.month;
    // Charges still in the usage writer are missing here (at most USAGE_FLUSH_MS of them);
    // from now on settle() adds each charge as it happens.
    this.month = { key: monthKey, spent: await monthSpentMicro(this.deps.db, this.keyId) };
    return this.month;
  }

  private room(lease: Lease): bigint {
    return lease.amount - lease.consumed - lease.outstanding;
  }

  private take(lease: Lease, admission: Admission): { holdId: string } {
    lease.outstanding += admission.reserve;
    admission.lease = lease;
    return { holdId: lease.holdId };
  }

  private leaseSize(reserve: bigint): bigint {
    if (this.now() < this.lowBalanceUntilMs) return reserve;
    const elapsedS = Math.max(0, (this.now() - this.spendAtMs) / 1000);
    const rate = this.spendRate * 0.5 ** ((elapsedS * 1000) / SPEND_HALF_LIFE_MS);
    let size = BigInt(Math.ceil(rate * LEASE_HORIZON_S));
    if (size < reserve * BigInt(LEASE_RESERVES_MIN)) size = reserve * BigInt(LEASE_RESERVES_MIN);
    if (size < LEASE_MICRO_MIN) size = LEASE_MICRO_MIN;
    if (size > LEASE_MICRO_MAX) size = LEASE_MICRO_MAX;
    return size < reserve ? reserve : size;
  }

  private async reserve(
    admission: Admission,
    key: KeyRecord,
    exact: boolean,
  ): Promise<{ holdId: string } | { failure: Failure; availableMicro: bigint }> {
    const startedMs = this.now();
    for (;;) {
      const lease = this.current;
      if (lease?.admitting && this.now() < lease.cutoffMs && this.room(lease) >= admission.reserve) {
        return this.take(lease, admission);
      }
      if (this.opening) {
        await this.opening.catch(() => {}); // its own caller reports its failure
        continue;
      }
      // A recent failed open already tells whether trying the wallet again can help.
      let short = this.short !== null && this.now() - this.short.atMs < SHORT_MEMO_MS ? this.short : null;
      if (!short || admission.reserve <= short.available) {
        const opened = this.openLease(admission, key);
        this.opening = opened;
        let result: Awaited<typeof opened>;
        try {
          result = await opened;
        } finally {
          this.opening = null;
        }
        if (result.opened) return { holdId: admission.lease!.holdId };
        short = { atMs: this.now(), available: result.balanceMicro - result.heldMicro, heldMicro: result.heldMicro };
        this.short = short;
      }
      // Not even the cheap bound fits: let the edge count exactly before anyone waits.
      if (!exact) return this.insufficient(admission.reserve, short.available);
      // Nothing is held anywhere that could come back, or we waited long enough.
      if (short.heldMicro === 0n || this.now() - startedMs >= ADMIT_WAIT_MS_MAX) {
        return this.insufficient(admission.reserve, short.available);
      }
      // Money is held somewhere (in flight here, or in another key's or node's lease, or in a
      // lease of this key whose close failed): recall it and wait for it to come back.
      this.deps.recall(key.accountId, this.keyId);
      void this.closeDrained();
      await Promise.race([this.changed.promise, Bun.sleep(ADMIT_RETRY_MS)]);
    }
  }

  /** Opens a new current lease and takes the admission's reserve from it before anything else can. */
  private async openLease(admission: Admission, key: KeyRecord) {
    const reserve = admission.reserve;
    if (this.current) await this.retire(this.current, false);
    const desired = this.leaseSize(reserve);
    const holdId = newId("hold");
    const result = await openHold(this.deps.db, {
      holdId,
      accountId: key.accountId,
      keyId: key.id,
      label: "lease",
      minMicro: reserve,
      desiredMicro: desired,
      ttlMs: this.deps.leaseTtlMs ?? LEASE_TTL_MS_DEFAULT,
    });
    if (result.opened) {
      const lease: Lease = {
        holdId,
        amount: result.amountMicro,
        consumed: 0n,
        outstanding: 0n,
        cutoffMs: this.now() + (this.deps.leaseTtlMs ?? LEASE_TTL_MS_DEFAULT) * LEASE_ADMIT_FRACTION,
        admitting: true,
        closing: false,
      };
      this.leases.add(lease);
      this.current = lease;
      this.take(lease, admission);
      if (result.amountMicro < desired) {
        // The wallet is nearly empty: lease no more than each request needs from now on, and
        // have the other leases of this wallet give their slack back.
        this.lowBalanceUntilMs = this.now() + LOW_BALANCE_MS;
        this.deps.recall(key.accountId, this.keyId);
      }
    }
    return result;
  }

  /** The 402, with what the wallet has: the edge may lower the request's output limit to fit it. */
  private insufficient(reserve: bigint, available: bigint): { failure: Failure; availableMicro: bigint } {
    const availableMicro = available < 0n ? 0n : available;
    const failure = fail(
      "insufficient_quota",
      `Insufficient balance: this request needs up to ${microToToman(reserve)} toman and ` +
        `${microToToman(availableMicro)} toman is available. Top up the wallet, or lower max_tokens.`,
    );
    return { failure, availableMicro };
  }

  /**
   * Stops admitting from a lease, gives its slack back, and closes it once drained. The close
   * waits for the lease's last charges to be posted (the next usage flush): `waitForClose: false`
   * lets it finish in the background, so that a request opening the next lease does not wait
   * for a flush.
   */
  async retire(lease: Lease, waitForClose = true): Promise<void> {
    if (this.current === lease) this.current = null;
    lease.admitting = false;
    const slack = this.room(lease);
    if (slack > 0n) {
      lease.amount -= slack; // before the await: concurrent admissions see no room
      if (!(await this.shrink(lease, slack))) lease.amount += slack;
    }
    if (lease.outstanding === 0n) {
      const closing = this.close(lease);
      if (waitForClose) await closing;
    }
    this.signal();
  }

  /**
   * Gives `slack` of a lease's hold back to the wallet. False when the hold was not shrunk, the
   * database unreachable included: the hold in the ledger still has it, so the lease keeps it in
   * memory too and a later release (the idle sweep) gives it back by closing the lease.
   */
  private async shrink(lease: Lease, slack: bigint): Promise<boolean> {
    try {
      return await shrinkHold(this.deps.db, lease.holdId, slack);
    } catch (error) {
      taskFailed("lease_shrink", this.deps.log, error, { keyId: this.keyId, holdId: lease.holdId });
      return false;
    }
  }

  private async close(lease: Lease): Promise<void> {
    if (lease.closing) return;
    lease.closing = true;
    try {
      // Every charge of this lease must be posted before the hold is final.
      await this.deps.writer.posted();
      await closeHold(this.deps.db, lease.holdId);
      this.leases.delete(lease);
    } catch (error) {
      lease.closing = false;
      taskFailed("lease_close", this.deps.log, error, { keyId: this.keyId, holdId: lease.holdId });
    }
    this.signal();
  }

  /** Closes the leases that admit nothing and have nothing outstanding (a close that failed is tried again here). */
  async closeDrained(): Promise<void> {
    for (const lease of [...this.leases]) if (!lease.admitting && lease.outstanding === 0n) await this.close(lease);
  }

  /**
   * The holds of this actor's open leases, which their node keeps renewing so that none ends
   * while its usage is on its way (holds.ts); a drained lease whose close failed is closed again
   * by the idle sweep (closeDrained).
   */
  openHolds(): string[] {
    return [...this.leases].map((lease) => lease.holdId);
  }

  /** Gives back every lease's slack (idleness, shutdown). */
  async release(): Promise<void> {
    for (const lease of [...this.leases]) {
      if (lease.admitting) await this.retire(lease);
      else if (lease.outstanding === 0n) await this.close(lease);
    }
  }

  /** Its wallet ran short elsewhere: give the slack back and lease per request for a while. */
  async recall(): Promise<void> {
    this.lowBalanceUntilMs = this.now() + LOW_BALANCE_MS;
    await this.release();
  }

  async extend(t: ExtendTicket, key: KeyRecord): Promise<ExtendReply> {
    const gate = this.deps.rates;
    const capped = gate ? await gate.extend(key, t.addTokens, t.addMicro) : await this.checkMonthlyCap(key, t.addMicro);
    if (capped) return { ok: false, failure: capped };
    const reply = await this.grow(t);
    if (!reply.ok) gate?.release(key.id, { requests: 0, tokens: 0, micro: t.addMicro });
    return reply;
  }

  private async grow(t: ExtendTicket): Promise<ExtendReply> {
    const admission = this.admissions.get(t.requestId);
    const lease = admission?.lease;
    if (!admission || !lease || lease.holdId !== t.holdId) {
      return refuse(fail("invalid_request", `Request ${t.requestId} is not in flight on hold ${t.holdId}.`));
    }
    if (this.room(lease) < t.addMicro) {
      try {
        if (!(await growHold(this.deps.db, lease.holdId, t.addMicro))) {
          return refuse(
            fail("insufficient_quota", `Insufficient balance to continue: the stream needs ${microToToman(t.addMicro)} toman more.`),
          );
        }
      } catch (error) {
        this.deps.log("error", "extend_failed", { keyId: this.keyId, error: (error as Error).message });
        return refuse(fail("service_unavailable", "The billing database is unavailable.", { retryAfterS: 1 }));
      }
      lease.amount += t.addMicro;
      // Settled while the hold grew: the growth is the lease's slack now, given back with it.
      if (this.admissions.get(t.requestId) !== admission) {
        this.signal();
        return refuse(fail("invalid_request", `Request ${t.requestId} ended during its extension.`));
      }
    }
    lease.outstanding += t.addMicro;
    admission.reserve += t.addMicro;
    admission.tokens += t.addTokens;
    if (!this.deps.rates) this.windows.tokens.add(t.addTokens);
    this.lastUseMs = this.now();
    return { ok: true, reserveMicro: admission.reserve };
  }

  /** `fence`: the key's partition and the owner epoch this node's share came from (cluster only). */
  async settle(s: Settlement, accountId: string, fence?: Fence): Promise<SettleReply> {
    const metered = costOf(s.usage, s.prices);
    const earlier = this.settledIds.get(s.requestId);
    if (earlier) {
      // A retried settlement (the bus may deliver one twice) gets the first one's reply and posts
      // nothing; a second settlement of other usage is a bug.
      const same = invariant(earlier.meteredMicro === metered, "settled_once", {
        requestId: s.requestId,
        first: earlier.meteredMicro,
        again: metered,
      });
      return same ? earlier.reply : refuse(fail("invalid_request", `Request ${s.requestId} was already settled.`));
    }
    const admission = this.admissions.get(s.requestId);
    if (admission && metered > admission.reserve && s.billedMicroMax === undefined)
      await this.coverOverrun(admission, metered - admission.reserve);
    const reserve = admission?.reserve ?? s.reserveMicro;
    let billed = metered < reserve ? metered : reserve;
    if (s.billedMicroMax !== undefined && s.billedMicroMax < billed) billed = s.billedMicroMax;
    if (!invariant(billed <= reserve, "held_covers_charged", { requestId: s.requestId, billed, reserve })) billed = reserve;
    this.deps.writer.append({
      requestId: s.requestId,
      accountId,
      keyId: s.keyId,
      holdId: s.holdId,
      model: s.model,
      operation: s.operation,
      backend: s.backend,
      priceVersionId: s.priceVersionId,
      usage: s.usage,
      prices: s.prices,
      hostedCallUnit: s.hostedCallUnit,
      meteredMicro: metered,
      billedMicro: billed,
      status: s.status,
      durationMs: s.durationMs,
      partition: fence?.partition ?? null,
      fenceToken: fence?.fenceToken ?? null,
      // Not admitted here (the actor was started again since): when the request began, no later than its admission.
      admittedAt: new Date(admission?.admittedAtMs ?? Date.now() - s.durationMs).toISOString(),
      anomalies: s.anomalies ?? null,
    });
    this.recordSpend(billed, admission, Number(tokensOf(s.usage)));
    if (admission) {
      this.admissions.delete(s.requestId);
      const lease = admission.lease;
      if (lease) {
        lease.outstanding -= admission.reserve;
        if (!invariant(lease.outstanding >= 0n, "lease_outstanding_non_negative", { holdId: lease.holdId, outstanding: lease.outstanding }))
          lease.outstanding = 0n;
        lease.consumed += billed;
        if (!lease.admitting && lease.outstanding === 0n) void this.close(lease);
      }
    }
    this.lastUseMs = this.now();
    this.signal();
    const reply: SettleReply = { ok: true, billedMicro: billed, meteredMicro: metered };
    this.rememberSettled(s.requestId, { reply, meteredMicro: metered });
    return reply;
  }

  private rememberSettled(requestId: string, settled: { reply: SettleReply; meteredMicro: bigint }): void {
    this.settledIds.set(requestId, settled);
  }

  /**
   * Grows an admission's reserve toward usage the upstream reported beyond it: from the lease's
   * room, then from the wallet, never past the key's monthly cap. What cannot be covered stays
   * uncharged (written off). Rare, so it may touch the database on the settle path.
   */
  private async coverOverrun(admission: Admission, needMicro: bigint): Promise<void> {
    const lease = admission.lease;
    if (!lease) return;
    let need = needMicro;
    try {
      const key = await this.deps.keys.get(this.keyId);
      if (key) need = await this.capRoom(key, need);
      if (need <= 0n) return;
      const fromLease = this.room(lease) < need ? this.room(lease) : need;
      let grown = 0n;
      if (fromLease < need) {
        grown = await growHoldUpTo(this.deps.db, lease.holdId, need - fromLease);
        lease.amount += grown;
      }
      lease.outstanding += fromLease + grown;
      admission.reserve += fromLease + grown;
    } catch (error) {
      this.deps.log("error", "overrun_cover_failed", { keyId: this.keyId, error: (error as Error).message });
    }
  }

  /** How much of `need` the key's monthly cap still allows (all of it without a cap). */
  private async capRoom(key: KeyRecord, need: bigint): Promise<bigint> {
    if (key.monthlySpendCapMicro === null) return need;
    const gate = this.deps.rates;
    if (gate) return (await gate.extend(key, 0, need)) ? 0n : need;
    const month = await this.monthSpent();
    let outstanding = 0n;
    for (const a of this.admissions.values()) outstanding += a.reserve;
    const room = key.monthlySpendCapMicro - month.spent - outstanding;
    if (room <= 0n) return 0n;
    return room < need ? room : need;
  }

  private recordSpend(billed: bigint, admission: Admission | undefined, tokens: number): void {
    const now = this.now();
    const decay = 0.5 ** ((now - this.spendAtMs) / SPEND_HALF_LIFE_MS);
    this.spendRate = this.spendRate * decay + (Number(billed) * Math.LN2 * 1000) / SPEND_HALF_LIFE_MS;
    this.spendAtMs = now;
    if (this.month) this.month.spent += billed;
    if (!admission) return;
    // Tokens per minute count what was used, not what was reserved.
    if (this.deps.rates)
      this.deps.rates.settled(this.keyId, { reserveMicro: admission.reserve, billedMicro: billed, tokens: tokens - admission.tokens });
    else this.windows.tokens.add(tokens - admission.tokens);
  }
}

function refuse(failure: Failure): { ok: false; failure: Failure } {
  return { ok: false, failure };
}

function unavailable(): { ok: false; failure: Failure } {
  return refuse(fail("service_unavailable", "Billing is unavailable right now; try again shortly.", { retryAfterS: 1 }));
}

/** The current UTC month, `2026-11`: the monthly cap's period. */
export function utcMonth(): string {
  return new Date().toISOString().slice(0, 7);
}

/** What a key was billed this UTC month, as the database knows it (every node's usage once written). */
export async function monthSpentMicro(db: Db, keyId: string): Promise<bigint> {
  const [row] = await db.rows<{ spent: unknown }>(sql`
    SELECT coalesce(sum(billed_micro), 0) AS spent FROM usage_records
    WHERE key_id = ${keyId} AND created_at >= date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'`);
  return BigInt(String(row?.spent ?? 0));
}

/** The 402 of a monthly spend cap that this reserve would exceed. */
export function capExceeded(capMicro: bigint, spentMicro: bigint): Failure {
  return fail(
    "insufficient_quota",
    `This key's monthly spend cap of ${microToToman(capMicro)} toman would be exceeded (spent ${microToToman(spentMicro)} toman this month).`,
  );
}
