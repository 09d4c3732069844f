/**
 * Account-area sessions, server-side. The browser holds a random token in an HttpOnly cookie;
 * the table holds its SHA-256, so a read of the database yields no usable session. Every
 * sign-in makes a new session (and ends the one the browser came with), a session ends after
 * `idleMs` without use or `ttlMs` after sign-in, whichever first, and at most
 * SESSIONS_PER_ACCOUNT_MAX live at once (the oldest are ended). The CSRF token is an HMAC of
 * the session id under the console secret: nothing more to store, and useless for another session.
 */
import { and, desc, eq, gt, isNull, ne, sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { accounts, consoleSessions } from "../db/schema.ts";
import { newId, randomBase62 } from "../ids.ts";

export const SESSION_TOKEN_LENGTH = 43;
export const SESSIONS_PER_ACCOUNT_MAX = 20;
/** last_used_at is written at most this often per session: a page load makes several calls. */
export const SESSION_TOUCH_MS = 60_000;
export const USER_AGENT_CHARS_MAX = 300;

export interface Session {
  id: string;
  accountId: string;
  phone: string | null;
}

export interface SessionView {
  id: string;
  userAgent: string | null;
  clientAddress: string | null;
  createdAt: Date;
  lastUsedAt: Date;
  expiresAt: Date;
}

const sha256 = (token: string) => new Bun.CryptoHasher("sha256").update(token).digest("hex");

export class SessionStore {
  constructor(
    private readonly db: Db,
    private readonly options: { idleMs: number; ttlMs: number; secret: string; now?: () => number },
  ) {}

  private now(): number {
    return this.options.now?.() ?? Date.now();
  }

  get idleMs(): number {
    return this.options.idleMs;
  }

  async create(
    accountId: string,
    client: { userAgent: string | null; clientAddress: string | null },
  ): Promise<{ id: string; token: string }> {
    const token = randomBase62(SESSION_TOKEN_LENGTH);
    const id = newId("ses");
    const now = this.now();
    await this.db.orm.insert(consoleSessions).values({
      id,
      tokenHash: sha256(token),
      accountId,
      userAgent: client.userAgent?.slice(0, USER_AGENT_CHARS_MAX) ?? null,
      clientAddress: client.clientAddress,
      createdAt: new Date(now),
      lastUsedAt: new Date(now),
      expiresAt: new Date(now + this.options.ttlMs),
    });
    // Bounded: the oldest live sessions beyond the cap end now.
    await this.db.rows(sql`
      UPDATE console_sessions SET revoked_at = ${new Date(now).toISOString()}::timestamptz
      WHERE id IN (SELECT id FROM console_sessions WHERE account_id = ${accountId} AND revoked_at IS NULL
                   ORDER BY created_at DESC OFFSET ${SESSIONS_PER_ACCOUNT_MAX})`);
    return { id, token };
  }

  /** The live session of a token, or null (unknown, revoked, idle too long, past its lifetime). */
  async lookup(token: string | null): Promise<Session | null> {
    if (!token || token.length !== SESSION_TOKEN_LENGTH) return null;
    const now = this.now();
    const [row] = await this.db.orm
      .select({
        id: consoleSessions.id,
        accountId: consoleSessions.accountId,
        lastUsedAt: consoleSessions.lastUsedAt,
        phone: accounts.phone,
      })
      .from(consoleSessions)
      .innerJoin(accounts, eq(accounts.id, consoleSessions.accountId))
      .where(
        and(eq(consoleSessions.tokenHash, sha256(token)), isNull(consoleSessions.revokedAt), gt(consoleSessions.expiresAt, new Date(now))),
      );
    if (!row || row.lastUsedAt.getTime() + this.options.idleMs <= now) return null;
    if (now - row.lastUsedAt.getTime() >= SESSION_TOUCH_MS) {
      await this.db.orm
        .update(consoleSessions)
        .set({ lastUsedAt: new Date(now) })
        .where(eq(consoleSessions.id, row.id));
    }
    return { id: row.id, accountId: row.accountId, phone: row.phone };
  }

  async list(accountId: string): Promise<SessionView[]> {
    const now = new Date(this.now());
    const rows = await this.db.orm
      .select()
      .from(consoleSessions)
      .where(and(eq(consoleSessions.accountId, accountId), isNull(consoleSessions.revokedAt), gt(consoleSessions.expiresAt, now)))
      .orderBy(desc(consoleSessions.lastUsedAt))
      .limit(SESSIONS_PER_ACCOUNT_MAX);
    return rows
      .filter((r) => r.lastUsedAt.getTime() + this.options.idleMs > now.getTime())
      .map((r) => ({
        id: r.id,
        userAgent: r.userAgent,
        clientAddress: r.clientAddress,
        createdAt: r.createdAt,
        lastUsedAt: r.lastUsedAt,
        expiresAt: r.expiresAt,
      }));
  }

  /** Ends one of the account's sessions; false when it is not the account's (or already ended). */
  async revoke(accountId: string, sessionId: string): Promise<boolean> {
    const rows = await this.db.orm
      .update(consoleSessions)
      .set({ revokedAt: new Date(this.now()) })
      .where(and(eq(consoleSessions.id, sessionId), eq(consoleSessions.accountId, accountId), isNull(consoleSessions.revokedAt)))
      .returning({ id: consoleSessions.id });
    return rows.length === 1;
  }

  /** Ends every session of the account (sign-out everywhere); with `except`, all but that one. */
  async revokeAll(accountId: string, except?: string): Promise<number> {
    const rows = await this.db.orm
      .update(consoleSessions)
      .set({ revokedAt: new Date(this.now()) })
      .where(
        and(
          eq(consoleSessions.accountId, accountId),
          isNull(consoleSessions.revokedAt),
          except ? ne(consoleSessions.id, except) : undefined,
        ),
      )
      .returning({ id: consoleSessions.id });
    return rows.length;
  }

  csrfToken(sessionId: string): string {
    return new Bun.CryptoHasher("sha256", this.options.secret).update(`csrf:${sessionId}`).digest("base64url");
  }
}
