/**
 * The messages actors exchange, as zod schemas; types are inferred from them. They are small by
 * design: a ticket names a key, a request and an amount, never a prompt or a completion.
 * Amounts are micro-toman bigints, sent over NATS as decimal strings.
 */
import { z } from "zod";
import type { Rpc, Topic } from "../src/bus/bus.ts";
import { BACKENDS_PER_POOL_MAX } from "../src/config.ts";
import { failureSchema } from "../src/errors.ts";
import { bigintJson } from "../src/json.ts";
import { unitMap, withFlatFields, withUnitMaps } from "../src/units.ts";

const micro = bigintJson;
const units = micro.refine((v) => v >= 0n, "must not be negative");

export const admitTicket = z.object({
  keyId: z.string().min(1).max(64),
  requestId: z.string().min(1).max(128),
  model: z.string().min(1).max(256),
  reserveMicro: units,
  /** Prompt bound + output budget, for tokens-per-minute limits. */
  reserveTokens: z.number().int().nonnegative(),
  /** The reserve came from an exact token count: the key actor may wait for money, then refuse. */
  exact: z.boolean(),
  /** A batch line: it takes no concurrency slot, rpm or tpm of the key or its account (the batch worker bounds lines); money and the monthly cap as any request. */
  batch: z.literal(true).optional(),
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
    /** Its code is one of the closed set (src/errors.ts): a reply with any other is malformed. */
    failure: failureSchema,
    /** The cheap reserve did not fit: ask again with an exact count. */
    exactNeeded: z.boolean().optional(),
    /** What the wallet could hold when it refused: a request may lower its output limit to fit. */
    availableMicro: units.optional(),
    rate: rateInfo.optional(),
  }),
]);
export type AdmitReply = z.infer<typeof admitReply>;

/** The longest anomaly list a settlement carries (every part of a usage, over or under). */
export const USAGE_ANOMALIES_CHARS_MAX = 128;

const settlementFields = z.object({
  keyId: z.string().min(1).max(64),
  requestId: z.string().min(1).max(128),
  holdId: z.string().min(1).max(128),
  /** The admitted reserve: no more than this is charged. */
  reserveMicro: units,
  model: z.string().min(1).max(256),
  operation: z.string().min(1).max(32),
  backend: z.string().max(64).nullable(),
  priceVersionId: z.number().int(),
  /**
   * Units used by unit, each disjoint: for chat, `input` is the prompt tokens not priced as cache
   * reads or writes (absent: none).
   */
  usage: unitMap(units),
  /** Toman per 1M units, by unit: the prices the usage was charged at. */
  prices: unitMap(units),
  /** The vendor-run tool's unit the `hosted_call` units count (`web_search_call`). */
  hostedCallUnit: z.string().max(64).optional(),
  status: z.number().int(),
  durationMs: z.number().int().nonnegative(),
  /**
   * The most that may be charged, below the reserve: a stream cut where its hold could not be
   * extended bills only what was delivered; the rest of what was metered is written off.
   */
  billedMicroMax: units.optional(),
  /** Upstream anomalies (`<part>_over`: clamped, `<part>_under`: raised), comma-separated; absent: none. */
  anomalies: z.string().max(USAGE_ANOMALIES_CHARS_MAX).optional(),
  /** A request that ended early (absent: it ran to its end): who ended it, its output metered and the allowance billed on top. */
  early: z
    .object({
      endedBy: z.enum(["client", "upstream", "gateway"]),
      outputMeteredUnits: z.number().int().nonnegative(),
      outputAllowanceUnits: z.number().int().nonnegative(),
    })
    .optional(),
});
/** A settlement; one of the old shape (flat `inputUnits`, `cacheReadPricePer1m` … fields) is read as the maps. */
export const settlement = z.preprocess(withUnitMaps, settlementFields);
export type Settlement = z.infer<typeof settlement>;

export const settleReply = z.union([
  z.object({ ok: z.literal(true), billedMicro: micro, meteredMicro: micro }),
  z.object({ ok: z.literal(false), failure: failureSchema }),
]);
export type SettleReply = z.infer<typeof settleReply>;

/**
 * Grows an admitted request's reserve (a stream metered live, before its hold runs out), from
 * its lease's room or else by growing the hold from the wallet. Refused when neither can.
 */
export const extendTicket = z.object({
  keyId: z.string().min(1).max(64),
  requestId: z.string().min(1).max(128),
  holdId: z.string().min(1).max(128),
  addMicro: units,
  /** Output tokens the extension covers, for tokens-per-minute limits. */
  addTokens: z.number().int().nonnegative(),
});
export type ExtendTicket = z.infer<typeof extendTicket>;

export const extendReply = z.union([
  z.object({ ok: z.literal(true), reserveMicro: micro }),
  z.object({ ok: z.literal(false), failure: failureSchema }),
]);
export type ExtendReply = z.infer<typeof extendReply>;

export const ADMIT: Rpc<AdmitTicket, AdmitReply> = { name: "key.admit", request: admitTicket, reply: admitReply };
export const SETTLE: Rpc<Settlement, SettleReply> = { name: "key.settle", request: settlement, reply: settleReply, wire: withFlatFields };
export const EXTEND: Rpc<ExtendTicket, ExtendReply> = { name: "key.extend", request: extendTicket, reply: extendReply };

/**
 * Asks every node to give back the unused part of its leases of an account. `fromHost` names the
 * asking node, which keeps its own; a recall without it (a node of the previous release) is
 * answered by every node, the asker's included.
 */
export const walletRecall = z.object({ accountId: z.string(), fromKeyId: z.string(), fromHost: z.string().max(64).optional() });
export type WalletRecall = z.infer<typeof walletRecall>;
export const WALLET_RECALLS: Topic<WalletRecall> = { name: "wallet.recall", schema: walletRecall };

/**
 * What one node's purse of an account holds (asked of every node by /v1/credits): its leases'
 * room not committed to a request (`slackMicro`, the account's money to spend) and the reserves
 * of the requests in flight (`outstandingMicro`); `nodes`, the live nodes the answering node
 * knows of, tells the asker how many answers to wait for.
 */
export const purseAsk = z.object({ accountId: z.string().max(64) });
export type PurseAsk = z.infer<typeof purseAsk>;
export const purseFigures = z.object({ slackMicro: units, outstandingMicro: units, nodes: z.number().int().min(1).max(1_024) });
export type PurseFigures = z.infer<typeof purseFigures>;
export const PURSE_FIGURES: Rpc<PurseAsk, PurseFigures> = { name: "wallet.purse", request: purseAsk, reply: purseFigures };

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
 * One node's pool snapshot, published once a second on `metricsPools`. Rates are over the last
 * interval; EWMAs are the pool actor's own. Never a key secret or message content: keys appear
 * by id and name only. Bounded so that a snapshot stays far below the NATS payload limit.
 */
export const SNAPSHOT_BACKENDS_MAX = 2_000;
export const SNAPSHOT_MODELS_MAX = 1_000;
export const SNAPSHOT_TOP_KEYS_MAX = 20;

export const breakerState = z.enum(["closed", "open", "half_open"]);
export type BreakerState = z.infer<typeof breakerState>;

export const backendSnapshotSchema = z.object({
  model: z.string().max(256),
  backend: z.string().max(64),
  region: z.string().max(32),
  inFlight: z.number().int().nonnegative(),
  /** This node's share of the backend's concurrency cap (the whole cap until quotas split it). */
  concurrencyLimit: z.number().int().nonnegative(),
  /** Peak-EWMA time to first token, ms. */
  ttftEwmaMs: z.number().nonnegative(),
  /** Peak-EWMA time per output token, ms; null until the pool measures it. */
  tpotEwmaMs: z.number().nonnegative().nullable(),
  requestsPerS: z.number().nonnegative(),
  /** Output tokens per second. */
  tokensPerS: z.number().nonnegative(),
  /** Failed upstream attempts / attempts over the interval, 0 – 1. */
  errorRate: z.number().min(0).max(1),
  breaker: breakerState,
  /** This node's fraction of the backend's cap, 0 – 1; null while the cap is not shared out. */
  quotaShare: z.number().min(0).max(1).nullable(),
});
export type BackendSnapshot = z.infer<typeof backendSnapshotSchema>;

export const modelSnapshotSchema = z.object({
  model: z.string().max(256),
  requestsPerS: z.number().nonnegative(),
  errorsPerS: z.number().nonnegative(),
  /** Output tokens per second. */
  tokensPerS: z.number().nonnegative(),
  /** Micro-toman charged per second. */
  spendMicroPerS: z.number().nonnegative(),
  /** Mean time to first token of the interval's streams, ms; null without streams. */
  ttftMs: z.number().nonnegative().nullable(),
});
export type ModelSnapshot = z.infer<typeof modelSnapshotSchema>;

export const keySpendSchema = z.object({
  keyId: z.string().max(64),
  name: z.string().max(256),
  /** Micro-toman charged since this node started. */
  spentMicro: units,
});
export type KeySpend = z.infer<typeof keySpendSchema>;

export const poolSnapshot = z.object({
  node: z.string().min(1).max(128),
  /** Unix ms when the snapshot was taken. */
  atMs: z.number().int(),
  intervalMs: z.number().int().positive(),
  backends: z.array(backendSnapshotSchema).max(SNAPSHOT_BACKENDS_MAX),
  models: z.array(modelSnapshotSchema).max(SNAPSHOT_MODELS_MAX),
  topKeys: z.array(keySpendSchema).max(SNAPSHOT_TOP_KEYS_MAX),
});
export type PoolSnapshot = z.infer<typeof poolSnapshot>;
export const POOL_SNAPSHOTS: Topic<PoolSnapshot> = { name: "metrics.pools", schema: poolSnapshot };

/**
 * A stream's live meter, for operators (`gw.v1.meter.<model>`): published at most once per
 * METER_EVENT_INTERVAL_MS per stream and once at its end, never per token.
 */
export const meterEvent = z.object({
  requestId: z.string(),
  keyId: z.string(),
  model: z.string(),
  backend: z.string().nullable(),
  /** Output tokens delivered so far (the upstream's running count, or our own upper bound); on the last event, what was billed for. */
  outputTokens: z.number().int().nonnegative(),
  /** Output tokens the request's hold covers now. */
  coveredTokens: z.number().int().nonnegative(),
  reserveMicro: micro,
  /** Set on the last event: how the stream ended. */
  end: z.enum(["done", "length_cut", "failed", "client_gone"]).optional(),
});
export type MeterEvent = z.infer<typeof meterEvent>;
export const METER_EVENTS: Topic<MeterEvent> = { name: "meter", schema: meterEvent };

/** A model's pool was changed at run time: every node re-reads its row. */
export const poolEvent = z.object({ model: z.string().min(1).max(256) });
export type PoolEvent = z.infer<typeof poolEvent>;
export const POOL_EVENTS: Topic<PoolEvent> = { name: "pool.events", schema: poolEvent };

/** Backends one node reports on in one statistics message: one pool's, all of them. */
export const POOL_STATS_BACKENDS_MAX = BACKENDS_PER_POOL_MAX;

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
  z.object({ ok: z.literal(false), failure: failureSchema }),
]);
export type GrantReply = z.infer<typeof grantReply>;
export const GRANT: Rpc<GrantRequest, GrantReply> = { name: "key.grant", request: grantRequest, reply: grantReply };

/** Amounts of a key's budget: requests and tokens of its per-minute limits, micro-toman of its monthly cap. */
const permitAmounts = z.object({ requests: z.number().int().nonnegative(), tokens: z.number().int().nonnegative(), micro: units });

/**
 * A node asks a key's partition owner for rate and spend permits (actors/key/permits.ts): `need`
 * is what the admission at hand needs (refused unless all of it fits), `want` what the node's
 * recent use calls for. It reports what the owner must count: its reserves in flight for the key
 * and what it billed since its last report (keys with a monthly cap), tokens it used beyond its
 * permits, and after a takeover what it was granted in the last minute (`history`).
 */
export const permitRequest = z.object({
  keyId: z.string().min(1).max(64),
  node: z.string().min(1).max(128),
  need: permitAmounts,
  want: permitAmounts,
  outstandingMicro: units,
  billedMicro: units,
  overTokens: z.number().int().nonnegative(),
  history: z.object({ requests: z.number().int().nonnegative(), tokens: z.number().int().nonnegative() }).optional(),
});
export type PermitRequest = z.infer<typeof permitRequest>;

export const permitReply = z.union([
  /** Permits for `ttlMs` from the ask; `rate` is the owner's windows after the grant. */
  z.object({
    ok: z.literal(true),
    requests: z.number().int().nonnegative(),
    tokens: z.number().int().nonnegative(),
    micro: units,
    ttlMs: z.number().int().positive(),
    rate: rateInfo.optional(),
  }),
  z.object({ ok: z.literal(false), failure: failureSchema, rate: rateInfo.optional() }),
]);
export type PermitReply = z.infer<typeof permitReply>;
export const PERMITS: Rpc<PermitRequest, PermitReply> = { name: "key.permits", request: permitRequest, reply: permitReply };

/** A partition was taken (`owner` is the node) or given back (`owner` is empty: claim it now). */
export const partitionEvent = z.object({ partition: z.number().int().nonnegative(), owner: z.string(), fenceToken: micro });
export type PartitionEvent = z.infer<typeof partitionEvent>;
export const PARTITION_EVENTS: Topic<PartitionEvent> = { name: "partitions", schema: partitionEvent };
