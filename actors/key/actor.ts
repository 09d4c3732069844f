/**
 * The key actor: one per API key, owning its concurrency slots and its holds.
 *
 *   admit(ticket):  take a slot (429 when all `concurrencyMax` are taken), then place a hold of
 *                   the ticket's reserve with one conditional UPDATE (402 when the wallet's
 *                   available balance does not cover it). The slot is held until settle.
 *   settle(s):      post the actual cost from the hold, release the rest, write the usage
 *                   record (one transaction), then free the slot, whatever the outcome.
 *
 * Invariant: open holds ≤ concurrencyMax at every moment, because the slot is taken before the
 * first await and given back exactly once per hold. Money does not depend on this actor being
 * unique: the database refuses any hold the wallet cannot cover.
 */
import type { AdmitReply, AdmitTicket, SettleReply, Settlement } from "../protocol.ts";
import type { Db } from "../../src/db/client.ts";
import { fail, type Failure } from "../../src/errors.ts";
import { newId } from "../../src/ids.ts";
import { placeHold, settleHold } from "../../src/ledger/holds.ts";
import { getWallet } from "../../src/ledger/wallets.ts";
import { microToToman } from "../../src/catalog/prices.ts";
import type { KeyRecord, KeyStore } from "../../src/keys/store.ts";

export interface KeyActorDeps {
  db: Db;
  keys: KeyStore;
  /** A hold not settled within this is voided by the sweeper and can no longer be posted. */
  holdTtlMs: number;
  log?: (event: string, fields: Record<string, unknown>) => void;
}

/** Attempts for a settlement that fails on a database error, with doubling backoff. */
export const SETTLE_ATTEMPTS_MAX = 4;
const SETTLE_BACKOFF_MS_FIRST = 50;

export class KeyActor {
  /** holdId → the ticket's request id; its size is the number of slots in use. */
  private readonly open = new Map<string, string>();

  constructor(
    readonly keyId: string,
    private readonly deps: KeyActorDeps,
  ) {}

  get inFlight(): number {
    return this.open.size;
  }

  async admit(ticket: AdmitTicket, key: KeyRecord): Promise<AdmitReply> {
    if (this.open.size >= key.concurrencyMax) {
      return refuse(
        fail("concurrency_limit_exceeded", `Too many concurrent requests for this key (limit ${key.concurrencyMax}).`, {
          retryAfterS: 1,
        }),
      );
    }
    const holdId = newId("hold");
    this.open.set(holdId, ticket.requestId);
    try {
      const placed = await placeHold(this.deps.db, {
        holdId,
        accountId: key.accountId,
        keyId: key.id,
        requestId: ticket.requestId,
        amountMicro: ticket.reserveMicro,
        ttlMs: this.deps.holdTtlMs,
      });
      if (placed) return { ok: true, holdId };
      this.open.delete(holdId);
      return refuse(await this.insufficient(key.accountId, ticket.reserveMicro));
    } catch (error) {
      this.open.delete(holdId);
      this.deps.log?.("admit_failed", { keyId: key.id, error: (error as Error).message });
      return refuse(fail("service_unavailable", "The billing database is unavailable; try again shortly.", { retryAfterS: 1 }));
    }
  }

  private async insufficient(accountId: string, reserveMicro: bigint): Promise<Failure> {
    const wallet = await getWallet(this.deps.db, accountId);
    const available = wallet ? wallet.balanceMicro - wallet.heldMicro : 0n;
    return fail(
      "insufficient_quota",
      `Insufficient balance: this request needs up to ${microToToman(reserveMicro)} toman and ` +
        `${microToToman(available)} toman is available. Top up the wallet, or lower max_tokens.`,
    );
  }

  async settle(s: Settlement): Promise<SettleReply> {
    try {
      for (let attempt = 1; ; attempt++) {
        try {
          const settled = await settleHold(this.deps.db, s);
          return { ok: true, billedMicro: settled.billedMicro, meteredMicro: settled.meteredMicro };
        } catch (error) {
          this.deps.log?.("settle_failed", { keyId: s.keyId, requestId: s.requestId, attempt, error: (error as Error).message });
          if (attempt >= SETTLE_ATTEMPTS_MAX) {
            return refuse(fail("service_unavailable", "The billing database is unavailable; the hold will expire."));
          }
          await Bun.sleep(SETTLE_BACKOFF_MS_FIRST * 2 ** (attempt - 1));
        }
      }
    } finally {
      this.open.delete(s.holdId);
    }
  }
}

function refuse(failure: Failure): { ok: false; failure: Failure } {
  return { ok: false, failure };
}
