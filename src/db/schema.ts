/**
 * The database schema. Money columns are bigint micro-toman; the CHECK constraints here, not the
 * code, are what make overspending impossible: a wallet's available balance (balance − held)
 * never goes below zero, and a hold never posts more than it holds.
 *
 * Migrations in migrations/ are generated from this file with `bun run db:generate`.
 */
import { sql } from "drizzle-orm";
import {
  bigint,
  customType,
  bigserial,
  boolean,
  check,
  date,
  index,
  integer,
  pgTable,
  primaryKey,
  serial,
  text,
  jsonb,
  timestamp,
  uniqueIndex,
} from "drizzle-orm/pg-core";

const micro = (name: string) => bigint(name, { mode: "bigint" });
const createdAt = () => timestamp("created_at", { withTimezone: true }).notNull().defaultNow();

export const accounts = pgTable("accounts", {
  id: text("id").primaryKey(),
  name: text("name").notNull(),
  /** The customer's mobile number in E.164 (`+989121234567`), the account area's sign-in; null: made by an operator. */
  phone: text("phone").unique(),
  /** Below this settled balance the customer is alerted (balance-alerts.ts); null: no alert. */
  lowBalanceThresholdMicro: bigint("low_balance_threshold_micro", { mode: "bigint" }),
  /**
   * Operator limits over every key of the account (src/keys/accountLimits.ts); null: the named default.
   * Concurrency, requests and tokens per minute, summed over the account's keys on every node.
   */
  concurrencyMax: integer("concurrency_max"),
  rpm: integer("rpm"),
  tpm: integer("tpm"),
  /** Most live (unrevoked, unexpired) keys the account may have. */
  keysMax: integer("keys_max"),
  /** Ceilings of the limits of a key created in the console. */
  keyConcurrencyMax: integer("key_concurrency_max"),
  keyRpmMax: integer("key_rpm_max"),
  keyTpmMax: integer("key_tpm_max"),
  createdAt: createdAt(),
});

export const wallets = pgTable(
  "wallets",
  {
    accountId: text("account_id")
      .primaryKey()
      .references(() => accounts.id),
    balanceMicro: micro("balance_micro").notNull().default(sql`0`),
    heldMicro: micro("held_micro").notNull().default(sql`0`),
    updatedAt: timestamp("updated_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    check("wallets_held_non_negative", sql`${t.heldMicro} >= 0`),
    check("wallets_available_non_negative", sql`${t.balanceMicro} - ${t.heldMicro} >= 0`),
  ],
);

export const apiKeys = pgTable(
  "api_keys",
  {
    id: text("id").primaryKey(),
    accountId: text("account_id")
      .notNull()
      .references(() => accounts.id),
    name: text("name").notNull(),
    /** HMAC-SHA256 of the secret under KEY_PEPPER, hex. The secret itself is never stored. */
    hash: text("hash").notNull().unique(),
    /** `sk-dvz-…AbCd`: enough to recognise a key in a list, useless to call with. */
    display: text("display").notNull(),
    concurrencyMax: integer("concurrency_max").notNull(),
    rpm: integer("rpm"),
    tpm: integer("tpm"),
    /** Most the key may spend in a calendar month (UTC), micro-toman; null: no cap. */
    monthlySpendCapMicro: bigint("monthly_spend_cap_micro", { mode: "bigint" }),
    /** `in-country`: this key's traffic never leaves the country; null: any backend. */
    residency: text("residency"),
    /** Catalog model ids the key may call; null: any (src/keys/restrictions.ts). */
    allowedModels: text("allowed_models").array(),
    /** IPv4/IPv6 addresses or CIDR blocks the key may be used from; null: any. */
    allowedIps: text("allowed_ips").array(),
    createdAt: createdAt(),
    revokedAt: timestamp("revoked_at", { withTimezone: true }),
    /** After this instant the key is refused (checked on every request, cached or not); null: never. */
    expiresAt: timestamp("expires_at", { withTimezone: true }),
    /** When the key was last used, written in batches (keys/lastUse.ts), so within LAST_USE_FLUSH_MS. */
    lastUsedAt: timestamp("last_used_at", { withTimezone: true }),
    /** Bumped by every change, so that nodes can poll for revocations and new limits. */
    updatedAt: timestamp("updated_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    index("api_keys_account_idx").on(t.accountId),
    index("api_keys_updated_idx").on(t.updatedAt),
    check("api_keys_residency", sql`${t.residency} IS NULL OR ${t.residency} = 'in-country'`),
  ],
);

export const models = pgTable("models", {
  id: text("id").primaryKey(),
  operation: text("operation").notNull(),
  vendor: text("vendor").notNull(),
  contextWindow: integer("context_window").notNull(),
  openWeight: boolean("open_weight").notNull(),
  listing: integer("listing").notNull(),
  /** Other names of the model (dated ids, `-latest`, short names), each resolving to it on every route. */
  aliases: jsonb("aliases").$type<string[]>().notNull().default(sql`'[]'::jsonb`),
  outputMax: integer("output_max"),
  /** The wire capabilities, as catalog/file.ts's schema writes them (checked on read). */
  capabilities: jsonb("capabilities").notNull().default(sql`'{}'::jsonb`),
  /** Retired: the model answers 410 naming its successor. */
  retiredAt: timestamp("retired_at", { withTimezone: true }),
  successor: text("successor"),
  /** Where the prices were read (pages and dates, or why none). */
  source: jsonb("source"),
  createdAt: createdAt(),
});

export const exchangeRates = pgTable("exchange_rates", {
  id: serial("id").primaryKey(),
  tomanPerUsd: bigint("toman_per_usd", { mode: "bigint" }).notNull(),
  effectiveAt: timestamp("effective_at", { withTimezone: true }).notNull(),
  createdAt: createdAt(),
});

/** One version per exchange rate: every usage record names the version it was charged at. */
export const priceVersions = pgTable("price_versions", {
  id: serial("id").primaryKey(),
  rateId: integer("rate_id")
    .notNull()
    .references(() => exchangeRates.id),
  effectiveAt: timestamp("effective_at", { withTimezone: true }).notNull(),
  createdAt: createdAt(),
});

export const prices = pgTable(
  "prices",
  {
    versionId: integer("version_id")
      .notNull()
      .references(() => priceVersions.id),
    modelId: text("model_id")
      .notNull()
      .references(() => models.id),
    /** input_token, output_token, character, audio_second, image_<size>_<quality>, … */
    unit: text("unit").notNull(),
    /** The vendor list price, USD per 1M units, as an exact decimal string. */
    usdPer1m: text("usd_per_1m").notNull(),
    /** round(USD × rate): toman per 1M units, so cost in micro-toman = units × this. */
    tomanPer1m: bigint("toman_per_1m", { mode: "bigint" }).notNull(),
  },
  (t) => [primaryKey({ columns: [t.versionId, t.modelId, t.unit] }), check("prices_non_negative", sql`${t.tomanPer1m} >= 0`)],
);

/**
 * Posted, append-only double-entry transfers between ledger accounts (`wallet:<id>`, `revenue`,
 * `payments`, `write_off`). The reference is the idempotency key.
 */
export const ledgerTransfers = pgTable(
  "ledger_transfers",
  {
    id: bigserial("id", { mode: "bigint" }).primaryKey(),
    reference: text("reference").notNull().unique(),
    debitAccount: text("debit_account").notNull(),
    creditAccount: text("credit_account").notNull(),
    amountMicro: micro("amount_micro").notNull(),
    kind: text("kind").notNull(),
    memo: text("memo"),
    createdAt: createdAt(),
  },
  (t) => [
    check("ledger_transfers_positive", sql`${t.amountMicro} > 0`),
    check("ledger_transfers_two_sides", sql`${t.debitAccount} <> ${t.creditAccount}`),
    index("ledger_transfers_debit_idx").on(t.debitAccount),
    index("ledger_transfers_credit_idx").on(t.creditAccount),
  ],
);

/**
 * Two-phase holds (after TigerBeetle): amounts reserved against a wallet, posted in parts (each
 * usage record posts once), then closed, releasing what was not posted. A lease is one hold that
 * admits many requests of the account's keys on one node (`key_id`: the key whose request opened it). The `held` of a wallet is Σ (amount − posted) over its
 * pending holds.
 */
export const holds = pgTable(
  "holds",
  {
    id: text("id").primaryKey(),
    accountId: text("account_id")
      .notNull()
      .references(() => accounts.id),
    keyId: text("key_id").notNull(),
    requestId: text("request_id").notNull(),
    amountMicro: micro("amount_micro").notNull(),
    postedMicro: micro("posted_micro").notNull().default(sql`0`),
    status: text("status").notNull(),
    deadline: timestamp("deadline", { withTimezone: true }).notNull(),
    createdAt: createdAt(),
  },
  (t) => [
    check("holds_amount_non_negative", sql`${t.amountMicro} >= 0`),
    check("holds_posted_within_amount", sql`${t.postedMicro} >= 0 AND ${t.postedMicro} <= ${t.amountMicro}`),
    check("holds_status", sql`${t.status} IN ('pending', 'posted', 'voided', 'expired')`),
    index("holds_pending_deadline_idx").on(t.deadline).where(sql`${t.status} = 'pending'`),
  ],
);

export const usageRecords = pgTable(
  "usage_records",
  {
    id: bigserial("id", { mode: "bigint" }).primaryKey(),
    requestId: text("request_id").notNull().unique(),
    accountId: text("account_id").notNull(),
    keyId: text("key_id").notNull(),
    /** The hold (lease) the charge was posted from. Not indexed: only the audit groups by it,
     * and every index is paid by each group-committed insert. */
    holdId: text("hold_id").notNull(),
    model: text("model").notNull(),
    operation: text("operation").notNull(),
    backend: text("backend"),
    priceVersionId: integer("price_version_id").notNull(),
    inputUnits: bigint("input_units", { mode: "bigint" }).notNull(),
    outputUnits: bigint("output_units", { mode: "bigint" }).notNull(),
    inputPricePer1m: bigint("input_price_per_1m", { mode: "bigint" }).notNull(),
    outputPricePer1m: bigint("output_price_per_1m", { mode: "bigint" }).notNull(),
    /** Prompt tokens read from the vendor's cache (a part of the prompt not in input_units), at their price. */
    cacheReadUnits: bigint("cache_read_units", { mode: "bigint" }).notNull().default(sql`0`),
    cacheReadPricePer1m: bigint("cache_read_price_per_1m", { mode: "bigint" }).notNull().default(sql`0`),
    /** Prompt tokens written to the vendor's cache (Anthropic), at their price. */
    cacheWriteUnits: bigint("cache_write_units", { mode: "bigint" }).notNull().default(sql`0`),
    cacheWritePricePer1m: bigint("cache_write_price_per_1m", { mode: "bigint" }).notNull().default(sql`0`),
    /** Prompt tokens written to the vendor's cache for an hour (Anthropic's 1-hour writes), at their price; not in cache_write_units. */
    cacheWrite1hUnits: bigint("cache_write_1h_units", { mode: "bigint" }).notNull().default(sql`0`),
    cacheWrite1hPricePer1m: bigint("cache_write_1h_price_per_1m", { mode: "bigint" }).notNull().default(sql`0`),
    /** Calls of a vendor-run tool (web search), at its per-call price; `hosted_call_unit` names the unit (`web_search_call`). */
    hostedCallUnits: bigint("hosted_call_units", { mode: "bigint" }).notNull().default(sql`0`),
    hostedCallPricePer1m: bigint("hosted_call_price_per_1m", { mode: "bigint" }).notNull().default(sql`0`),
    hostedCallUnit: text("hosted_call_unit"),
    /** What the usage is worth at the recorded prices. */
    meteredMicro: micro("metered_micro").notNull(),
    /** What was charged: metered, capped by the hold; the difference went to write-off. */
    billedMicro: micro("billed_micro").notNull(),
    status: integer("status").notNull(),
    durationMs: integer("duration_ms").notNull(),
    /** The key partition and the fencing token of the owner epoch it was settled under (null: one node). */
    partition: integer("partition"),
    fenceToken: bigint("fence_token", { mode: "bigint" }),
    /** When the request was admitted, on the admitting node's clock: what the fencing rule judges (src/ledger/fence.ts). */
    admittedAt: timestamp("admitted_at", { withTimezone: true, mode: "string" }),
    /**
     * Upstream anomalies: the parts of its usage report outside the request's bounds, clamped
     * (`<part>_over`) or raised (`<part>_under`), comma-separated; null when the report was within them.
     */
    anomalies: text("anomalies"),
    /**
     * A request that ended early: who ended it (`client`, `upstream`, `gateway`), and of its billed
     * output the units metered until then and the allowance billed on top (a cut stream's unseen
     * tokens, a hung-up whole reply's time); null for a request that ran to its end.
     */
    endedBy: text("ended_by"),
    outputMeteredUnits: integer("output_metered_units"),
    outputAllowanceUnits: integer("output_allowance_units"),
    createdAt: createdAt(),
  },
  (t) => [
    index("usage_records_key_idx").on(t.keyId, t.createdAt),
    index("usage_records_account_idx").on(t.accountId, t.createdAt),
    check("usage_records_billed_within_metered", sql`${t.billedMicro} >= 0 AND ${t.billedMicro} <= ${t.meteredMicro}`),
  ],
);

/**
 * Each model's backends as changed at run time (PUT /admin/pools/{model}); a row here overrides
 * the pools file. Secrets are never stored: a backend names the environment variable that holds
 * its key.
 */
export const pools = pgTable("pools", {
  model: text("model").primaryKey(),
  backends: jsonb("backends").notNull(),
  /** Chat fields the pool enables and their prices (src/config.ts `paidFieldsSchema`); null: none. */
  paidFields: jsonb("paid_fields"),
  updatedAt: timestamp("updated_at", { withTimezone: true }).notNull().defaultNow(),
});

const bytea = customType<{ data: Uint8Array; driverData: Uint8Array }>({ dataType: () => "bytea" });

/**
 * Generated media served from the gateway's own origin for a bounded time (image URLs), so no
 * upstream URL reaches a client and any node behind a load balancer can serve it.
 */
export const media = pgTable(
  "media",
  {
    id: text("id").primaryKey(),
    contentType: text("content_type").notNull(),
    body: bytea("body").notNull(),
    expiresAt: timestamp("expires_at", { withTimezone: true }).notNull(),
    createdAt: createdAt(),
  },
  (t) => [index("media_expires_idx").on(t.expiresAt)],
);

/**
 * Who owns each key partition, by fencing token: the JetStream KV revision of the lease that
 * began the owner's tenure. A new owner raises the token here before it acts. The ledger refuses
 * (bills nothing from) a settlement only when another node has owned the partition since its
 * token, that is a token below `owner_since_token`, except one of the previous owner posted
 * within FENCE_GRACE_MS of the takeover (database clock): usage settled before the takeover that
 * was still on its way through the usage stream. A node that takes its own partition again
 * (after NATS came back) keeps its run, so its older settlements still post.
 */
export const keyPartitions = pgTable(
  "key_partitions",
  {
    partition: integer("partition").primaryKey(),
    fenceToken: bigint("fence_token", { mode: "bigint" }).notNull().default(sql`0`),
    /** The first token of the current owner's run of tenures (its takeover; re-takes of its own keep it). */
    ownerSinceToken: bigint("owner_since_token", { mode: "bigint" }).notNull().default(sql`0`),
    /** The first token of the previous owner's run (0: none). */
    previousFenceToken: bigint("previous_fence_token", { mode: "bigint" }).notNull().default(sql`0`),
    owner: text("owner").notNull(),
    /** When the current owner's run began (its takeover from another node). */
    acquiredAt: timestamp("acquired_at", { withTimezone: true }).notNull().defaultNow(),
    /** When the previous owner's run began: the takeover that ended every older run. */
    previousAcquiredAt: timestamp("previous_acquired_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [check("key_partitions_fence_non_negative", sql`${t.fenceToken} >= 0`)],
);

/**
 * Wallet top-ups paid through a payment provider (src/payments/topups.ts). A row is created
 * before the provider is asked, so its id travels as the order id; the wallet is credited only
 * in the transaction that moves it to `verified`, through the ledger reference `topup:pay:<id>`.
 * `claim_until` is the deadline of the one verify in flight; `attempts` fences a stale claim.
 */
export const TOPUP_STATES = ["created", "redirected", "verifying", "verified", "failed", "expired", "needs_review", "reversed"] as const;

export const topups = pgTable(
  "topups",
  {
    id: text("id").primaryKey(),
    /** The account recorded when the top-up was requested: the only one it can ever credit. */
    accountId: text("account_id")
      .notNull()
      .references(() => accounts.id),
    provider: text("provider").notNull(),
    /** The requested amount: what is credited (the provider's fee is recorded, never deducted). */
    amountMicro: micro("amount_micro").notNull(),
    state: text("state").notNull(),
    authority: text("authority").unique(),
    refId: text("ref_id"),
    /** As the provider masks it (`502229******5995`). */
    cardPan: text("card_pan"),
    cardHash: text("card_hash"),
    feeMicro: micro("fee_micro"),
    /** Why the top-up is where it is, in words, when that is not plain success. */
    reason: text("reason"),
    /** The provider's replies, newest last, each cut to a bounded size. */
    replies: jsonb("replies").notNull().default(sql`'[]'::jsonb`),
    attempts: integer("attempts").notNull().default(0),
    claimUntil: timestamp("claim_until", { withTimezone: true }),
    /** When a callback or a customer's check last made a provider call about it (PAYMENT_ASK_INTERVAL_MS). */
    askedAt: timestamp("asked_at", { withTimezone: true }),
    /** The address the customer asked for it from (as the sign-in limits count it), for the pending cap per address. */
    clientAddress: text("client_address"),
    expiresAt: timestamp("expires_at", { withTimezone: true }).notNull(),
    verifiedAt: timestamp("verified_at", { withTimezone: true }),
    createdAt: createdAt(),
    updatedAt: timestamp("updated_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    check("topups_amount_positive", sql`${t.amountMicro} > 0`),
    check("topups_fee_non_negative", sql`${t.feeMicro} IS NULL OR ${t.feeMicro} >= 0`),
    check(
      "topups_state",
      sql`${t.state} IN ('created', 'redirected', 'verifying', 'verified', 'failed', 'expired', 'needs_review', 'reversed')`,
    ),
    uniqueIndex("topups_provider_ref_idx").on(t.provider, t.refId),
    index("topups_state_idx").on(t.state, t.updatedAt),
    index("topups_account_idx").on(t.accountId, t.createdAt),
    index("topups_address_idx").on(t.clientAddress, t.state),
  ],
);

/**
 * Usage records the database refused with a data or constraint error (SQLSTATE classes 22, 23),
 * or that the usage stream delivered USAGE_DELIVERIES_MAX times without their being posted.
 * The record is kept as the JSON text it arrived as (a NUL in it would be refused by jsonb);
 * its charge was written off (transfer `deadletter:<request id>`, kind dead_letter) until an
 * operator replays it, which posts it by request id and reverses the write-off.
 */
export const usageDeadLetters = pgTable(
  "usage_dead_letters",
  {
    id: bigserial("id", { mode: "bigint" }).primaryKey(),
    requestId: text("request_id").notNull().unique(),
    accountId: text("account_id").notNull(),
    holdId: text("hold_id").notNull(),
    record: text("record").notNull(),
    reason: text("reason").notNull(),
    /** The database's SQLSTATE; null when dead-lettered for its deliveries. */
    sqlState: text("sql_state"),
    /**
     * `writer` (embedded), `consumer` (usage stream), `deliveries` (max_deliver reached) or
     * `malformed` (a message on the usage subject that is no batch of records: no account, no
     * hold, nothing to replay; its request id is `malformed:<stream sequence>:<hash>`).
     */
    source: text("source").notNull(),
    /** What its hold would have been charged, written off while it is dead. */
    writtenOffMicro: micro("written_off_micro").notNull().default(sql`0`),
    status: text("status").notNull().default("dead"),
    replayedAt: timestamp("replayed_at", { withTimezone: true }),
    createdAt: createdAt(),
  },
  (t) => [
    check("usage_dead_letters_written_off_non_negative", sql`${t.writtenOffMicro} >= 0`),
    check("usage_dead_letters_status", sql`${t.status} IN ('dead', 'replayed')`),
    check("usage_dead_letters_source", sql`${t.source} IN ('writer', 'consumer', 'deliveries', 'malformed')`),
    index("usage_dead_letters_dead_idx").on(t.createdAt).where(sql`${t.status} = 'dead'`),
  ],
);

/**
 * One-time sign-in codes of the account area. Only an HMAC of the code under the console secret,
 * bound to the phone, is stored. `tries` counts wrong tries; the sum over a phone's codes of the
 * last day caps guessing across resends, and rows double as the resend log per phone and address.
 */
export const otpCodes = pgTable(
  "otp_codes",
  {
    id: text("id").primaryKey(),
    phone: text("phone").notNull(),
    codeHash: text("code_hash").notNull(),
    /** The asker's address as the sign-in limits count it: IPv4, or an IPv6 /64 (src/accountArea/address.ts). */
    clientAddress: text("client_address").notNull(),
    /** Its range, as the SMS budget's range ceilings count it: an IPv4 /24, an IPv6 /48. */
    clientRange: text("client_range"),
    /** The known device (src/accountArea/knownDevice.ts) that asked for it; null: an unknown requester. */
    deviceId: text("device_id"),
    tries: integer("tries").notNull().default(0),
    expiresAt: timestamp("expires_at", { withTimezone: true }).notNull(),
    consumedAt: timestamp("consumed_at", { withTimezone: true }),
    createdAt: createdAt(),
  },
  (t) => [
    index("otp_codes_phone_idx").on(t.phone, t.createdAt),
    index("otp_codes_address_idx").on(t.clientAddress, t.createdAt),
    index("otp_codes_range_idx").on(t.clientRange, t.createdAt),
    check("otp_codes_tries_non_negative", sql`${t.tries} >= 0`),
  ],
);

/** Account-area sessions: the cookie holds a random token, the table its SHA-256 only. */
export const consoleSessions = pgTable(
  "console_sessions",
  {
    id: text("id").primaryKey(),
    tokenHash: text("token_hash").notNull().unique(),
    accountId: text("account_id")
      .notNull()
      .references(() => accounts.id),
    userAgent: text("user_agent"),
    clientAddress: text("client_address"),
    createdAt: createdAt(),
    lastUsedAt: timestamp("last_used_at", { withTimezone: true }).notNull().defaultNow(),
    /** The absolute lifetime's end; the idle lifetime runs from last_used_at. */
    expiresAt: timestamp("expires_at", { withTimezone: true }).notNull(),
    revokedAt: timestamp("revoked_at", { withTimezone: true }),
  },
  (t) => [index("console_sessions_account_idx").on(t.accountId, t.createdAt)],
);

/**
 * The gateway's SMS of each UTC day, every purpose and node together, against SMS_DAILY_BUDGET_MAX
 * (src/accountArea/smsBudget.ts): `sent` is taken by a conditional upsert before a message goes out;
 * `refused` counts what the spent budget turned away. One row a day.
 */
export const smsDays = pgTable(
  "sms_days",
  {
    day: date("day").primaryKey(),
    sent: integer("sent").notNull().default(0),
    refused: integer("refused").notNull().default(0),
  },
  (t) => [check("sms_days_counts_non_negative", sql`${t.sent} >= 0 AND ${t.refused} >= 0`)],
);

/**
 * Low-balance alerts (src/accountArea/balanceAlerts.ts): a row is written by the usage post whose
 * settlement takes the account's balance from at or above its threshold to below it, in the same
 * statement as the wallet's update, so a crossing makes one row whichever node posts it. A
 * background task on any node claims `pending` rows (`sending`) and ends them `sent` or `skipped`
 * (no phone, the account's or the gateway's daily SMS limit spent, or the send failed).
 */
export const balanceAlerts = pgTable(
  "balance_alerts",
  {
    id: bigserial("id", { mode: "bigint" }).primaryKey(),
    accountId: text("account_id")
      .notNull()
      .references(() => accounts.id),
    balanceMicro: micro("balance_micro").notNull(),
    thresholdMicro: micro("threshold_micro").notNull(),
    status: text("status").notNull().default("pending"),
    reason: text("reason"),
    createdAt: createdAt(),
    endedAt: timestamp("ended_at", { withTimezone: true }),
  },
  (t) => [
    index("balance_alerts_pending_idx").on(t.id).where(sql`${t.status} = 'pending'`),
    index("balance_alerts_account_idx").on(t.accountId, t.createdAt),
    check("balance_alerts_status", sql`${t.status} IN ('pending', 'sending', 'sent', 'skipped')`),
  ],
);

/** What an operator may do (src/operators/roles.ts holds the matrix). */
export const OPERATOR_ROLES = ["owner", "finance", "support", "viewer"] as const;

/** The people who run the gateway (src/operators): a password and a TOTP secret, one role each. */
export const operators = pgTable(
  "operators",
  {
    id: text("id").primaryKey(),
    /** What they sign in with: lower case, unique. */
    login: text("login").notNull().unique(),
    name: text("name").notNull(),
    role: text("role").notNull(),
    /** Bun.password's argon2id string. */
    passwordHash: text("password_hash").notNull(),
    /** The TOTP secret, base32: needed in the clear to check a code. */
    totpSecret: text("totp_secret").notNull(),
    /** The newest 30 s step a code was accepted for: a code is good once. */
    totpLastStep: bigint("totp_last_step", { mode: "number" }).notNull().default(0),
    /** What a support operator may adjust in one Tehran day, every customer together (absolute amounts). */
    adjustDailyMaxMicro: micro("adjust_daily_max_micro").notNull(),
    createdAt: createdAt(),
    removedAt: timestamp("removed_at", { withTimezone: true }),
  },
  (t) => [check("operators_role", sql`${t.role} IN ('owner', 'finance', 'support', 'viewer')`)],
);

/** Operators' personal API tokens (`dvz-op-…`): only the HMAC is kept, as for keys. */
export const operatorTokens = pgTable(
  "operator_tokens",
  {
    id: text("id").primaryKey(),
    operatorId: text("operator_id")
      .notNull()
      .references(() => operators.id),
    name: text("name").notNull(),
    hash: text("hash").notNull().unique(),
    display: text("display").notNull(),
    createdAt: createdAt(),
    revokedAt: timestamp("revoked_at", { withTimezone: true }),
  },
  (t) => [index("operator_tokens_operator_idx").on(t.operatorId)],
);

/** Operators' browser sessions: the cookie's SHA-256, as console_sessions. */
export const operatorSessions = pgTable(
  "operator_sessions",
  {
    id: text("id").primaryKey(),
    tokenHash: text("token_hash").notNull().unique(),
    operatorId: text("operator_id")
      .notNull()
      .references(() => operators.id),
    clientAddress: text("client_address"),
    createdAt: createdAt(),
    lastUsedAt: timestamp("last_used_at", { withTimezone: true }).notNull().defaultNow(),
    expiresAt: timestamp("expires_at", { withTimezone: true }).notNull(),
    revokedAt: timestamp("revoked_at", { withTimezone: true }),
  },
  (t) => [index("operator_sessions_operator_idx").on(t.operatorId, t.createdAt)],
);

/**
 * What each support operator has adjusted in a Tehran day (absolute amounts, every customer
 * together), taken by a conditional upsert before the adjustment against their ceiling, given back
 * when the adjustment does not happen: two at once cannot pass the ceiling together.
 */
export const operatorAdjustDays = pgTable(
  "operator_adjust_days",
  {
    operatorId: text("operator_id")
      .notNull()
      .references(() => operators.id),
    /** The Tehran midnight the day began at. */
    dayStart: timestamp("day_start", { withTimezone: true }).notNull(),
    usedMicro: micro("used_micro").notNull(),
  },
  (t) => [primaryKey({ columns: [t.operatorId, t.dayStart] }), check("operator_adjust_days_used_non_negative", sql`${t.usedMicro} >= 0`)],
);

/** Failed operator sign-ins, counted per address and per login over a window (src/operators/signin.ts). */
export const operatorSigninFailures = pgTable(
  "operator_signin_failures",
  {
    id: bigserial("id", { mode: "bigint" }).primaryKey(),
    login: text("login").notNull(),
    address: text("address").notNull(),
    createdAt: createdAt(),
  },
  (t) => [
    index("operator_signin_failures_login_idx").on(t.login, t.createdAt),
    index("operator_signin_failures_address_idx").on(t.address, t.createdAt),
  ],
);

/**
 * The audit trail: one row per change an operator, a personal token or ADMIN_TOKEN made. Append
 * only: a trigger (migration 0017) refuses UPDATE and DELETE.
 */
export const operatorAudit = pgTable(
  "operator_audit",
  {
    id: bigserial("id", { mode: "bigint" }).primaryKey(),
    /** An operator's id, or `admin_token`. */
    actor: text("actor").notNull(),
    role: text("role").notNull(),
    /** `session`, `token` (then token_id) or `admin_token`. */
    via: text("via").notNull(),
    tokenId: text("token_id"),
    address: text("address"),
    action: text("action").notNull(),
    target: text("target").notNull(),
    before: jsonb("before"),
    after: jsonb("after"),
    reason: text("reason"),
    /** Money moved by the change, signed, when it moves money. */
    amountMicro: micro("amount_micro"),
    createdAt: createdAt(),
  },
  (t) => [
    index("operator_audit_at_idx").on(t.createdAt),
    index("operator_audit_actor_idx").on(t.actor, t.createdAt),
    index("operator_audit_target_idx").on(t.target, t.createdAt),
  ],
);

/**
 * Files uploaded for batches (`purpose` batch) and those the gateway writes with their results
 * (`batch_output`), kept in the database so every node can read them (src/files/).
 * An account sees only its own; a file past `expires_at` is gone.
 */
export const files = pgTable(
  "files",
  {
    id: text("id").primaryKey(),
    accountId: text("account_id")
      .notNull()
      .references(() => accounts.id),
    purpose: text("purpose").notNull(),
    filename: text("filename").notNull(),
    bytes: integer("bytes").notNull(),
    /** Stored uncompressed (STORAGE EXTERNAL, migrations/0025) so that a slice of it reads only its own part. */
    content: bytea("content").notNull(),
    /** A `batch` file's models, line counts by name (src/batches/pricing.ts): what create prices by, so it never reads the content. Null: not kept (an older file, or too many names). */
    lineModels: jsonb("line_models"),
    expiresAt: timestamp("expires_at", { withTimezone: true }).notNull(),
    createdAt: createdAt(),
  },
  (t) => [
    check("files_purpose", sql`${t.purpose} IN ('batch', 'batch_output')`),
    index("files_account_idx").on(t.accountId, t.createdAt),
    index("files_expires_idx").on(t.expiresAt),
  ],
);

/**
 * Batches (OpenAI's Batch API): a file of requests run line by line as work items by any node
 * (src/batches/). `status` moves only forward, by conditional updates.
 */
export const batches = pgTable(
  "batches",
  {
    id: text("id").primaryKey(),
    accountId: text("account_id")
      .notNull()
      .references(() => accounts.id),
    /** The key that created it: every line runs as that key (its limits, its monthly cap). */
    keyId: text("key_id").notNull(),
    /** `in-country` when its creation asked it (`x-darvaze-residency`): every line stays in the country. */
    residency: text("residency"),
    endpoint: text("endpoint").notNull(),
    inputFileId: text("input_file_id").notNull(),
    completionWindow: text("completion_window").notNull(),
    status: text("status").notNull(),
    outputFileId: text("output_file_id"),
    errorFileId: text("error_file_id"),
    /** The validation's errors (OpenAI's `errors.data`), when the batch failed. */
    errors: jsonb("errors"),
    metadata: jsonb("metadata"),
    /** How its lines are priced, decided at create: `batch`, `live` or `mixed` (docs/batches.md#money). */
    pricing: text("pricing").notNull().default("live"),
    /** Its lines' models, each at the batch or the live price (batches/pricing.ts), as decided at create. */
    estimate: jsonb("estimate"),
    total: integer("total").notNull().default(0),
    completed: integer("completed").notNull().default(0),
    failed: integer("failed").notNull().default(0),
    /** What the lines run were billed, together. */
    costMicro: micro("cost_micro").notNull().default(sql`0`),
    createdAt: createdAt(),
    expiresAt: timestamp("expires_at", { withTimezone: true }).notNull(),
    inProgressAt: timestamp("in_progress_at", { withTimezone: true }),
    finalizingAt: timestamp("finalizing_at", { withTimezone: true }),
    completedAt: timestamp("completed_at", { withTimezone: true }),
    failedAt: timestamp("failed_at", { withTimezone: true }),
    expiredAt: timestamp("expired_at", { withTimezone: true }),
    cancellingAt: timestamp("cancelling_at", { withTimezone: true }),
    cancelledAt: timestamp("cancelled_at", { withTimezone: true }),
  },
  (t) => [
    check(
      "batches_status",
      sql`${t.status} IN ('validating', 'failed', 'in_progress', 'finalizing', 'completed', 'expired', 'cancelling', 'cancelled')`,
    ),
    check("batches_pricing", sql`${t.pricing} IN ('batch', 'live', 'mixed')`),
    index("batches_account_idx").on(t.accountId, t.createdAt),
    index("batches_open_idx").on(t.expiresAt).where(sql`${t.status} IN ('validating', 'in_progress')`),
  ],
);

/**
 * A batch's lines, validated: `body` the request as sent; `result` the output or error file's line
 * once the line was settled (`state` done), written once.
 */
export const batchLines = pgTable(
  "batch_lines",
  {
    batchId: text("batch_id")
      .notNull()
      .references(() => batches.id, { onDelete: "cascade" }),
    line: integer("line").notNull(),
    customId: text("custom_id").notNull(),
    body: text("body").notNull(),
    state: text("state").notNull().default("queued"),
    attempts: integer("attempts").notNull().default(0),
    /** When the node running it last said so: a claim older than the ack wait is a dead node's. */
    claimedAt: timestamp("claimed_at", { withTimezone: true }),
    result: text("result"),
    isError: boolean("is_error").notNull().default(false),
    costMicro: micro("cost_micro").notNull().default(sql`0`),
  },
  (t) => [
    primaryKey({ columns: [t.batchId, t.line] }),
    check("batch_lines_state", sql`${t.state} IN ('queued', 'running', 'done', 'skipped')`),
    // The lines running now, few: a claim counts its account's among them (BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX).
    index("batch_lines_running").on(t.batchId).where(sql`${t.state} = 'running'`),
  ],
);
