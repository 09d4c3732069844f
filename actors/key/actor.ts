/**
 * The key actor: one per API key, owning its concurrency slots, its per-minute windows, its
 * monthly cap and the requests it admitted. Money comes from its account's purse on this node
 * (purse.ts): leases that every key of the account draws from without touching the wallet row.
 *
 * Invariants: slots in use ≤ concurrencyMax; a request is settled once; what it is charged is
 * never more than its reserve, which its lease holds. A batch line (ticket.batch) takes no slot
 * and no rpm or tpm: the batch worker bounds lines itself; its reserve counts toward the
 * wallet and the monthly cap as any request's.
 *
 * In full, with the reasoning: docs/internals.md#the-key-actor.
 */
import { sql } from "drizzle-orm";
import type { AdmitReply, AdmitTicket, ExtendReply, ExtendTicket, RateInfo, SettleReply, Settlement } from "../protocol.ts";
import type { Db } from "../../src/db/client.ts";
import { fail, type Failure } from "../../src/errors.ts";
import { FifoMap } from "../../src/fifoMap.ts";
import { invariant } from "../../src/invariant.ts";
import type { UsageWriter } from "../../src/ledger/usage.ts";
import { microToToman } from "../../src/catalog/prices.ts";
import type { KeyRecord, KeyStore } from "../../src/keys/store.ts";
import { costOf, tokensOf } from "../../src/units.ts";
import type { Logger } from "../../src/log.ts";
import { concurrencyRefused, type RateGate } from "./gate.ts";
import { AccountPurse, type Drawn } from "./purse.ts";
import { RateWindows } from "./window.ts";

export interface KeyActorDeps {
  db: Db;
  keys: KeyStore;
  writer: UsageWriter;
  /** The purse of the account on this node, which every key of the account draws its reserves from. */
  purseOf: (accountId: string) => AccountPurse;
  log: Logger;
  /** Cluster-wide rpm, tpm and monthly cap (permits.ts); absent, the actor's own windows and month. */
  rates?: RateGate;
}

export interface Fence {
  partition: number;
  fenceToken: bigint | null;
}

/** An admitted request: what it drew from its account's purse, and its tokens for the rate windows. */
interface HeldRequest extends Drawn {
  tokens: number;
  /** Wall-clock time of the admission: the usage record's `admittedAt`, which the fencing rule judges. */
  admittedAtMs: number;
  /** A batch line's: no slot, no rpm or tpm. */
  batch: boolean;
}

/** What an admission took of the rate gate, to give back when it does not go ahead. */
function gateAmounts(ticket: AdmitTicket): { requests: number; tokens: number; micro: bigint } {
  return ticket.batch
    ? { requests: 0, tokens: 0, micro: ticket.reserveMicro }
    : { requests: 1, tokens: ticket.reserveTokens, micro: ticket.reserveMicro };
}

/** Request ids this actor settled last, remembered to refuse a second settlement of one. */
export const SETTLED_IDS_MAX = 10_000;

export class KeyActor {
  private readonly admissions = new Map<string, HeldRequest>();
  /** The last SETTLED_IDS_MAX requests settled here, oldest first, with their reply. */
  private readonly settledIds = new FifoMap<string, { reply: SettleReply; meteredMicro: bigint }>(SETTLED_IDS_MAX);
  private readonly windows = new RateWindows();
  private month: { key: string; spent: bigint } | null = null;
  /** Batch lines among the admissions: they take no slot. */
  private batchLines = 0;

  constructor(
    readonly keyId: string,
    private readonly deps: KeyActorDeps,
  ) {}

  get inFlight(): number {
    return this.admissions.size;
  }

  /** The key's slots in use: its admissions but batch lines. */
  get slotsInUse(): number {
    return this.admissions.size - this.batchLines;
  }

  /** Whether this actor admitted the request, not settled yet, in one of the key's slots (a batch line takes none). */
  holdsSlot(requestId: string): boolean {
    const admission = this.admissions.get(requestId);
    return admission !== undefined && !admission.batch;
  }

  private hold(requestId: string, admission: HeldRequest): void {
    this.admissions.set(requestId, admission);
    if (admission.batch) this.batchLines++;
  }

  private forget(requestId: string): void {
    if (this.admissions.get(requestId)?.batch) this.batchLines--;
    this.admissions.delete(requestId);
  }

  async admit(ticket: AdmitTicket, key: KeyRecord): Promise<AdmitReply> {
    if (this.admissions.has(ticket.requestId)) {
      return refuse(fail("invalid_request", `Request ${ticket.requestId} was already admitted.`));
    }
    if (!ticket.batch && this.slotsInUse >= key.concurrencyMax) {
      return refuse(concurrencyRefused(key));
    }
    // The slot is taken before the first await, so the limit holds under concurrency: requests
    // that arrive together (a key's first, waiting for its record) resume together.
    const batch = ticket.batch === true;
    const tokens = batch ? 0 : ticket.reserveTokens;
    const admission: HeldRequest = { lease: null, reserve: ticket.reserveMicro, tokens, admittedAtMs: Date.now(), batch };
    this.hold(ticket.requestId, admission);
    let limits: Awaited<ReturnType<KeyActor["checkLimits"]>>;
    try {
      limits = await this.checkLimits(ticket, key);
    } catch (error) {
      // The month's spend could not be read: nothing was granted, so only the slot goes back.
      this.forget(ticket.requestId);
      this.deps.log("error", "admit_failed", { keyId: key.id, error: (error as Error).message });
      return unavailable();
    }
    if (!limits.ok) {
      this.forget(ticket.requestId);
      return limits;
    }
    const gate = this.deps.rates;
    let rate = limits.rate;
    try {
      const got = await this.deps.purseOf(key.accountId).reserve(admission, key.id, ticket.exact);
      if ("failure" in got) {
        this.forget(ticket.requestId);
        gate?.release(key.id, gateAmounts(ticket));
        const { failure, availableMicro } = got;
        return { ok: false, failure, exactNeeded: !ticket.exact && failure.code === "insufficient_quota", availableMicro };
      }
      if (!gate && !batch) {
        this.windows.add(1, ticket.reserveTokens);
        rate = this.windows.info(key);
      }
      return { ok: true, holdId: got.holdId, rate };
    } catch (error) {
      this.forget(ticket.requestId);
      gate?.release(key.id, gateAmounts(ticket));
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
      const verdict = await gate.admit(key, ticket.reserveTokens, ticket.reserveMicro, ticket.batch);
      if (!verdict.ok)
        return verdict.rate ? { ok: false, failure: verdict.failure, rate: verdict.rate } : { ok: false, failure: verdict.failure };
      return { ok: true, rate: verdict.rate };
    }
    const limited = ticket.batch ? null : this.windows.check(key, 1, ticket.reserveTokens);
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

  async extend(t: ExtendTicket, key: KeyRecord): Promise<ExtendReply> {
    const gate = this.deps.rates;
    // A batch line's tokens count toward no tpm.
    const tokens = this.admissions.get(t.requestId)?.batch ? 0 : t.addTokens;
    const capped = gate ? await gate.extend(key, tokens, t.addMicro) : await this.checkMonthlyCap(key, t.addMicro);
    if (capped) return { ok: false, failure: capped };
    const reply = await this.grow(t, key);
    if (!reply.ok) gate?.release(key.id, { requests: 0, tokens: 0, micro: t.addMicro });
    return reply;
  }

  private async grow(t: ExtendTicket, key: KeyRecord): Promise<ExtendReply> {
    const admission = this.admissions.get(t.requestId);
    if (!admission?.lease || admission.lease.holdId !== t.holdId) {
      return refuse(fail("invalid_request", `Request ${t.requestId} is not in flight on hold ${t.holdId}.`));
    }
    let grown: Awaited<ReturnType<AccountPurse["grow"]>>;
    try {
      grown = await this.deps.purseOf(key.accountId).grow(admission, t.addMicro, () => this.admissions.get(t.requestId) === admission);
    } catch (error) {
      this.deps.log("error", "extend_failed", { keyId: this.keyId, error: (error as Error).message });
      return refuse(fail("service_unavailable", "The billing database is unavailable.", { retryAfterS: 1 }));
    }
    if (grown === "insufficient") return refuse(AccountPurse.growRefused(t.addMicro));
    // Settled while the hold grew: the growth is the lease's slack now, given back with it.
    if (grown === "ended") return refuse(fail("invalid_request", `Request ${t.requestId} ended during its extension.`));
    if (admission.batch) return { ok: true, reserveMicro: admission.reserve };
    admission.tokens += t.addTokens;
    if (!this.deps.rates) this.windows.tokens.add(t.addTokens);
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
      await this.coverOverrun(admission, accountId, metered - admission.reserve);
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
      ...(s.early ?? {}),
    });
    this.recordSpend(billed, admission, Number(tokensOf(s.usage)));
    if (admission) {
      this.forget(s.requestId);
      this.deps.purseOf(accountId).settled(admission, billed);
    }
    const reply: SettleReply = { ok: true, billedMicro: billed, meteredMicro: metered };
    this.rememberSettled(s.requestId, { reply, meteredMicro: metered });
    return reply;
  }

  private rememberSettled(requestId: string, settled: { reply: SettleReply; meteredMicro: bigint }): void {
    this.settledIds.set(requestId, settled);
  }

  /**
   * Grows an admission's reserve toward usage the upstream reported beyond it: from the lease's
   * room, then from the wallet (the purse), never past the key's monthly cap. What cannot be
   * covered stays uncharged (written off). Rare, so it may touch the database on the settle path.
   */
  private async coverOverrun(admission: HeldRequest, accountId: string, needMicro: bigint): Promise<void> {
    if (!admission.lease) return;
    try {
      const key = await this.deps.keys.get(this.keyId);
      const need = key ? await this.capRoom(key, needMicro) : needMicro;
      await this.deps.purseOf(accountId).coverOverrun(admission, need);
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

  private recordSpend(billed: bigint, admission: HeldRequest | undefined, tokens: number): void {
    if (this.month) this.month.spent += billed;
    if (!admission) return;
    // Tokens per minute count what was used, not what was reserved; a batch line's count toward none.
    const overTokens = admission.batch ? 0 : tokens - admission.tokens;
    if (this.deps.rates) this.deps.rates.settled(this.keyId, { reserveMicro: admission.reserve, billedMicro: billed, tokens: overTokens });
    else this.windows.tokens.add(overTokens);
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
