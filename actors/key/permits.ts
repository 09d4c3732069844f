/**
 * Cluster-wide `rpm`, `tpm` and monthly spend cap, by permits, on the grant protocol that slot
 * shares use too (grant.ts): the owner of a key's partition keeps the key's authoritative
 * windows and spend; the other nodes admit from permits it granted them, asking (one
 * request/reply on `keyPermits(p)`) only when their permits run out. Keys with none of these
 * limits never ask and keep no state here.
 *
 * Invariants: Σ requests (tokens) granted in any 60 s window ≤ rpm (tpm). A node admits from a
 * permit within PERMIT_TTL_MS of its grant, so the admissions in any 60 s window exceed the limit
 * by at most what was granted in the PERMIT_TTL_MS before it. Money: spent + Σ claims ≤ cap
 * at the owner, and each node commits no more than its claim.
 *
 * In full, with the reasoning: docs/internals.md#rate-and-spend-permits.
 */
import { every, runTask } from "../../src/background.ts";
import { fail } from "../../src/errors.ts";
import { silentLogger, type Logger } from "../../src/log.ts";
import type { KeyRecord } from "../../src/keys/store.ts";
import type { PermitReply, PermitRequest, RateInfo } from "../protocol.ts";
import { partitionOf } from "../subjects.ts";
import { capExceeded, utcMonth } from "./actor.ts";
import { systemClock, type Clock } from "./clock.ts";
import type { Amounts, LimitHolders, RateGate, Refusal, Verdict } from "./gate.ts";
import { askOwner, awaitGrant, joinAsk, KeyStates, notOwner, ownerUnreachable, PartitionOwner, type Tenure } from "./grant.ts";
import { RateWindows } from "./window.ts";

/** A permit is valid this long from its ask. */
export const PERMIT_TTL_MS = 2_000;
/** One grant is at most this fraction of a limit (rpm, tpm, the cap's room), and at least the admission's need. */
export const PERMIT_GRANT_FRACTION = 0.1;
/** A new owner grants nothing new for this long after taking a partition, while nodes report. */
export const RATE_TAKEOVER_QUIET_MS = 1_000;
/** Bound on one permit request/reply. */
export const PERMIT_REQUEST_TIMEOUT_MS = 2_000;
/** A node with reserves in flight or unreported billing reports them this often. */
export const SPEND_REPORT_MS = 1_000;
/** The owner forgets a node's spend claim not renewed for this long. */
export const SPEND_CLAIM_TTL_MS = 10_000;
/** Keys an owner or a node keeps state for before it sweeps idle ones. */
export const RATE_KEYS_MAX = 100_000;
/** A node forgets an idle key's permits after this long. */
export const RATE_IDLE_MS = 120_000;

const NONE: Amounts = { requests: 0, tokens: 0, micro: 0n };

/** Whether a key has a limit that permits govern. */
export function limited(key: Pick<KeyRecord, "rpm" | "tpm" | "monthlySpendCapMicro">): boolean {
  return key.rpm !== null || key.tpm !== null || key.monthlySpendCapMicro !== null;
}

interface SpendClaim {
  committedMicro: bigint;
  expiresAtMs: number;
}

interface KeyRates {
  windows: RateWindows;
  reported: Set<string>;
  month: { key: string; spentMicro: bigint } | null;
  claims: Map<string, SpendClaim>;
}

export interface AllocatorDeps {
  keys: LimitHolders;
  tenure: (partition: number) => Tenure | null;
  /** The key's billing this UTC month as the database knows it. */
  monthSpent: (keyId: string) => Promise<bigint>;
  clock?: Clock;
  /** The windows' clock (wall time, whole seconds matter). */
  windowNowMs?: () => number;
}

/** The owner's side: the key's windows and spend, and the permits granted from them. */
export class PermitAllocator {
  private readonly rates = new KeyStates<KeyRates>({ sizeMax: RATE_KEYS_MAX, idle: (state) => this.idle(state) });
  private readonly owner: PartitionOwner;
  private readonly clock: Clock;

  constructor(private readonly deps: AllocatorDeps) {
    this.clock = deps.clock ?? systemClock;
    this.owner = new PartitionOwner({ tenure: deps.tenure, clock: this.clock, quietMs: RATE_TAKEOVER_QUIET_MS });
  }

  private state(keyId: string): KeyRates {
    return this.rates.of(keyId, () => ({
      windows: new RateWindows(this.deps.windowNowMs),
      reported: new Set(),
      month: null,
      claims: new Map(),
    }));
  }

  async grant(req: PermitRequest): Promise<PermitReply> {
    const p = partitionOf(req.keyId);
    const tenure = this.owner.tenureOf(p);
    if (!tenure) return notOwner(p);
    const key = await this.deps.keys.get(req.keyId);
    if (!key || key.revokedAt) return { ok: false, failure: fail("invalid_api_key", "This API key has been revoked.") };
    const state = this.state(req.keyId);
    // A takeover's report: what the previous owner granted this node in the last minute.
    if (req.history && !state.reported.has(req.node)) {
      state.reported.add(req.node);
      state.windows.add(req.history.requests, req.history.tokens);
    }
    // A report (no need) goes on at once: it is what the quiet period waits for.
    const asks = req.need.requests > 0 || req.need.tokens > 0 || req.need.micro > 0n;
    const capped = key.monthlySpendCapMicro !== null;
    let counted = false;
    if (asks && capped && this.owner.quietLeftMs(tenure) > 0) {
      // An ask waits out the quiet period; what its node has billed and has in flight is counted
      // before it waits, so that the permits granted when the period ends (its own or another
      // node's) leave room for that money.
      const month = await this.month(req.keyId, state);
      if (!this.owner.holds(p, tenure)) return notOwner(p);
      this.count(req, state, month);
      counted = true;
    }
    // Asked again whole: the next tenure starts from the database and has counted none of it.
    if ((await this.owner.quiet(p, tenure, asks)) === "moved") return this.grant(req);
    const month = capped ? await this.month(req.keyId, state) : null;
    if (!this.owner.holds(p, tenure)) return notOwner(p);
    // Synchronous from here: no other grant of the key interleaves.
    return this.allot(counted ? { ...req, billedMicro: 0n } : req, key, state, month);
  }

  /** The node's report: its spend since its last ask, and its claim for what it has in flight. */
  private count(req: PermitRequest, state: KeyRates, month: { spentMicro: bigint }): SpendClaim {
    month.spentMicro += req.billedMicro;
    const claim = { committedMicro: req.outstandingMicro, expiresAtMs: this.clock.now() + SPEND_CLAIM_TTL_MS };
    state.claims.set(req.node, claim);
    return claim;
  }

  private allot(req: PermitRequest, key: KeyRecord, state: KeyRates, month: { spentMicro: bigint } | null): PermitReply {
    state.windows.add(0, req.overTokens);
    let micro = 0n;
    if (month && key.monthlySpendCapMicro !== null) {
      const claim = this.count(req, state, month);
      const room = key.monthlySpendCapMicro - month.spentMicro - this.committedByOthers(state, req.node) - req.outstandingMicro;
      if (req.need.micro > room) return { ok: false, failure: capExceeded(key.monthlySpendCapMicro, month.spentMicro) };
      micro = clampMicro(req.want.micro, req.need.micro, room);
      // Checked below against the rate windows before it is kept.
      claim.committedMicro = req.outstandingMicro + micro;
    }
    const refused = state.windows.check(key, req.need.requests, req.need.tokens);
    if (refused) {
      const claim = state.claims.get(req.node);
      if (claim) claim.committedMicro = req.outstandingMicro;
      return { ok: false, failure: refused.failure, ...(refused.rate ? { rate: refused.rate } : {}) };
    }
    const requests = key.rpm === null ? 0 : clamp(req.want.requests, req.need.requests, key.rpm - state.windows.requests.used(), key.rpm);
    const tokens = key.tpm === null ? 0 : clamp(req.want.tokens, req.need.tokens, key.tpm - state.windows.tokens.used(), key.tpm);
    state.windows.add(requests, tokens);
    const rate = state.windows.info(key);
    return { ok: true, requests, tokens, micro, ttlMs: PERMIT_TTL_MS, ...(rate ? { rate } : {}) };
  }

  private committedByOthers(state: KeyRates, node: string): bigint {
    const now = this.clock.now();
    let sum = 0n;
    for (const [n, c] of state.claims) {
      if (c.expiresAtMs <= now) state.claims.delete(n);
      else if (n !== node) sum += c.committedMicro;
    }
    return sum;
  }

  private async month(keyId: string, state: KeyRates): Promise<{ spentMicro: bigint }> {
    const key = utcMonth();
    if (state.month?.key !== key) {
      const spentMicro = await this.deps.monthSpent(keyId);
      if (state.month?.key !== key) state.month = { key, spentMicro };
    }
    return state.month;
  }

  /** The owner's own request settled: its windows count the tokens it used, as on one node. */
  correct(keyId: string, tokens: number): void {
    this.rates.get(keyId)?.windows.tokens.add(tokens);
  }

  /** Requests granted in the key's current window (tests). */
  granted(keyId: string): { requests: number; tokens: number } {
    const w = this.rates.get(keyId)?.windows;
    return { requests: w?.requests.used() ?? 0, tokens: w?.tokens.used() ?? 0 };
  }

  /** The partition moved away: its windows belong to the next owner now. */
  forget(partition: number): void {
    this.rates.forget(partition);
  }

  /** Nothing counted in the windows and no node's spend claim. */
  private idle(state: KeyRates): boolean {
    return state.windows.requests.used() === 0 && state.windows.tokens.used() === 0 && this.committedByOthers(state, "") === 0n;
  }
}

/** Between need and want, within what is left and the per-grant fraction of the limit (never below need). */
function clamp(want: number, need: number, left: number, limit: number): number {
  return Math.max(need, Math.min(want, left, Math.max(1, Math.floor(limit * PERMIT_GRANT_FRACTION))));
}

function clampMicro(want: bigint, need: bigint, room: bigint): bigint {
  const fraction = (room * BigInt(Math.round(PERMIT_GRANT_FRACTION * 1000))) / 1000n;
  const upTo = want < fraction ? want : fraction;
  return upTo > need ? upTo : need;
}

interface Permits {
  /** What the node may still admit, until `expiresAtMs`. */
  left: Amounts;
  expiresAtMs: number;
  /** The owner's view at the last grant, with when it was taken. */
  rate: RateInfo | undefined;
  rateAtMs: number;
  /** Used since the last ask (at `askedAtMs`): the next want is sized on it. */
  usedSinceAsk: Amounts;
  askedAtMs: number;
  outstandingMicro: bigint;
  billedMicro: bigint;
  overTokens: number;
  /** The key has a monthly cap: its billing is reported. */
  capped: boolean;
  /** What this node was granted in the last minute, for a new owner. */
  history: RateWindows;
  lastReportMs: number;
  lastUseMs: number;
  asking: Promise<PermitReply | null> | null;
}

export type RateAdmissionPath = "local" | "owner" | "asked";

export interface PermitDeps {
  node: string;
  /** Sends a permit request to the key's partition owner. */
  ask: (req: PermitRequest) => Promise<PermitReply>;
  /** Whether this node owns the partition: then its allocator answers in process. */
  ownsPartition: (partition: number) => boolean;
  allocator: PermitAllocator;
  clock?: Clock;
  windowNowMs?: () => number;
  /** Where a failed report is logged (it is retried by the next one). */
  log?: Logger;
}

/** A node's side: its permits for every limited key, and its rate admissions counted by path. */
export class RatePermits implements RateGate {
  /** A key's permits may go once nothing is in flight and they have expired unused. */
  private readonly permits = new KeyStates<Permits>({
    sizeMax: RATE_KEYS_MAX,
    idle: (p) => p.outstandingMicro === 0n && this.now() - p.lastUseMs > PERMIT_TTL_MS,
  });
  private readonly clock: Clock;
  private stopReporting: (() => void) | null = null;
  readonly admissions: Record<RateAdmissionPath, number> = { local: 0, owner: 0, asked: 0 };

  constructor(private readonly deps: PermitDeps) {
    this.clock = deps.clock ?? systemClock;
  }

  private now(): number {
    return this.clock.now();
  }

  private state(keyId: string): Permits {
    return this.permits.of(keyId, () => {
      const now = this.now();
      return {
        left: { ...NONE },
        expiresAtMs: 0,
        rate: undefined,
        rateAtMs: now,
        usedSinceAsk: { ...NONE },
        askedAtMs: now,
        outstandingMicro: 0n,
        billedMicro: 0n,
        overTokens: 0,
        capped: false,
        history: new RateWindows(this.deps.windowNowMs),
        lastReportMs: now,
        lastUseMs: now,
        asking: null,
      };
    });
  }

  private need(key: KeyRecord, tokens: number, micro: bigint): Amounts {
    return {
      requests: key.rpm === null ? 0 : 1,
      tokens: key.tpm === null ? 0 : tokens,
      micro: key.monthlySpendCapMicro === null ? 0n : micro,
    };
  }

  private covers(p: Permits, need: Amounts): boolean {
    const valid = this.now() < p.expiresAtMs;
    const rates =
      need.requests === 0 && need.tokens === 0 ? true : valid && p.left.requests >= need.requests && p.left.tokens >= need.tokens;
    return rates && (need.micro === 0n || (valid && p.left.micro >= need.micro));
  }

  /** Takes what the admission needs if the unexpired permits cover it. */
  private tryTake(p: Permits, need: Amounts): boolean {
    if (!this.covers(p, need)) return false;
    p.left = { requests: p.left.requests - need.requests, tokens: p.left.tokens - need.tokens, micro: p.left.micro - need.micro };
    p.usedSinceAsk = {
      requests: p.usedSinceAsk.requests + need.requests,
      tokens: p.usedSinceAsk.tokens + need.tokens,
      micro: p.usedSinceAsk.micro + need.micro,
    };
    p.outstandingMicro += need.micro;
    p.lastUseMs = this.now();
    return true;
  }

  /** The x-ratelimit-* view here: the owner's at the last grant, plus this node's permits left. */
  private rateOf(p: Permits): RateInfo | undefined {
    if (!p.rate) return undefined;
    const elapsedS = Math.floor((this.now() - p.rateAtMs) / 1000);
    const r = { ...p.rate };
    if (r.remainingRequests !== undefined) r.remainingRequests += p.left.requests;
    if (r.remainingTokens !== undefined) r.remainingTokens += p.left.tokens;
    if (r.resetRequestsS !== undefined) r.resetRequestsS = Math.max(0, r.resetRequestsS - elapsedS);
    if (r.resetTokensS !== undefined) r.resetTokensS = Math.max(0, r.resetTokensS - elapsedS);
    return r;
  }

  async admit(key: KeyRecord, tokens: number, reserveMicro: bigint, batch = false): Promise<Verdict> {
    if (batch) return key.monthlySpendCapMicro === null ? { ok: true } : this.acquire(key, { ...NONE, micro: reserveMicro }, true);
    if (!limited(key)) return { ok: true };
    return this.acquire(key, this.need(key, tokens, reserveMicro), true);
  }

  async extend(key: KeyRecord, tokens: number, micro: bigint): Promise<Refusal | null> {
    if (!limited(key)) return null;
    const p = this.state(key.id);
    // Tokens of an extension are never refused (as on one node): from permits, else reported.
    const fromPermits = key.tpm !== null && this.now() < p.expiresAtMs ? Math.min(tokens, p.left.tokens) : 0;
    p.left.tokens -= fromPermits;
    if (key.tpm !== null) p.overTokens += tokens - fromPermits;
    if (key.monthlySpendCapMicro === null) return null;
    const verdict = await this.acquire(key, { ...NONE, micro }, false);
    return verdict.ok ? null : verdict.failure;
  }

  /** `admission`: counted by path (an extension is not). */
  private async acquire(key: KeyRecord, need: Amounts, admission: boolean): Promise<Verdict> {
    const p = this.state(key.id);
    p.capped = key.monthlySpendCapMicro !== null;
    if (this.tryTake(p, need)) {
      if (admission) this.admissions.local++;
      return { ok: true, rate: this.rateOf(p) };
    }
    const owner = this.deps.ownsPartition(partitionOf(key.id));
    // Concurrent waiters share one ask; each then takes from what came back.
    const outcome = await awaitGrant<PermitReply | null, Verdict>(this.clock, {
      ask: () => joinAsk(p, () => this.ask(key, p, need, owner)),
      take: () => this.tryTake(p, need),
      refusal: (reply, mine) => {
        // Another's refusal answers this admission too when it is the window's, not the other's size or money.
        const shared = reply && !reply.ok && reply.failure.code === "rate_limit_exceeded" && reply.failure.retryAfterS !== undefined;
        if (reply && !reply.ok && (mine || shared)) return reply;
        if (!reply && mine) return { ok: false, failure: ownerUnreachable() };
        return undefined;
      },
      timedOut: () => ({
        ok: false,
        failure: fail("service_unavailable", "The key's partition is moving; try again shortly.", { retryAfterS: 1 }),
      }),
    });
    if (outcome !== "taken") return outcome;
    if (admission) this.admissions[owner ? "owner" : "asked"]++;
    return { ok: true, rate: this.rateOf(p) };
  }

  /**
   * The need and what the use since the last ask comes to over one permit's life (the owner caps
   * it), so that few permits expire unused. The owner's own admissions take exactly what they
   * need from its windows, as on one node.
   */
  private want(key: KeyRecord, p: Permits, need: Amounts, owner: boolean): Amounts {
    if (owner) return need;
    const u = p.usedSinceAsk;
    const scale = PERMIT_TTL_MS / Math.max(PERMIT_TTL_MS, this.now() - p.askedAtMs);
    return {
      requests: key.rpm === null ? 0 : need.requests + Math.floor(u.requests * scale),
      tokens: key.tpm === null ? 0 : need.tokens + Math.floor(u.tokens * scale),
      micro: key.monthlySpendCapMicro === null ? 0n : need.micro + (u.micro * BigInt(Math.round(scale * 1000))) / 1000n,
    };
  }

  private request(keyId: string, p: Permits, need: Amounts, want: Amounts, history?: { requests: number; tokens: number }): PermitRequest {
    return {
      keyId,
      node: this.deps.node,
      need,
      want,
      outstandingMicro: p.outstandingMicro,
      billedMicro: p.billedMicro,
      overTokens: p.overTokens,
      ...(history ? { history } : {}),
    };
  }

  /** One ask (retried while the partition has no owner); null when none answered in time. */
  private ask(key: KeyRecord, p: Permits, need: Amounts, owner: boolean): Promise<PermitReply | null> {
    return askOwner(this.clock, async (sentAtMs) => {
      const req = this.request(key.id, p, need, this.want(key, p, need, owner));
      this.handOver(p, sentAtMs);
      const reply = await this.send(req).catch(() => null);
      if (reply) this.granted(p, reply, sentAtMs);
      if (reply && (reply.ok || reply.failure.code !== "service_unavailable")) return reply;
      // No owner right now (the partition is moving) or it is slow: reported again with the next ask.
      this.takeBack(p, req);
      return null;
    });
  }

  /** To the key's owner: in process when this node owns the partition. */
  private send(req: PermitRequest): Promise<PermitReply> {
    return this.deps.ownsPartition(partitionOf(req.keyId)) ? this.deps.allocator.grant(req) : this.deps.ask(req);
  }

  /** A request is sent: what it reports is the owner's from here, and the allowance left is given up (the claim covers only what is reported). */
  private handOver(p: Permits, sentAtMs: number): void {
    p.billedMicro = 0n;
    p.overTokens = 0;
    p.left.micro = 0n;
    p.lastReportMs = sentAtMs;
  }

  /** No owner heard the request: what it reported is this node's to report again. */
  private takeBack(p: Permits, req: PermitRequest): void {
    p.billedMicro += req.billedMicro;
    p.overTokens += req.overTokens;
  }

  private granted(p: Permits, reply: PermitReply, sentAtMs: number): void {
    if (reply.ok) {
      if (sentAtMs >= p.expiresAtMs) p.left = { ...NONE };
      p.left = { requests: p.left.requests + reply.requests, tokens: p.left.tokens + reply.tokens, micro: reply.micro };
      p.expiresAtMs = sentAtMs + reply.ttlMs;
      p.usedSinceAsk = { ...NONE };
      p.askedAtMs = sentAtMs;
      p.history.add(reply.requests, reply.tokens);
    }
    if (reply.ok || reply.rate) {
      p.rate = reply.rate;
      p.rateAtMs = this.now();
    }
  }

  release(keyId: string, amounts: Amounts): void {
    const p = this.permits.get(keyId);
    if (!p) return;
    p.outstandingMicro -= amounts.micro;
    // Back into this node's permits: still counted at the owner until they expire.
    if (this.now() < p.expiresAtMs) {
      p.left.requests += amounts.requests;
      p.left.tokens += amounts.tokens;
    }
  }

  settled(keyId: string, s: { reserveMicro: bigint; billedMicro: bigint; tokens: number }): void {
    const p = this.permits.get(keyId);
    if (!p) return;
    p.outstandingMicro -= s.reserveMicro;
    if (p.outstandingMicro < 0n) p.outstandingMicro = 0n;
    if (p.capped) p.billedMicro += s.billedMicro;
    if (this.deps.ownsPartition(partitionOf(keyId))) this.deps.allocator.correct(keyId, s.tokens);
    else if (s.tokens > 0) p.overTokens += s.tokens;
  }

  /** Reports the reserves in flight and billing of keys with a cap, so the owner's claims stay current. */
  report(options: { keyIds?: Iterable<string>; takeover?: boolean; now?: boolean } = {}): Promise<unknown>[] {
    const now = this.now();
    const pending: Promise<unknown>[] = [];
    for (const keyId of [...(options.keyIds ?? this.permits.keys())]) {
      const p = this.permits.get(keyId);
      if (!p) continue;
      if (!options.takeover) {
        if (p.outstandingMicro === 0n && p.billedMicro === 0n && p.overTokens === 0) {
          if (now - p.lastUseMs > RATE_IDLE_MS) this.permits.delete(keyId);
          continue;
        }
        if (!options.now && now - p.lastReportMs < SPEND_REPORT_MS) continue;
      }
      pending.push(this.reportOne(keyId, p, options.takeover ?? false));
    }
    return pending;
  }

  /**
   * One report at a time with the key's asks: the owner's claim is the last report it heard, so a
   * report overtaking an ask's grant would drop the allowance the node holds. A takeover's report
   * waits for the ask under way; a routine one is skipped (the ask reports).
   */
  private reportOne(keyId: string, p: Permits, takeover: boolean): Promise<unknown> {
    if (p.asking) return takeover ? p.asking.then(() => this.reportOne(keyId, p, takeover)) : Promise.resolve();
    return joinAsk(p, () => this.sendReport(keyId, p, takeover).then(() => null)).reply;
  }

  private async sendReport(keyId: string, p: Permits, takeover: boolean): Promise<void> {
    const history = takeover ? { requests: Math.round(p.history.requests.used()), tokens: Math.round(p.history.tokens.used()) } : undefined;
    const req = this.request(keyId, p, NONE, NONE, history);
    this.handOver(p, this.now());
    const reply = await this.send(req).catch(() => null);
    if (!reply || (!reply.ok && reply.failure.code === "service_unavailable")) this.takeBack(p, req);
  }

  /** A partition changed owner: report what this node was granted in the last minute, at once. */
  partitionMoved(partition: number): void {
    runTask("rate_report", this.log, () => Promise.all(this.report({ keyIds: this.permits.inPartition(partition), takeover: true })));
  }

  private get log(): Logger {
    return this.deps.log ?? silentLogger;
  }

  /** Each tick starts its reports without waiting for the last tick's: a key whose owner is slow to answer holds up no other. */
  start(): void {
    this.stopReporting = every("rate_report", SPEND_REPORT_MS, this.log, () => {
      runTask("rate_report", this.log, () => Promise.all(this.report()));
    });
  }

  /** Leaving (after the node's requests settled): reports its last billing, so the owner's count of the month is whole. */
  async stop(): Promise<void> {
    this.stopReporting?.();
    await Promise.all(this.report({ now: true }));
  }
}
