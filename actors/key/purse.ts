/**
 * A node's purse for one account: the leases (holds) this node keeps on the account's wallet,
 * from which every key of the account served here takes its reserves in memory. A key's first
 * request, or its first after an idle spell, costs what any request costs while its account is
 * in use on this node: no database, no wait for another key's lease.
 *
 * Invariant: for every lease, consumed + outstanding ≤ amount, so the charges posted to its hold
 * never exceed it (the database's CHECK backs this). A lease stops admitting at its cut-off (half
 * its life, on the monotonic clock).
 *
 * In full, with the reasoning: docs/internals.md#an-accounts-purse.
 */
import { taskFailed } from "../../src/background.ts";
import type { Db } from "../../src/db/client.ts";
import { fail, type Failure } from "../../src/errors.ts";
import { newId } from "../../src/ids.ts";
import { invariant } from "../../src/invariant.ts";
import { closeHold, growHold, growHoldUpTo, openHold, shrinkHold } from "../../src/ledger/holds.ts";
import type { UsageWriter } from "../../src/ledger/usage.ts";
import type { Logger } from "../../src/log.ts";
import { microToToman } from "../../src/catalog/prices.ts";

/** A lease's hold lives this long by default (LEASE_TTL_MS); past it the sweeper closes it. */
export const LEASE_TTL_MS_DEFAULT = 10 * 60_000;
/** Admission from a lease stops at half its life, so that requests admitted late can finish. */
export const LEASE_ADMIT_FRACTION = 0.5;
/** A lease is sized to cover this many seconds of the account's recent spend on this node… */
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
/**
 * The next lease is opened ahead once the current one's room falls below this share of it, so
 * that no request waits for a hold to be written (one is 15–45 ms on the embedded database's
 * worker on a busy core, bench/RESULTS.md): the request that finds the current lease spent takes
 * the next at once. Only while the wallet filled the current lease whole (not in per-request mode),
 * and only a lease the wallet fills whole: otherwise none is opened ahead.
 */
export const LEASE_AHEAD_ROOM_FRACTION = 4n; // room < amount / 4
/** A wallet that could not fill a lease stays in per-request mode this long. */
export const LOW_BALANCE_MS = 5_000;
/** Longest an admission waits for money held elsewhere to come back. */
export const ADMIT_WAIT_MS_MAX = 3_000;
/** Between two attempts to open a hold while waiting for money. */
export const ADMIT_RETRY_MS = 25;
/** How long a failed open's view of the wallet stands in for another query. */
export const SHORT_MEMO_MS = 50;
const SPEND_HALF_LIFE_MS = 10_000;

export interface PurseDeps {
  db: Db;
  writer: UsageWriter;
  /** Asks the other nodes to give back the slack of their leases of this account. */
  recall: (accountId: string, fromKeyId: string) => void;
  log: Logger;
  /** How long a lease's hold lives (a crashed node's money is back after this). */
  leaseTtlMs?: number;
  nowMs?: () => number;
}

export interface Lease {
  holdId: string;
  amount: bigint;
  consumed: bigint;
  outstanding: bigint;
  cutoffMs: number;
  admitting: boolean;
  closing: boolean;
  /** The wallet gave the lease all it asked for: the next may be opened ahead. */
  whole?: boolean;
}

/** What a purse keeps of one admitted request: the lease it draws from and how much. */
export interface Drawn {
  lease: Lease | null;
  reserve: bigint;
}

export class AccountPurse {
  private readonly leases = new Set<Lease>();
  private current: Lease | null = null;
  private opening: Promise<unknown> | null = null;
  /** The lease opened ahead of the current one's end (LEASE_AHEAD_ROOM_FRACTION), and its opening. */
  private next: Lease | null = null;
  private openingNext: Promise<void> | null = null;
  private lowBalanceUntilMs = 0;
  /** The wallet as the last failed open saw it; forgotten on any local change or after SHORT_MEMO_MS. */
  private short: { atMs: number; available: bigint; heldMicro: bigint } | null = null;
  private spendRate = 0; // micro-toman per second, decaying
  private spendAtMs = 0;
  /** Admissions waiting for money to come back (changedOrAfter): told at the next change, each gone once told or timed out. */
  private readonly waiting = new Set<() => void>();
  /** When a key of the account last drew from or settled into this purse (monotonic clock). */
  lastUseMs: number;

  constructor(
    readonly accountId: string,
    private readonly deps: PurseDeps,
  ) {
    this.lastUseMs = this.now();
  }

  private now(): number {
    return this.deps.nowMs?.() ?? performance.now();
  }

  /** Money this purse holds but has not committed to a request (tests and metrics). */
  get slackMicro(): bigint {
    let slack = 0n;
    for (const lease of this.leases) slack += this.room(lease);
    return slack;
  }

  /** Reserves of requests in flight drawn from this purse. */
  get outstandingMicro(): bigint {
    let outstanding = 0n;
    for (const lease of this.leases) outstanding += lease.outstanding;
    return outstanding;
  }

  /** Open leases and the money they hold (metrics). */
  get leaseTotals(): { open: number; heldMicro: bigint } {
    let held = 0n;
    for (const lease of this.leases) held += lease.amount;
    return { open: this.leases.size, heldMicro: held };
  }

  /** True when the purse holds nothing and waits on nothing: the host may forget it. */
  get empty(): boolean {
    return this.leases.size === 0 && this.opening === null && this.openingNext === null;
  }

  private signal(): void {
    this.short = null;
    for (const wake of [...this.waiting]) wake(); // each removes itself
  }

  /**
   * Resolves at the purse's next change, or after `ms`, whichever comes first, leaving nothing
   * behind: a wait on one promise shared by every retry would keep each retry's reaction (and the
   * admission it belongs to) until the purse next changed.
   */
  private changedOrAfter(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.waiting.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.waiting.add(wake);
    });
  }

  private room(lease: Lease): bigint {
    return lease.amount - lease.consumed - lease.outstanding;
  }

  private take(lease: Lease, drawn: Drawn): { holdId: string } {
    lease.outstanding += drawn.reserve;
    drawn.lease = lease;
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

  /**
   * Draws `drawn.reserve` for a request of `keyId`: from the current lease, or a new one. `exact`:
   * the reserve is an exact count, so a wallet that cannot cover it is waited for (money held
   * elsewhere may come back) before the 402.
   */
  async reserve(drawn: Drawn, keyId: string, exact: boolean): Promise<{ holdId: string } | { failure: Failure; availableMicro: bigint }> {
    this.lastUseMs = this.now();
    const startedMs = this.now();
    for (;;) {
      const lease = this.current;
      if (lease && this.admits(lease, drawn.reserve)) {
        const taken = this.take(lease, drawn);
        this.openAhead(lease, drawn.reserve, keyId);
        return taken;
      }
      if (this.openingNext) {
        await this.openingNext;
        continue;
      }
      if (this.next) {
        this.moveToNext(drawn.reserve);
        continue;
      }
      if (this.opening) {
        await this.opening.catch(() => {}); // its own caller reports its failure
        continue;
      }
      // A recent failed open already tells whether trying the wallet again can help.
      let short = this.short !== null && this.now() - this.short.atMs < SHORT_MEMO_MS ? this.short : null;
      if (!short || drawn.reserve <= short.available) {
        const opened = this.openLease(drawn, keyId);
        this.opening = opened;
        let result: Awaited<typeof opened>;
        try {
          result = await opened;
        } finally {
          this.opening = null;
        }
        if (result.opened) return { holdId: drawn.lease!.holdId };
        short = { atMs: this.now(), available: result.balanceMicro - result.heldMicro, heldMicro: result.heldMicro };
        this.short = short;
      }
      // Not even the cheap bound fits: let the edge count exactly before anyone waits.
      if (!exact) return insufficient(drawn.reserve, short.available);
      // Nothing is held anywhere that could come back, or we waited long enough.
      if (short.heldMicro === 0n || this.now() - startedMs >= ADMIT_WAIT_MS_MAX) {
        return insufficient(drawn.reserve, short.available);
      }
      // Money is held somewhere (in flight here, or in another node's lease, or in a lease of
      // this purse whose close failed): recall it and wait for it to come back.
      this.deps.recall(this.accountId, keyId);
      void this.closeDrained();
      await this.changedOrAfter(ADMIT_RETRY_MS);
    }
  }

  private admits(lease: Lease, reserve: bigint): boolean {
    return lease.admitting && this.now() < lease.cutoffMs && this.room(lease) >= reserve;
  }

  /** The current lease is spent: the next, opened ahead, takes its place (or is given back too, when it cannot serve this reserve either). */
  private moveToNext(reserve: bigint): void {
    const next = this.next!;
    this.next = null;
    const spent = this.current;
    if (this.admits(next, reserve)) this.current = next;
    else this.retireLater(next);
    if (spent) this.retireLater(spent);
  }

  /** Retires a lease without waiting: its slack is off the lease at once, given back to the wallet in the background. */
  private retireLater(lease: Lease): void {
    const retiring = this.retire(lease, false).catch((error: unknown) =>
      taskFailed("lease_retire", this.deps.log, error, { accountId: this.accountId, holdId: lease.holdId }),
    );
    void retiring;
  }

  /** Opens the next lease in the background once `lease`'s room is low (LEASE_AHEAD_ROOM_FRACTION). */
  private openAhead(lease: Lease, reserve: bigint, keyId: string): void {
    if (!lease.whole || this.next || this.openingNext || this.opening || this.now() < this.lowBalanceUntilMs) return;
    if (this.room(lease) * LEASE_AHEAD_ROOM_FRACTION >= lease.amount) return;
    this.openingNext = this.openHeld(reserve, keyId, () => {}, true)
      .then((result) => {
        if (!result.opened) return;
        if (this.current === lease && lease.admitting) this.next = result.lease;
        else this.retireLater(result.lease); // the purse moved on (released, recalled) meanwhile
      })
      .catch((error: unknown) => taskFailed("lease_open_ahead", this.deps.log, error, { accountId: this.accountId }))
      .finally(() => {
        this.openingNext = null;
        this.signal();
      });
  }

  /** Opens a new current lease and takes the request's reserve from it before anything else can. */
  private async openLease(drawn: Drawn, keyId: string) {
    if (this.current) await this.retire(this.current, false);
    return this.openHeld(drawn.reserve, keyId, (lease) => {
      this.current = lease;
      this.take(lease, drawn);
    });
  }

  /**
   * Writes a lease's hold of LEAST(desired, available) ≥ `reserve` (holds.ts) and adds the lease
   * to the purse; `adopt` runs at once when it opened, before anything else can draw from it.
   * When the wallet could not fill it, the purse leases per request for a while and the other
   * nodes' leases of the wallet are recalled. `wholeOnly` (a lease opened ahead): all of the
   * desired size or nothing, so that a speculative open never sends the purse, or the other
   * nodes, into per-request mode.
   */
  private async openHeld(reserve: bigint, keyId: string, adopt: (lease: Lease) => void = () => {}, wholeOnly = false) {
    const desired = this.leaseSize(reserve);
    const holdId = newId("hold");
    const ttlMs = this.deps.leaseTtlMs ?? LEASE_TTL_MS_DEFAULT;
    // The hold names the key whose request opened it; every key of the account on this node draws from it.
    const result = await openHold(this.deps.db, {
      holdId,
      accountId: this.accountId,
      keyId,
      label: "lease",
      minMicro: wholeOnly ? desired : reserve,
      desiredMicro: desired,
      ttlMs,
    });
    if (!result.opened) return result;
    const lease: Lease = {
      holdId,
      amount: result.amountMicro,
      consumed: 0n,
      outstanding: 0n,
      cutoffMs: this.now() + ttlMs * LEASE_ADMIT_FRACTION,
      admitting: true,
      closing: false,
      whole: result.amountMicro >= desired,
    };
    this.leases.add(lease);
    adopt(lease);
    if (!lease.whole) {
      // The wallet is nearly empty: lease no more than each request needs from now on, and
      // have the other nodes' leases of this wallet give their slack back.
      this.lowBalanceUntilMs = this.now() + LOW_BALANCE_MS;
      this.deps.recall(this.accountId, keyId);
    }
    return { ...result, lease };
  }

  /**
   * Grows a request's reserve by `addMicro` (a stream metered live): from its lease's room, or by
   * growing the lease's hold from the wallet. False when the wallet cannot cover it; throws when
   * the database cannot be reached. `stillDrawn` is asked after the database's answer: a request
   * settled meanwhile leaves the growth as the lease's slack.
   */
  async grow(drawn: Drawn, addMicro: bigint, stillDrawn: () => boolean): Promise<"grown" | "insufficient" | "ended"> {
    const lease = drawn.lease;
    if (!lease) return "ended";
    if (this.room(lease) < addMicro) {
      if (!(await growHold(this.deps.db, lease.holdId, addMicro))) return "insufficient";
      lease.amount += addMicro;
      if (!stillDrawn()) {
        this.signal();
        return "ended";
      }
    }
    lease.outstanding += addMicro;
    drawn.reserve += addMicro;
    this.lastUseMs = this.now();
    return "grown";
  }

  /**
   * Grows a request's reserve toward usage reported beyond it, by at most `needMicro`: from the
   * lease's room, then from what the wallet has. What cannot be covered stays uncharged.
   */
  async coverOverrun(drawn: Drawn, needMicro: bigint): Promise<void> {
    const lease = drawn.lease;
    if (!lease || needMicro <= 0n) return;
    const room = this.room(lease);
    const fromLease = room < needMicro ? room : needMicro;
    let grown = 0n;
    if (fromLease < needMicro) {
      grown = await growHoldUpTo(this.deps.db, lease.holdId, needMicro - fromLease);
      lease.amount += grown;
    }
    lease.outstanding += fromLease + grown;
    drawn.reserve += fromLease + grown;
  }

  /** A request drawn from this purse settled, charged `billed` (≤ its reserve). */
  settled(drawn: Drawn, billed: bigint): void {
    const now = this.now();
    const decay = 0.5 ** ((now - this.spendAtMs) / SPEND_HALF_LIFE_MS);
    this.spendRate = this.spendRate * decay + (Number(billed) * Math.LN2 * 1000) / SPEND_HALF_LIFE_MS;
    this.spendAtMs = now;
    this.lastUseMs = now;
    const lease = drawn.lease;
    if (lease) {
      lease.outstanding -= drawn.reserve;
      if (!invariant(lease.outstanding >= 0n, "lease_outstanding_non_negative", { holdId: lease.holdId, outstanding: lease.outstanding }))
        lease.outstanding = 0n;
      lease.consumed += billed;
      invariant(lease.consumed + lease.outstanding <= lease.amount, "lease_covers_charged", {
        holdId: lease.holdId,
        consumed: lease.consumed,
        outstanding: lease.outstanding,
        amount: lease.amount,
      });
      if (!lease.admitting && lease.outstanding === 0n) void this.close(lease);
    }
    this.signal();
  }

  /**
   * Stops admitting from a lease, gives its slack back, and closes it once drained. The close
   * waits for the lease's last charges to be posted (the next usage flush): `waitForClose: false`
   * lets it finish in the background, so that a request opening the next lease does not wait
   * for a flush.
   */
  private async retire(lease: Lease, waitForClose = true): Promise<void> {
    if (this.current === lease) this.current = null;
    if (this.next === lease) this.next = null;
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
      taskFailed("lease_shrink", this.deps.log, error, { accountId: this.accountId, holdId: lease.holdId });
      return false;
    }
  }

  private async close(lease: Lease): Promise<void> {
    if (lease.closing) return;
    lease.closing = true;
    try {
      // Every charge of this lease must be posted before the hold is final. When they all are (the
      // hold shows what the lease consumed) it closes at once; else after the node's usage is
      // posted, whatever it is (a charge refused or dead-lettered never reaches the hold).
      if (!(await closeHold(this.deps.db, lease.holdId, lease.consumed))) {
        await this.deps.writer.posted();
        await closeHold(this.deps.db, lease.holdId);
      }
      this.leases.delete(lease);
    } catch (error) {
      lease.closing = false;
      taskFailed("lease_close", this.deps.log, error, { accountId: this.accountId, holdId: lease.holdId });
    }
    this.signal();
  }

  /** Closes the leases that admit nothing and have nothing outstanding (a close that failed is tried again here). */
  async closeDrained(): Promise<void> {
    for (const lease of [...this.leases]) if (!lease.admitting && lease.outstanding === 0n) await this.close(lease);
  }

  /**
   * The holds of this purse's open leases, which their node keeps renewing so that none ends
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

  /** The wallet ran short elsewhere: give the slack back and lease per request for a while. */
  async recall(): Promise<void> {
    this.lowBalanceUntilMs = this.now() + LOW_BALANCE_MS;
    await this.release();
  }

  /** Growth a stream asked for that the wallet could not give: the 402 it ends with. */
  static growRefused(addMicro: bigint): Failure {
    return fail("insufficient_quota", `Insufficient balance to continue: the stream needs ${microToToman(addMicro)} toman more.`);
  }
}

/** The 402, with what the wallet has: the edge may lower the request's output limit to fit it. */
function insufficient(reserve: bigint, available: bigint): { failure: Failure; availableMicro: bigint } {
  const availableMicro = available < 0n ? 0n : available;
  const failure = fail(
    "insufficient_quota",
    `Insufficient balance: this request needs up to ${microToToman(reserve)} toman and ` +
      `${microToToman(availableMicro)} toman is available. Top up the wallet, or lower max_tokens.`,
  );
  return { failure, availableMicro };
}
