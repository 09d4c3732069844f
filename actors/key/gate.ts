/**
 * What a key actor (actor.ts) asks of the cluster's rate limits, apart from how they are kept:
 * permits.ts implements it with permits from each key's partition owner.
 */
import { fail, type Failure } from "../../src/errors.ts";
import { holderNoun } from "../../src/keys/accountLimits.ts";
import type { KeyRecord } from "../../src/keys/store.ts";
import type { PermitReply, RateInfo } from "../protocol.ts";

/** Keys' and accounts' limits by id, as the owner of their partition reads them (KeyStore.holder). */
export interface LimitHolders {
  get(id: string): Promise<KeyRecord | null>;
}

export type Amounts = { requests: number; tokens: number; micro: bigint };

/** A refusal as it travels: the owner's, or this node's own (a Failure). */
export type Refusal = Extract<PermitReply, { ok: false }>["failure"];
export type Verdict = { ok: true; rate?: RateInfo } | { ok: false; failure: Refusal; rate?: RateInfo };

export interface RateGate {
  /** `batch`: a batch line's admission, which takes money from the monthly cap only (no request, no tokens). */
  admit(key: KeyRecord, tokens: number, reserveMicro: bigint, batch?: boolean): Promise<Verdict>;
  /** Money (and tokens) for a stream's extension: refused only by the monthly cap. */
  extend(key: KeyRecord, tokens: number, micro: bigint): Promise<Refusal | null>;
  /** Undoes an admit or an extension that did not go ahead. */
  release(keyId: string, amounts: Amounts): void;
  /** A request settled: its reserve is no longer in flight, `billedMicro` is spent, `tokens` corrects tpm (used − reserved). */
  settled(keyId: string, s: { reserveMicro: bigint; billedMicro: bigint; tokens: number }): void;
}

/** The 429 of a key's or an account's concurrency limit. */
export function concurrencyRefused(holder: Pick<KeyRecord, "id" | "concurrencyMax">): Failure {
  return fail(
    "concurrency_limit_exceeded",
    `Too many concurrent requests for this ${holderNoun(holder)} (limit ${holder.concurrencyMax}).`,
    { retryAfterS: 1 },
  );
}
