/**
 * An account's operator limits: ceilings no key of the account can escape (docs/keys.md).
 *
 *   concurrency_max, rpm, tpm   summed over every key of the account on every node: the account
 *                               is a limit holder of its own, admitted by the same slots and
 *                               permits as a key (actors/key/capacity.ts, permits.ts), owned by
 *                               the partition of the account's id.
 *   keys_max                    live (unrevoked, unexpired) keys at once.
 *   key_*_max                   what a key created in the console may ask for; its limits
 *                               default to them.
 *
 * A column left null is the named default below, so a default changed here applies to every
 * account that never set its own.
 */
import { z } from "zod";

/** PostgreSQL's `integer`: every limit column holds at most this. */
export const INT4_MAX = 2_147_483_647;
/** A key's concurrency when its creator names none. */
export const CONCURRENCY_MAX_DEFAULT = 32;
/** The largest concurrency an operator may give one key. */
export const CONCURRENCY_MAX_LIMIT = 10_000;
/** Above what the console's keys can reach by default (keys_max × their ceiling, 1,600): it binds keys an operator made larger. */
export const ACCOUNT_CONCURRENCY_MAX_DEFAULT = 2_048;
/** None: the keys' own limits, at most keys_max × the console's ceilings, bound it. */
export const ACCOUNT_RPM_DEFAULT: number | null = null;
export const ACCOUNT_TPM_DEFAULT: number | null = null;
export const ACCOUNT_KEYS_MAX_DEFAULT = 50;
export const CONSOLE_KEY_CONCURRENCY_MAX_DEFAULT = CONCURRENCY_MAX_DEFAULT;
export const CONSOLE_KEY_RPM_MAX_DEFAULT = 10_000;
export const CONSOLE_KEY_TPM_MAX_DEFAULT = 2_000_000;
/** The largest an operator may set an account's concurrency or its keys' number to. */
export const ACCOUNT_CONCURRENCY_MAX_LIMIT = 1_000_000;
export const ACCOUNT_KEYS_MAX_LIMIT = 1_000_000;

export interface AccountLimits {
  concurrencyMax: number;
  rpm: number | null;
  tpm: number | null;
  keysMax: number;
  keyConcurrencyMax: number;
  keyRpmMax: number;
  keyTpmMax: number;
}

/** The columns as stored: null is the default. */
export type AccountLimitColumns = { [K in keyof AccountLimits]: number | null };

export function resolveLimits(c: AccountLimitColumns): AccountLimits {
  return {
    concurrencyMax: c.concurrencyMax ?? ACCOUNT_CONCURRENCY_MAX_DEFAULT,
    rpm: c.rpm ?? ACCOUNT_RPM_DEFAULT,
    tpm: c.tpm ?? ACCOUNT_TPM_DEFAULT,
    keysMax: c.keysMax ?? ACCOUNT_KEYS_MAX_DEFAULT,
    keyConcurrencyMax: c.keyConcurrencyMax ?? CONSOLE_KEY_CONCURRENCY_MAX_DEFAULT,
    keyRpmMax: c.keyRpmMax ?? CONSOLE_KEY_RPM_MAX_DEFAULT,
    keyTpmMax: c.keyTpmMax ?? CONSOLE_KEY_TPM_MAX_DEFAULT,
  };
}

/** Account ids (src/ledger/wallets.ts); key ids start `key_`, so one partition space serves both. */
export function isAccountId(id: string): boolean {
  return id.startsWith("acc_");
}

/** "account" or "key": whose limit a refusal names. */
export function holderNoun(holder: { id: string }): "account" | "key" {
  return isAccountId(holder.id) ? "account" : "key";
}

const bounded = (max: number) => z.number().int().min(1).max(max).nullable().optional();

/** `limits` of PATCH /admin/accounts/{id}: each a number, or null for its default. */
export const accountLimitsBody = z
  .strictObject({
    concurrency_max: bounded(ACCOUNT_CONCURRENCY_MAX_LIMIT),
    rpm: bounded(INT4_MAX),
    tpm: bounded(INT4_MAX),
    keys_max: bounded(ACCOUNT_KEYS_MAX_LIMIT),
    key_concurrency_max: bounded(ACCOUNT_CONCURRENCY_MAX_LIMIT),
    key_rpm_max: bounded(INT4_MAX),
    key_tpm_max: bounded(INT4_MAX),
  })
  .refine((body) => Object.values(body).some((v) => v !== undefined), "name at least one limit");

export type AccountLimitsPatch = Partial<AccountLimitColumns>;

export function limitsPatchOf(body: z.infer<typeof accountLimitsBody>): AccountLimitsPatch {
  return {
    concurrencyMax: body.concurrency_max,
    rpm: body.rpm,
    tpm: body.tpm,
    keysMax: body.keys_max,
    keyConcurrencyMax: body.key_concurrency_max,
    keyRpmMax: body.key_rpm_max,
    keyTpmMax: body.key_tpm_max,
  };
}

/** The account's limits as the admin API shows them (the defaults resolved). */
export function limitsObject(limits: AccountLimits) {
  return {
    concurrency_max: limits.concurrencyMax,
    rpm: limits.rpm,
    tpm: limits.tpm,
    keys_max: limits.keysMax,
    key_concurrency_max: limits.keyConcurrencyMax,
    key_rpm_max: limits.keyRpmMax,
    key_tpm_max: limits.keyTpmMax,
  };
}
