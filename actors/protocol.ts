/**
 * The messages actors exchange, as zod schemas; types are inferred from them. They are small by
 * design: a ticket names a key, a request and an amount, never a prompt or a completion.
 * Amounts are micro-toman bigints, sent over NATS as decimal strings.
 */
import { z } from "zod";
import type { Rpc, Topic } from "../src/bus/bus.ts";
import { bigintJson } from "../src/json.ts";

const micro = bigintJson;
const units = micro.refine((v) => v >= 0n, "must not be negative");

const failure = z.object({
  code: z.string(),
  message: z.string(),
  param: z.string().nullable().optional(),
  retryAfterS: z.number().optional(),
});

export const admitTicket = z.object({
  keyId: z.string().min(1).max(64),
  requestId: z.string().min(1).max(128),
  model: z.string().min(1).max(256),
  reserveMicro: units,
  /** Prompt bound + output budget, for tokens-per-minute limits. */
  reserveTokens: z.number().int().nonnegative(),
  /** The reserve came from an exact token count: the key actor may wait for money, then refuse. */
  exact: z.boolean(),
});
export type AdmitTicket = z.infer<typeof admitTicket>;

/** What the x-ratelimit-* headers report, for the limits the key has. */
export const rateInfo = z.object({
  limitRequests: z.number().int().optional(),
  remainingRequests: z.number().int().optional(),
  resetRequestsS: z.number().optional(),
  limitTokens: z.number().int().optional(),
  remainingTokens: z.number().int().optional(),
  resetTokensS: z.number().optional(),
});
export type RateInfo = z.infer<typeof rateInfo>;

export const admitReply = z.union([
  z.object({ ok: z.literal(true), holdId: z.string(), rate: rateInfo.optional() }),
  z.object({
    ok: z.literal(false),
    failure,
    /** The cheap reserve did not fit: ask again with an exact count. */
    exactNeeded: z.boolean().optional(),
    rate: rateInfo.optional(),
  }),
]);
export type AdmitReply = z.infer<typeof admitReply>;

export const settlement = z.object({
  keyId: z.string().min(1).max(64),
  requestId: z.string().min(1).max(128),
  holdId: z.string().min(1).max(128),
  /** The admitted reserve: no more than this is charged. */
  reserveMicro: units,
  model: z.string().min(1).max(256),
  operation: z.string().min(1).max(32),
  backend: z.string().max(64).nullable(),
  priceVersionId: z.number().int(),
  inputUnits: units,
  outputUnits: units,
  inputPricePer1m: units,
  outputPricePer1m: units,
  status: z.number().int(),
  durationMs: z.number().int().nonnegative(),
});
export type Settlement = z.infer<typeof settlement>;

export const settleReply = z.union([
  z.object({ ok: z.literal(true), billedMicro: micro, meteredMicro: micro }),
  z.object({ ok: z.literal(false), failure }),
]);
export type SettleReply = z.infer<typeof settleReply>;

export const ADMIT: Rpc<AdmitTicket, AdmitReply> = { name: "key.admit", request: admitTicket, reply: admitReply };
export const SETTLE: Rpc<Settlement, SettleReply> = { name: "key.settle", request: settlement, reply: settleReply };

/** Asks every key actor of an account, on every node, to give back the unused part of its lease. */
export const walletRecall = z.object({ accountId: z.string(), fromKeyId: z.string() });
export type WalletRecall = z.infer<typeof walletRecall>;
export const WALLET_RECALLS: Topic<WalletRecall> = { name: "wallet.recall", schema: walletRecall };

export const priceEvent = z.object({ versionId: z.number().int() });
export type PriceEvent = z.infer<typeof priceEvent>;
export const PRICE_EVENTS: Topic<PriceEvent> = { name: "prices", schema: priceEvent };

export const keyEvent = z.object({
  keyId: z.string(),
  kind: z.enum(["revoked", "limits_changed"]),
});
export type KeyEvent = z.infer<typeof keyEvent>;
export const KEY_EVENTS: Topic<KeyEvent> = { name: "key.events", schema: keyEvent };

/**
 * A node asks a key's partition owner for its share of the key's concurrency slots (Doorman):
 * `want` is what its recent use calls for, `held` what it holds now (from this owner or a
 * previous one), `inUse` how many of them its requests occupy.
 */
export const grantRequest = z.object({
  keyId: z.string().min(1).max(64),
  node: z.string().min(1).max(128),
  want: z.number().int().nonnegative(),
  held: z.number().int().nonnegative(),
  inUse: z.number().int().nonnegative(),
});
export type GrantRequest = z.infer<typeof grantRequest>;

export const grantReply = z.union([
  /** `slots` for `ttlMs` from the ask; settlements carry `fenceToken`, the owner epoch's token. */
  z.object({ ok: z.literal(true), slots: z.number().int().nonnegative(), ttlMs: z.number().int().positive(), fenceToken: micro }),
  z.object({ ok: z.literal(false), failure }),
]);
export type GrantReply = z.infer<typeof grantReply>;
export const GRANT: Rpc<GrantRequest, GrantReply> = { name: "key.grant", request: grantRequest, reply: grantReply };

/** A partition was taken (`owner` is the node) or given back (`owner` is empty: claim it now). */
export const partitionEvent = z.object({ partition: z.number().int().nonnegative(), owner: z.string(), fenceToken: micro });
export type PartitionEvent = z.infer<typeof partitionEvent>;
export const PARTITION_EVENTS: Topic<PartitionEvent> = { name: "partitions", schema: partitionEvent };
