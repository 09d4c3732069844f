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

/** A model's pool was changed at run time: every node re-reads its row. */
export const poolEvent = z.object({ model: z.string().min(1).max(256) });
export type PoolEvent = z.infer<typeof poolEvent>;
export const POOL_EVENTS: Topic<PoolEvent> = { name: "pool.events", schema: poolEvent };

/** Backends one node reports on in one statistics message. */
export const POOL_STATS_BACKENDS_MAX = 64;

/** One node's estimates of one model's backends, each second, so every node learns from all traffic. */
export const poolStats = z.object({
  node: z.string().min(1).max(64),
  model: z.string().min(1).max(256),
  backends: z
    .array(
      z.object({
        name: z.string().min(1).max(64),
        ttftMs: z.number().nonnegative(),
        tpotMs: z.number().nonnegative(),
        /** Replies and failures observed since the last message. */
        samples: z.number().int().positive(),
      }),
    )
    .max(POOL_STATS_BACKENDS_MAX),
});
export type PoolStats = z.infer<typeof poolStats>;
export const POOL_STATS: Topic<PoolStats> = { name: "pool.stats", schema: poolStats };
