/**
 * Top-ups paid through a provider: records, their state machine, and the one `settle`.
 *
 * Invariants: the wallet is credited only in the transaction that moves a row to `verified`,
 * through the ledger reference `topup:pay:<id>`, so no path (callback, reconciler, operator,
 * retry) can credit twice; the credit goes to the account recorded at request time, for the
 * requested amount (the provider's fee is recorded, never deducted). At most one verify is in
 * flight per top-up: settle first claims the row (state `verifying`, a claim deadline, attempts
 * + 1) and commits its outcome only if its claim still holds (`attempts` unchanged). The provider
 * is called outside any transaction, with a timeout shorter than the claim. What strangers can
 * start is bounded: callbacks and checks ask the provider about a top-up at most
 * CALLBACK_ATTEMPTS_MAX times and at most once per askIntervalMs (in between they get the last
 * answer), and a customer has at most TOPUPS_PENDING_PER_ACCOUNT_MAX top-ups waiting
 * (TOPUPS_PENDING_PER_ADDRESS_MAX per address).
 *
 * In full, with the reasoning: docs/internals.md#paid-top-ups.
 */
import { and, desc, eq, inArray, sql, type SQL } from "drizzle-orm";
import { txRows, type Db, type Tx } from "../db/client.ts";
import { accounts, TOPUP_STATES, topups } from "../db/schema.ts";
import { fail, isFailure, type Failure } from "../errors.ts";
import { newId } from "../ids.ts";
import { topUpIn } from "../ledger/wallets.ts";
import type { Logger } from "../log.ts";
import type { PaymentProvider, RawReply, VerifyOutcome } from "./provider.ts";

export type Topup = typeof topups.$inferSelect;
export type TopupState = Topup["state"];
/** Every state a top-up can be in (the admin API's list filter takes one). */
export { TOPUP_STATES };

/** The reason a waiting top-up carries once its customer came back from the payment page with "cancel". */
export const CANCELLED_REASON = "cancelled on the payment page";
/** Provider replies kept per top-up; older ones are dropped first. */
export const REPLIES_KEPT_MAX = 20;
/** Settles that got no usable answer before a top-up goes to an operator. */
export const VERIFY_ATTEMPTS_MAX = 30;
/**
 * Provider calls the callback and the customer's "check status" may start for one top-up,
 * together. The callback needs no key, and a check only a click, so whoever knows an authority
 * (or clicks on) could otherwise make us call the provider without end (and Zarinpal throttle
 * the merchant); past this only the reconciler, acting on the provider's own word, verifies it.
 */
export const CALLBACK_ATTEMPTS_MAX = 10;

/** Top-ups waiting for payment (created, redirected, verifying) an account may have at once, when its customer starts them. */
export const TOPUPS_PENDING_PER_ACCOUNT_MAX = 5;
/** … that customers may have at once from one address (as the sign-in limits count it), whatever their accounts. */
export const TOPUPS_PENDING_PER_ADDRESS_MAX = 10;
const PENDING_STATES_SQL = sql.raw(`'created', 'redirected', 'verifying'`);

/** Who starts a settle: the two a stranger or a customer can start share CALLBACK_ATTEMPTS_MAX. */
export type SettledBy = "callback" | "customer" | "reconciler";
/** `list` returns at most this many. */
export const LIST_LIMIT_MAX = 500;
export const MICRO_PER_TOMAN = 1_000_000n;

/** A named point where `DARVAZE_FAULT` makes the process die abruptly (crash tests). */
export type FaultPoint = "topup_after_verify";

export interface TopupsOptions {
  db: Db;
  provider: PaymentProvider;
  log: Logger;
  /** Where the provider sends the customer back (our /pay/<provider>/callback); known once the server listens. */
  callbackUrl: () => string;
  amountMinMicro: bigint;
  amountMaxMicro: bigint;
  /** A top-up not paid within this is expired by the reconciler. */
  ttlMs: number;
  /** How long one settle may hold its claim; longer than the provider timeout. */
  claimMs: number;
  /** Callbacks and checks ask the provider about one top-up at most once in this long (PAYMENT_ASK_INTERVAL_MS). */
  askIntervalMs: number;
  fault?: FaultPoint;
}

export type StartResult = { topup: Topup; redirectUrl: string } | Failure;

export class Topups {
  constructor(readonly options: TopupsOptions) {}

  get provider(): PaymentProvider {
    return this.options.provider;
  }

  /**
   * Records a top-up for the account and asks the provider for a payment; the customer is to be
   * sent to `redirectUrl`. `customer`: started by the account's customer from this address (as
   * addressBucket counts it), so within TOPUPS_PENDING_PER_ACCOUNT_MAX and _PER_ADDRESS_MAX;
   * an operator's start is not capped.
   */
  async start(accountId: string, amountMicro: bigint, customer?: { address: string }): Promise<StartResult> {
    const { db, provider, amountMinMicro, amountMaxMicro } = this.options;
    if (amountMicro % MICRO_PER_TOMAN !== 0n)
      return fail("invalid_request", "amount_toman must be a whole number of toman", { param: "amount_toman" });
    if (amountMicro < amountMinMicro || amountMicro > amountMaxMicro) {
      return fail(
        "invalid_request",
        `amount_toman must be between ${amountMinMicro / MICRO_PER_TOMAN} and ${amountMaxMicro / MICRO_PER_TOMAN}`,
        { param: "amount_toman" },
      );
    }
    const [account] = await db.orm.select({ id: accounts.id }).from(accounts).where(eq(accounts.id, accountId));
    if (!account) return fail("not_found", `No account ${accountId}.`);
    const id = newId("top");
    const refused = await this.insertCreated(id, accountId, amountMicro, customer?.address ?? null);
    if (refused) return refused;
    const outcome = await provider.request({
      topupId: id,
      amountMicro,
      description: `Darvaze wallet top-up ${id}`,
      callbackUrl: this.options.callbackUrl(),
    });
    if (!outcome.ok) {
      await this.move(id, ["created"], { state: "failed", reason: `request refused: ${outcome.reason}` }, outcome.raw);
      this.options.log("warn", "topup_request_failed", { topupId: id, reason: outcome.reason });
      return fail("upstream_error", `The payment provider refused the top-up: ${outcome.reason}.`);
    }
    const topup = await this.move(
      id,
      ["created"],
      { state: "redirected", authority: outcome.authority, feeMicro: outcome.feeMicro },
      outcome.raw,
    );
    // Only a provider slower than the top-up's whole lifetime gets here: the reconciler expired it.
    if (!topup) return fail("upstream_error", "The payment provider answered after the top-up had expired; start a new one.");
    this.options.log("info", "topup_started", { topupId: id, accountId, amountMicro });
    return { topup, redirectUrl: provider.redirectUrl(outcome.authority) };
  }

  /**
   * Inserts the `created` row, for a customer only within the pending caps: counted and inserted
   * under advisory locks on the account and the address, so two nodes cannot both pass a cap.
   */
  private async insertCreated(id: string, accountId: string, amountMicro: bigint, address: string | null): Promise<Failure | null> {
    return this.options.db.orm.transaction(async (tx) => {
      if (address !== null) {
        await tx.execute(sql`SELECT pg_advisory_xact_lock(hashtext(${`topup-account:${accountId}`}))`);
        await tx.execute(sql`SELECT pg_advisory_xact_lock(hashtext(${`topup-address:${address}`}))`);
        const [counts] = await txRows<{ account: number; address: number; soonest: Date | string | null }>(
          tx,
          sql`SELECT count(*) FILTER (WHERE account_id = ${accountId})::int AS account,
                     count(*) FILTER (WHERE client_address = ${address})::int AS address,
                     min(expires_at) AS soonest
              FROM topups WHERE (account_id = ${accountId} OR client_address = ${address}) AND state IN (${PENDING_STATES_SQL})`,
        );
        const refusal = pendingRefusal(counts!);
        if (refusal) return refusal;
      }
      await tx.insert(topups).values({
        id,
        accountId,
        provider: this.options.provider.name,
        amountMicro,
        state: "created",
        clientAddress: address,
        expiresAt: sql`now() + ${this.options.ttlMs} * interval '1 millisecond'`,
      });
      return null;
    });
  }

  async get(id: string): Promise<Topup | null> {
    const [row] = await this.options.db.orm.select().from(topups).where(eq(topups.id, id));
    return row ?? null;
  }

  async byAuthority(authority: string): Promise<Topup | null> {
    const [row] = await this.options.db.orm.select().from(topups).where(eq(topups.authority, authority));
    return row ?? null;
  }

  async list(filter: { state?: string; accountId?: string; limit: number }): Promise<Topup[]> {
    const where: SQL[] = [];
    if (filter.state) where.push(eq(topups.state, filter.state));
    if (filter.accountId) where.push(eq(topups.accountId, filter.accountId));
    return this.options.db.orm
      .select()
      .from(topups)
      .where(and(...where))
      .orderBy(desc(topups.createdAt))
      .limit(Math.min(filter.limit, LIST_LIMIT_MAX));
  }

  /**
   * Verifies the top-up with the provider and records the outcome, crediting the wallet once if
   * it is paid. Safe to call any number of times from anywhere: a top-up already settled, or
   * with a verify in flight elsewhere, is returned as it is. `by` bounds what a callback or a
   * customer's check may start (CALLBACK_ATTEMPTS_MAX); the reconciler acts on the provider's own
   * word and is not bounded.
   */
  async settle(id: string, by: SettledBy, afterInquiry = false): Promise<Topup | null> {
    let claimed = await this.claim(id, by === "reconciler" ? "free" : afterInquiry ? "counted" : "asked");
    // A callback within the interval after a "not paid" answer (a forged one, say) may be the payer's own:
    // it waits out the interval (at most askIntervalMs) and asks once more, rather than take the stale answer.
    if (!claimed && by === "callback" && (await this.waitForAsk(id))) claimed = await this.claim(id, "asked");
    if (!claimed) return this.get(id);
    const outcome = await this.options.provider.verify({ authority: claimed.authority!, amountMicro: claimed.amountMicro });
    if (this.options.fault === "topup_after_verify") {
      // Crash tests: die between the provider's verify reply and the database commit.
      process.kill(process.pid, "SIGKILL");
    }
    return this.record(claimed, outcome);
  }

  /**
   * Counts a customer's inquiry about a waiting top-up as one of its CALLBACK_ATTEMPTS_MAX
   * attempts; false when they are spent (or it no longer waits), and then the provider is not asked.
   * `updated_at` stays: checks do not keep a top-up from the reconciler's stale list.
   */
  async countCheck(id: string): Promise<boolean> {
    const [row] = await this.options.db.orm
      .update(topups)
      .set({ attempts: sql`${topups.attempts} + 1`, askedAt: sql`now()` })
      .where(sql`${topups.id} = ${id} AND ${topups.state} IN ('created', 'redirected') AND ${this.mayAsk()}`)
      .returning({ id: topups.id });
    return row !== undefined;
  }

  /**
   * Whether a callback or a check may ask the provider now: within CALLBACK_ATTEMPTS_MAX, and not
   * within askIntervalMs of the last such call (so a burst of forged callbacks costs one attempt,
   * and each gets the answer the last one left).
   */
  private mayAsk(): SQL {
    return sql`${topups.attempts} < ${CALLBACK_ATTEMPTS_MAX}
      AND (${topups.askedAt} IS NULL OR ${topups.askedAt} <= now() - ${this.options.askIntervalMs} * interval '1 millisecond')`;
  }

  /**
   * Waits until the provider may be asked about a top-up again, when the last answer was that it
   * was not paid (state `failed`) and the attempts are not spent; false (at once) otherwise.
   */
  private async waitForAsk(id: string): Promise<boolean> {
    const row = await this.get(id);
    if (row?.state !== "failed" || row.attempts >= CALLBACK_ATTEMPTS_MAX || !row.askedAt) return false;
    const waitMs = row.askedAt.getTime() + this.options.askIntervalMs - Date.now();
    if (waitMs > this.options.askIntervalMs) return false;
    if (waitMs > 0) await Bun.sleep(waitMs);
    return true;
  }

  /**
   * Takes the one verify in flight: from a waiting state, or from a claim that has lapsed. `asked`:
   * a callback's or a check's (mayAsk); `counted`: a check's verify right after its own inquiry
   * (the interval is that inquiry's, the attempt cap still holds); `free`: the reconciler's.
   */
  private async claim(id: string, mode: "asked" | "counted" | "free"): Promise<Topup | null> {
    const asked = mode === "asked";
    const bound =
      mode === "asked" ? sql`AND ${this.mayAsk()}` : mode === "counted" ? sql`AND ${topups.attempts} < ${CALLBACK_ATTEMPTS_MAX}` : sql``;
    const [row] = await this.options.db.orm
      .update(topups)
      .set({
        state: "verifying",
        attempts: sql`${topups.attempts} + 1`,
        claimUntil: sql`now() + ${this.options.claimMs} * interval '1 millisecond'`,
        updatedAt: sql`now()`,
        ...(asked ? { askedAt: sql`now()` } : {}),
      })
      .where(
        sql`${topups.id} = ${id} AND ${topups.authority} IS NOT NULL AND (${topups.state} IN ('redirected', 'failed', 'expired')
            OR (${topups.state} = 'verifying' AND (${topups.claimUntil} IS NULL OR ${topups.claimUntil} < now())))
            ${bound}`,
      )
      .returning();
    return row ?? null;
  }

  /** Commits a verify's outcome under the claim that made it; a lost claim changes nothing. */
  private async record(claimed: Topup, outcome: VerifyOutcome): Promise<Topup | null> {
    const fence = { id: claimed.id, attempts: claimed.attempts };
    const log = this.options.log;
    switch (outcome.kind) {
      case "paid": {
        const credited = await this.verifyAndCredit(claimed, outcome, fence);
        if (credited)
          log("info", "topup_verified", {
            topupId: claimed.id,
            accountId: claimed.accountId,
            amountMicro: claimed.amountMicro,
            alreadyVerified: outcome.alreadyVerified,
          });
        return credited ?? this.get(claimed.id);
      }
      case "amount_mismatch":
        log("warn", "topup_needs_review", { topupId: claimed.id, reason: outcome.reason });
        return this.fenced(fence, { state: "needs_review", reason: `verify: ${outcome.reason}` }, outcome.raw);
      case "not_paid": {
        // While the top-up may still be paid, "not paid" spends no attempt: strangers' callbacks are
        // bounded by the interval between asks (ttl ÷ interval verifies at most), so however patient a
        // forger, the payer's own callback keeps its verify. Past its expiry they count again.
        const payable = claimed.expiresAt !== null && claimed.expiresAt.getTime() > Date.now();
        const attempts = payable ? claimed.attempts - 1 : claimed.attempts;
        return this.fenced(fence, { state: "failed", reason: `verify: ${outcome.reason}`, attempts }, outcome.raw);
      }
      case "invalid":
        return this.fenced(fence, { state: "failed", reason: `verify: ${outcome.reason}` }, outcome.raw);
      case "retry": {
        const review = claimed.attempts >= VERIFY_ATTEMPTS_MAX;
        return this.fenced(
          fence,
          review
            ? { state: "needs_review", reason: `verify unanswered after ${claimed.attempts} attempts: ${outcome.reason}` }
            : { state: "verifying", claimUntil: null, reason: `verify unanswered, will retry: ${outcome.reason}` },
          outcome.raw,
        );
      }
    }
  }

  /**
   * Marks the top-up verified and credits the wallet in one transaction. A ref_id already on
   * another top-up sends this one to review instead (the unique index backs the check).
   */
  private async verifyAndCredit(
    claimed: Topup,
    paid: Extract<VerifyOutcome, { kind: "paid" }>,
    fence: { id: string; attempts: number },
  ): Promise<Topup | null> {
    const { db, provider } = this.options;
    const duplicate = await db.orm
      .select({ id: topups.id })
      .from(topups)
      .where(sql`${topups.provider} = ${provider.name} AND ${topups.refId} = ${paid.refId} AND ${topups.id} <> ${claimed.id}`);
    if (duplicate.length > 0) {
      this.options.log("warn", "topup_needs_review", { topupId: claimed.id, reason: "ref_id seen twice" });
      return this.fenced(
        fence,
        { state: "needs_review", reason: `ref_id ${paid.refId} already belongs to top-up ${duplicate[0]!.id}` },
        paid.raw,
      );
    }
    return db.orm.transaction(async (tx) => {
      const [row] = await tx
        .update(topups)
        .set({
          state: "verified",
          refId: paid.refId,
          cardPan: paid.cardPan,
          cardHash: paid.cardHash,
          feeMicro: paid.feeMicro ?? claimed.feeMicro,
          reason: paid.alreadyVerified ? "verify answered 101 (already verified)" : null,
          claimUntil: null,
          verifiedAt: sql`now()`,
          updatedAt: sql`now()`,
          replies: appendReply(paid.raw),
        })
        .where(sql`${topups.id} = ${fence.id} AND ${topups.state} = 'verifying' AND ${topups.attempts} = ${fence.attempts}`)
        .returning();
      if (!row) return null;
      const credit = await topUpIn(tx, row.accountId, row.amountMicro, ledgerKey(row.id));
      if (isFailure(credit)) throw new Error(`top-up ${row.id}: ledger refused the credit: ${credit.message}`);
      return row;
    });
  }

  private async fenced(fence: { id: string; attempts: number }, change: Partial<Topup>, raw: RawReply): Promise<Topup | null> {
    const [row] = await this.options.db.orm
      .update(topups)
      .set({ ...change, ...(change.state !== "verifying" ? { claimUntil: null } : {}), updatedAt: sql`now()`, replies: appendReply(raw) })
      .where(sql`${topups.id} = ${fence.id} AND ${topups.state} = 'verifying' AND ${topups.attempts} = ${fence.attempts}`)
      .returning();
    return row ?? this.get(fence.id);
  }

  /** Moves a top-up between states, only from the listed ones; null when it was elsewhere. */
  async move(id: string, from: readonly TopupState[], change: Partial<Topup>, raw?: RawReply): Promise<Topup | null> {
    const [row] = await this.options.db.orm
      .update(topups)
      .set({ ...change, updatedAt: sql`now()`, ...(raw === undefined ? {} : { replies: appendReply(raw) }) })
      .where(
        sql`${topups.id} = ${id} AND ${topups.state} IN (${sql.join(
          from.map((s) => sql`${s}`),
          sql`, `,
        )})`,
      )
      .returning();
    return row ?? null;
  }

  /**
   * Notes that the customer cancelled on the payment page. The state stays (the reconciler still
   * asks the provider, which may yet report it paid, then expires it); the account area shows it
   * as cancelled with nothing to check.
   */
  async noteCancelled(id: string): Promise<Topup | null> {
    return (await this.move(id, ["created", "redirected"], { reason: CANCELLED_REASON })) ?? this.get(id);
  }

  /** Expires a waiting top-up past its expiry (never one that is being verified). */
  async expire(id: string, reason: string): Promise<Topup | null> {
    const [row] = await this.options.db.orm
      .update(topups)
      .set({ state: "expired", reason, updatedAt: sql`now()` })
      .where(sql`${topups.id} = ${id} AND ${topups.state} IN ('created', 'redirected') AND ${topups.expiresAt} < now()`)
      .returning();
    return row ?? null;
  }

  /**
   * An operator's decision on a top-up in review: `complete` credits it (once, as any verify
   * would); `reject` closes it without credit, and with `reverse` first hands the payment back
   * through the provider (Zarinpal: within 30 minutes of payment). Either keeps the reason.
   */
  /** `within`: what else the caller writes in a completion's transaction (an operator's audit row). */
  async review(
    id: string,
    decision: { complete: true } | { complete: false; reverse: boolean },
    reason: string,
    within?: (tx: Tx, completed: Topup) => Promise<void>,
  ): Promise<Topup | Failure> {
    if (decision.complete) return this.complete(id, reason, within);
    if (!decision.reverse) {
      const row = await this.move(id, ["needs_review"], { state: "failed", reason: `rejected by operator: ${reason}` });
      return row ?? (await this.notInReview(id));
    }
    const row = await this.get(id);
    if (row?.state !== "needs_review" || !row.authority) return this.notInReview(id);
    if (!this.provider.reverse) return fail("invalid_request", `The ${this.provider.name} provider cannot reverse a payment.`);
    const reversed = await this.provider.reverse(row.authority);
    if (!reversed.ok) return fail("upstream_error", `The payment provider did not reverse the payment: ${reversed.reason}.`);
    this.options.log("info", "topup_reversed_by_operator", { topupId: id });
    const moved = await this.move(id, ["needs_review"], { state: "reversed", reason: `reversed by operator: ${reason}` }, reversed.raw);
    return moved ?? (await this.notInReview(id));
  }

  private async complete(id: string, reason: string, within?: (tx: Tx, completed: Topup) => Promise<void>): Promise<Topup | Failure> {
    const row = await this.options.db.orm.transaction(async (tx) => {
      const [moved] = await tx
        .update(topups)
        .set({ state: "verified", reason: `completed by operator: ${reason}`, verifiedAt: sql`now()`, updatedAt: sql`now()` })
        .where(sql`${topups.id} = ${id} AND ${topups.state} = 'needs_review'`)
        .returning();
      if (!moved) return null;
      const credit = await topUpIn(tx, moved.accountId, moved.amountMicro, ledgerKey(moved.id));
      if (isFailure(credit)) throw new Error(`top-up ${moved.id}: ledger refused the credit: ${credit.message}`);
      await within?.(tx, moved);
      return moved;
    });
    if (row) this.options.log("info", "topup_completed_by_operator", { topupId: id, amountMicro: row.amountMicro });
    return row ?? (await this.notInReview(id));
  }

  private async notInReview(id: string): Promise<Failure> {
    const row = await this.get(id);
    if (!row) return fail("not_found", `No top-up ${id}.`);
    return fail("invalid_request", `Top-up ${id} is ${row.state}, not needs_review: only a top-up in review can be completed or rejected.`);
  }

  /** Top-ups per state, every node's (for /metrics). */
  async countsByState(): Promise<Record<string, number>> {
    const rows = await this.options.db.rows<{ state: string; n: string | number }>(
      sql`SELECT state, count(*) AS n FROM topups GROUP BY state`,
    );
    const counts: Record<string, number> = Object.fromEntries(TOPUP_STATES.map((state) => [state, 0]));
    for (const r of rows) counts[r.state] = Number(r.n);
    return counts;
  }

  /**
   * Waiting top-ups the reconciler should look at (stale, past expiry, or a lapsed claim): at most
   * `perAccountMax` of each account's, stalest first, taken in turns across accounts (each
   * account's stalest, then each one's second, …), so one account's flood cannot crowd out
   * another's lost callback.
   */
  async stale(staleMs: number, limit: number, perAccountMax: number): Promise<Topup[]> {
    const rows = await this.options.db.rows<{ id: string }>(sql`
      SELECT id FROM (
        SELECT id, updated_at, row_number() OVER (PARTITION BY account_id ORDER BY updated_at, id) AS turn
        FROM topups
        WHERE (state IN ('created', 'redirected') AND (updated_at < now() - ${staleMs} * interval '1 millisecond' OR expires_at < now()))
           OR (state = 'verifying' AND (claim_until IS NULL OR claim_until < now()))
      ) AS waiting
      WHERE turn <= ${perAccountMax}
      ORDER BY turn, updated_at, id
      LIMIT ${limit}`);
    if (rows.length === 0) return [];
    const found = await this.options.db.orm
      .select()
      .from(topups)
      .where(
        inArray(
          topups.id,
          rows.map((r) => r.id),
        ),
      );
    const byId = new Map(found.map((row) => [row.id, row]));
    return rows.flatMap((r) => byId.get(r.id) ?? []);
  }
}

/** Why a customer may not start another top-up now (too many waiting), or null. */
function pendingRefusal(counts: { account: number; address: number; soonest: Date | string | null }): Failure | null {
  const retryAfterS = Math.max(1, Math.ceil((new Date(counts.soonest ?? Date.now()).getTime() - Date.now()) / 1000));
  if (counts.account >= TOPUPS_PENDING_PER_ACCOUNT_MAX) {
    return fail(
      "rate_limit_exceeded",
      `This account has ${counts.account} top-ups waiting for payment (at most ${TOPUPS_PENDING_PER_ACCOUNT_MAX}): pay one, or start a new one once one has expired.`,
      { param: "amount_toman", retryAfterS },
    );
  }
  if (counts.address >= TOPUPS_PENDING_PER_ADDRESS_MAX) {
    return fail(
      "rate_limit_exceeded",
      `Too many top-ups are waiting for payment from your network (at most ${TOPUPS_PENDING_PER_ADDRESS_MAX}); try again later.`,
      { retryAfterS },
    );
  }
  return null;
}

/** Appends a reply to the kept ones, dropping the oldest beyond REPLIES_KEPT_MAX. */
function appendReply(raw: RawReply): SQL {
  const json = JSON.stringify(raw ?? null);
  return sql`(CASE WHEN jsonb_array_length(${topups.replies}) >= ${REPLIES_KEPT_MAX} THEN ${topups.replies} - 0 ELSE ${topups.replies} END) || jsonb_build_array(${json}::jsonb)`;
}

function ledgerKey(id: string): string {
  return `pay:${id}`;
}
