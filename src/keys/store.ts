/**
 * API keys: creation, revocation, limits, and authentication with a bounded in-memory cache.
 *
 * The hot path never waits on the database for a known key; a revoked key is refused within
 * about a second on every node (the change broadcast, and a poll every KEY_POLL_INTERVAL_MS).
 *
 * In full, with the reasoning: docs/internals.md#api-keys.
 */
import { and, eq, gt, inArray, isNull, or, sql } from "drizzle-orm";
import type { Db, Tx } from "../db/client.ts";
import { accounts, apiKeys } from "../db/schema.ts";
import { CONCURRENCY_MAX_DEFAULT, isAccountId, resolveLimits, type AccountLimits, type AccountLimitsPatch } from "./accountLimits.ts";
import { fail, type Failure } from "../errors.ts";
import { FifoMap } from "../fifoMap.ts";
import { newId } from "../ids.ts";
import { LastUse } from "./lastUse.ts";
import { displayKey, generateKey, hashKey, looksLikeKey } from "./secret.ts";

export const KEY_CACHE_TTL_MS = 5 * 60_000;
/** A key unknown a moment ago may have just been created on another node. */
export const KEY_UNKNOWN_TTL_MS = 1_000;
export const KEY_POLL_INTERVAL_MS = 1_000;
/** The poll looks this far behind its last high-water mark: commits land out of order. */
const KEY_POLL_OVERLAP_MS = 5_000;
export const KEY_CACHE_ENTRIES_MAX = 100_000;
/** The most keys one lookup query asks for; more misses in one turn make more queries. */
export const KEY_LOOKUP_BATCH_MAX = 256;
export const KEYS_PER_ACCOUNT_LIST_MAX = 1_000;

export interface KeyRecord {
  id: string;
  accountId: string;
  name: string;
  display: string;
  concurrencyMax: number;
  rpm: number | null;
  tpm: number | null;
  monthlySpendCapMicro: bigint | null;
  /** `in-country`: every request of this key is routed to in-country backends only. */
  residency: "in-country" | null;
  /** Catalog model ids this key may call; null: any (restrictions.ts). */
  allowedModels: readonly string[] | null;
  /** Client addresses or CIDR blocks this key may be used from; null: any. */
  allowedIps: readonly string[] | null;
  createdAt: Date;
  revokedAt: Date | null;
  /** Refused from this instant on; null or absent: never. */
  expiresAt?: Date | null;
  updatedAt: Date;
}

export interface KeyLimits {
  concurrencyMax?: number;
  rpm?: number | null;
  tpm?: number | null;
  monthlySpendCapMicro?: bigint | null;
  residency?: "in-country" | null;
  expiresAt?: Date | null;
  allowedModels?: string[] | null;
  allowedIps?: string[] | null;
}

/**
 * The account as a limit holder: what slots and permits read of a key (its id, concurrency, rpm,
 * tpm), with no spend cap of its own (the wallet is the account's).
 */
export function accountHolder(accountId: string, limits: AccountLimits): KeyRecord {
  const epoch = new Date(0);
  return {
    id: accountId,
    accountId,
    name: accountId,
    display: accountId,
    concurrencyMax: limits.concurrencyMax,
    rpm: limits.rpm,
    tpm: limits.tpm,
    monthlySpendCapMicro: null,
    residency: null,
    allowedModels: null,
    allowedIps: null,
    createdAt: epoch,
    revokedAt: null,
    updatedAt: epoch,
  };
}

interface CacheEntry {
  record: KeyRecord | null;
  expiresAtMs: number;
}

type KeyRow = typeof apiKeys.$inferSelect;

function toRecord(row: typeof apiKeys.$inferSelect): KeyRecord {
  return {
    id: row.id,
    accountId: row.accountId,
    name: row.name,
    display: row.display,
    concurrencyMax: row.concurrencyMax,
    rpm: row.rpm,
    tpm: row.tpm,
    monthlySpendCapMicro: row.monthlySpendCapMicro,
    residency: row.residency === "in-country" ? "in-country" : null,
    allowedModels: row.allowedModels,
    allowedIps: row.allowedIps,
    createdAt: row.createdAt,
    revokedAt: row.revokedAt,
    expiresAt: row.expiresAt,
    updatedAt: row.updatedAt,
  };
}

export class KeyStore {
  private readonly byHash = new FifoMap<string, CacheEntry>(KEY_CACHE_ENTRIES_MAX);
  private readonly byId = new FifoMap<string, CacheEntry>(KEY_CACHE_ENTRIES_MAX);
  private readonly byAccount = new FifoMap<string, { limits: AccountLimits | null; expiresAtMs: number }>(KEY_CACHE_ENTRIES_MAX);
  readonly lastUse = new LastUse();

  constructor(
    private readonly db: Db,
    private readonly options: { prefix: string; pepper: string; now?: () => number },
  ) {}

  private now(): number {
    return this.options.now?.() ?? performance.now();
  }

  /** The key's record, or a 401 failure for a missing, malformed, unknown or revoked key. */
  async authenticate(presented: string | null): Promise<KeyRecord | Failure> {
    if (!presented) return fail("invalid_api_key", "Missing API key: send it as `Authorization: Bearer <key>`.");
    if (!looksLikeKey(presented, this.options.prefix)) {
      return fail("invalid_api_key", `Malformed API key: Darvaze keys start with ${this.options.prefix}.`);
    }
    const hash = hashKey(presented, this.options.pepper);
    let entry = this.byHash.get(hash);
    if (!entry || entry.expiresAtMs <= this.now()) {
      const row = await this.lookUp(hash);
      entry = { record: row ? toRecord(row) : null, expiresAtMs: this.now() + (row ? KEY_CACHE_TTL_MS : KEY_UNKNOWN_TTL_MS) };
      this.byHash.set(hash, entry);
      if (entry.record) this.byId.set(entry.record.id, entry);
    }
    if (!entry.record) return fail("invalid_api_key", "Incorrect API key provided.");
    if (entry.record.revokedAt) return fail("invalid_api_key", "This API key has been revoked.");
    if (entry.record.expiresAt && entry.record.expiresAt.getTime() <= Date.now()) {
      return fail("invalid_api_key", `This API key expired at ${entry.record.expiresAt.toISOString()}.`);
    }
    this.lastUse.note(entry.record.id);
    return entry.record;
  }

  /** Lookups by hash in flight, and those waiting for the turn's query. */
  private readonly lookups = new Map<string, Promise<KeyRow | undefined>>();
  private waiting: { hash: string; settle: PromiseWithResolvers<KeyRow | undefined> }[] = [];

  /** The row of a key by its hash: one query for every miss of this turn, one lookup for every request of a key. */
  private lookUp(hash: string): Promise<KeyRow | undefined> {
    const inFlight = this.lookups.get(hash);
    if (inFlight) return inFlight;
    const settle = Promise.withResolvers<KeyRow | undefined>();
    this.lookups.set(hash, settle.promise);
    this.waiting.push({ hash, settle });
    if (this.waiting.length === 1) setImmediate(() => void this.lookUpWaiting());
    return settle.promise;
  }

  private async lookUpWaiting(): Promise<void> {
    const waiting = this.waiting;
    this.waiting = [];
    for (let start = 0; start < waiting.length; start += KEY_LOOKUP_BATCH_MAX) {
      const batch = waiting.slice(start, start + KEY_LOOKUP_BATCH_MAX);
      try {
        // Each key's account with it: the key's first admission reads the account's limits,
        // which would otherwise be one more round trip on its first request.
        const rows = await this.db.orm
          .select({ key: apiKeys, account: accounts })
          .from(apiKeys)
          .leftJoin(accounts, eq(accounts.id, apiKeys.accountId))
          .where(
            inArray(
              apiKeys.hash,
              batch.map((w) => w.hash),
            ),
          );
        for (const { key, account } of rows) this.rememberAccount(key.accountId, account ?? undefined);
        const byHash = new Map(rows.map(({ key }) => [key.hash, key]));
        for (const w of batch) w.settle.resolve(byHash.get(w.hash));
      } catch (error) {
        for (const w of batch) w.settle.reject(error);
      } finally {
        for (const w of batch) this.lookups.delete(w.hash);
      }
    }
  }

  /** The key's record by id (for actors), cached like authenticate. */
  async get(id: string): Promise<KeyRecord | null> {
    const cached = this.byId.get(id);
    if (cached && cached.expiresAtMs > this.now()) return cached.record;
    const [row] = await this.db.orm.select().from(apiKeys).where(eq(apiKeys.id, id));
    const record = row ? toRecord(row) : null;
    this.byId.set(id, { record, expiresAtMs: this.now() + (record ? KEY_CACHE_TTL_MS : KEY_UNKNOWN_TTL_MS) });
    return record;
  }

  /** An account's limits (defaults resolved), cached like a key and forgotten with its keys' changes; null: no such account. */
  async accountLimits(accountId: string): Promise<AccountLimits | null> {
    const cached = this.byAccount.get(accountId);
    if (cached && cached.expiresAtMs > this.now()) return cached.limits;
    let row: typeof accounts.$inferSelect | undefined;
    try {
      [row] = await this.db.orm.select().from(accounts).where(eq(accounts.id, accountId));
    } catch (error) {
      // The database away: the limits last read stand (a lease still serves the account's keys).
      if (cached) return cached.limits;
      throw error;
    }
    return this.rememberAccount(accountId, row);
  }

  /** An account's limits as just read (undefined: no such account), cached until they change or KEY_CACHE_TTL_MS. */
  private rememberAccount(accountId: string, row: typeof accounts.$inferSelect | undefined): AccountLimits | null {
    const limits = row ? resolveLimits(row) : null;
    this.byAccount.set(accountId, { limits, expiresAtMs: this.now() + (limits ? KEY_CACHE_TTL_MS : KEY_UNKNOWN_TTL_MS) });
    return limits;
  }

  /** A limit holder by id, for slots and permits: a key, or an account (accountHolder). */
  async holder(id: string): Promise<KeyRecord | null> {
    if (!isAccountId(id)) return this.get(id);
    const limits = await this.accountLimits(id);
    return limits ? accountHolder(id, limits) : null;
  }

  /**
   * Sets an account's limits (null: back to the default). Its keys' `updated_at` is bumped with
   * them, so that every node's poll drops the account's cached limits within a second even if
   * the event is lost.
   */
  async setAccountLimits(accountId: string, patch: AccountLimitsPatch): Promise<AccountLimits | null> {
    const set = Object.fromEntries(Object.entries(patch).filter(([, v]) => v !== undefined));
    const row = await this.db.orm.transaction(async (tx) => {
      const [updated] = await tx.update(accounts).set(set).where(eq(accounts.id, accountId)).returning();
      if (updated) await tx.update(apiKeys).set({ updatedAt: sql`now()` }).where(eq(apiKeys.accountId, accountId));
      return updated;
    });
    this.forget(accountId);
    return row ? resolveLimits(row) : null;
  }

  /**
   * Creates a key within the account's `keys_max` live keys (409 `key_limit_reached` past it):
   * the account's row is locked while its keys are counted, so concurrent creations cannot pass
   * the cap together.
   */
  async issue(accountId: string, name: string, limits: KeyLimits): Promise<{ key: string; record: KeyRecord } | Failure> {
    const counted = await this.db.orm.transaction(async (tx) => {
      const [account] = await tx.select().from(accounts).where(eq(accounts.id, accountId)).for("update");
      if (!account) return fail("not_found", `No account ${accountId}.`);
      const keysMax = resolveLimits(account).keysMax;
      const [live] = await tx
        .select({ n: sql<number>`count(*)::int` })
        .from(apiKeys)
        .where(
          and(
            eq(apiKeys.accountId, accountId),
            isNull(apiKeys.revokedAt),
            or(isNull(apiKeys.expiresAt), gt(apiKeys.expiresAt, sql`now()`)),
          ),
        );
      if ((live?.n ?? 0) >= keysMax) {
        return fail("key_limit_reached", `This account has ${live?.n} live keys, its limit of ${keysMax}: revoke one first.`, {
          param: "keys_max",
        });
      }
      return this.insertKey(tx, accountId, name, limits);
    });
    return counted;
  }

  private pollCursor = new Date(Date.now() - KEY_POLL_OVERLAP_MS);

  /** Forgets every key changed since the last poll; returns how many changed. */
  async pollChanges(): Promise<number> {
    const since = new Date(this.pollCursor.getTime() - KEY_POLL_OVERLAP_MS);
    const rows = await this.db.orm
      .select({ id: apiKeys.id, accountId: apiKeys.accountId, updatedAt: apiKeys.updatedAt })
      .from(apiKeys)
      .where(gt(apiKeys.updatedAt, since));
    const cursor = this.pollCursor;
    for (const row of rows) {
      // A change this node has not seen yet may be its account's limits (setAccountLimits bumps its keys).
      if (row.updatedAt > cursor) this.staleAccount(row.accountId);
      if (row.updatedAt > this.pollCursor) this.pollCursor = row.updatedAt;
      const cached = this.byId.get(row.id)?.record;
      if (cached && cached.updatedAt < row.updatedAt) this.forget(row.id);
    }
    return rows.length;
  }

  /** An account's cached limits read again at its next use, but kept to stand while the database is away. */
  private staleAccount(accountId: string): void {
    const cached = this.byAccount.get(accountId);
    if (cached) cached.expiresAtMs = 0;
  }

  /** Drops every cached entry of the key (revocation, limit change). */
  forget(keyId: string): void {
    if (isAccountId(keyId)) {
      this.staleAccount(keyId);
      return;
    }
    this.byId.delete(keyId);
    // Entries by hash cannot be found from the id without a scan. Revocations and limit changes
    // are rare and the cache refills with one query per active key, so drop them all.
    this.byHash.clear();
  }

  /** Creates a key whatever the account's cap (tests, the demo, benchmarks); the APIs call issue(). */
  create(accountId: string, name: string, limits: KeyLimits): Promise<{ key: string; record: KeyRecord }> {
    return this.insertKey(this.db.orm, accountId, name, limits);
  }

  private async insertKey(
    db: Db["orm"] | Tx,
    accountId: string,
    name: string,
    limits: KeyLimits,
  ): Promise<{ key: string; record: KeyRecord }> {
    const key = generateKey(this.options.prefix);
    const [row] = await db
      .insert(apiKeys)
      .values({
        id: newId("key"),
        accountId,
        name,
        hash: hashKey(key, this.options.pepper),
        display: displayKey(key, this.options.prefix),
        concurrencyMax: limits.concurrencyMax ?? CONCURRENCY_MAX_DEFAULT,
        rpm: limits.rpm ?? null,
        tpm: limits.tpm ?? null,
        monthlySpendCapMicro: limits.monthlySpendCapMicro ?? null,
        residency: limits.residency ?? null,
        expiresAt: limits.expiresAt ?? null,
        allowedModels: limits.allowedModels ?? null,
        allowedIps: limits.allowedIps ?? null,
      })
      .returning();
    return { key, record: toRecord(row!) };
  }

  /** The account's keys, oldest first, with their last use as last written (LAST_USE_FLUSH_MS behind). */
  async listForAccount(accountId: string): Promise<{ record: KeyRecord; lastUsedAt: Date | null }[]> {
    const rows = await this.db.orm
      .select()
      .from(apiKeys)
      .where(eq(apiKeys.accountId, accountId))
      .orderBy(apiKeys.createdAt)
      .limit(KEYS_PER_ACCOUNT_LIST_MAX);
    return rows.map((row) => ({ record: toRecord(row), lastUsedAt: row.lastUsedAt }));
  }

  async revoke(keyId: string): Promise<KeyRecord | null> {
    const [row] = await this.db.orm
      .update(apiKeys)
      .set({ revokedAt: sql`now()`, updatedAt: sql`now()` })
      .where(and(eq(apiKeys.id, keyId), isNull(apiKeys.revokedAt)))
      .returning();
    this.forget(keyId);
    if (row) return toRecord(row);
    const [existing] = await this.db.orm.select().from(apiKeys).where(eq(apiKeys.id, keyId));
    return existing ? toRecord(existing) : null;
  }

  /**
   * Deletes a key whose secret no one was ever given (the start-up rehearsal's), and forgets it
   * here. No key event: no other node's cache of it can be used without the secret, and an event
   * would empty every node's cache of keys by hash. Keys that customers hold are revoked instead.
   */
  async discard(keyId: string): Promise<void> {
    await this.db.orm.delete(apiKeys).where(eq(apiKeys.id, keyId));
    this.forget(keyId);
  }

  async setLimits(keyId: string, limits: KeyLimits): Promise<KeyRecord | null> {
    const [row] = await this.db.orm
      .update(apiKeys)
      .set({
        ...(limits.concurrencyMax !== undefined ? { concurrencyMax: limits.concurrencyMax } : {}),
        ...(limits.rpm !== undefined ? { rpm: limits.rpm } : {}),
        ...(limits.tpm !== undefined ? { tpm: limits.tpm } : {}),
        ...(limits.monthlySpendCapMicro !== undefined ? { monthlySpendCapMicro: limits.monthlySpendCapMicro } : {}),
        ...(limits.residency !== undefined ? { residency: limits.residency } : {}),
        ...(limits.expiresAt !== undefined ? { expiresAt: limits.expiresAt } : {}),
        ...(limits.allowedModels !== undefined ? { allowedModels: limits.allowedModels } : {}),
        ...(limits.allowedIps !== undefined ? { allowedIps: limits.allowedIps } : {}),
        updatedAt: sql`now()`,
      })
      .where(eq(apiKeys.id, keyId))
      .returning();
    this.forget(keyId);
    return row ? toRecord(row) : null;
  }
}
