/**
 * Operators, their personal tokens and their browser sessions, in the database. Tokens are
 * `dvz-op-` and 40 base62 characters; only their HMAC under KEY_PEPPER is kept, as for keys.
 * Session cookies are kept as their SHA-256, as the customers' are. Removing an operator ends
 * their tokens and sessions; the last owner cannot be removed or given another role.
 */
import { and, asc, eq, gt, isNull, sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { operatorSessions, operators, operatorTokens } from "../db/schema.ts";
import { newId, randomBase62 } from "../ids.ts";
import { displayKey, generateKey, hashKey, looksLikeKey } from "../keys/secret.ts";
import type { Role } from "./roles.ts";
import { newTotpSecret } from "./totp.ts";

export const OPERATOR_TOKEN_PREFIX = "dvz-op-";
export const OPERATOR_SESSION_TOKEN_LENGTH = 43;
/** A browser session of an operator ends this long after sign-in. */
export const OPERATOR_SESSION_TTL_MS = 12 * 3_600_000;
/** …or this long unused. */
export const OPERATOR_SESSION_IDLE_MS = 30 * 60_000;
/** A support operator's adjustments in one Tehran day, every customer together, unless set otherwise. */
export const SUPPORT_ADJUST_DAILY_MAX_MICRO_DEFAULT = 5_000_000n * 1_000_000n;

export type Operator = typeof operators.$inferSelect;

/** Who made a request to the admin API, as the guard found them. */
export interface Principal {
  /** The operator's id, or `admin_token`. */
  actor: string;
  role: Role;
  via: "session" | "token" | "admin_token";
  tokenId: string | null;
  /** For sessions: when the operator signed in (fresh sign-in for money). */
  signedInAtMs: number | null;
  adjustDailyMaxMicro: bigint | null;
  address: string | null;
}

const sha256 = (token: string) => new Bun.CryptoHasher("sha256").update(token).digest("hex");

/** An operator as the API shows it: never the password hash or TOTP secret. */
export function operatorObject(o: Operator) {
  return {
    id: o.id,
    object: "operator",
    login: o.login,
    name: o.name,
    role: o.role,
    adjust_daily_max_micro_toman: o.adjustDailyMaxMicro.toString(),
    created_at: o.createdAt.toISOString(),
    removed_at: o.removedAt?.toISOString() ?? null,
  };
}

export class OperatorStore {
  constructor(
    private readonly db: Db,
    private readonly pepper: string,
  ) {}

  async add(input: { login: string; name: string; role: Role; password: string; adjustDailyMaxMicro?: bigint }) {
    const secret = newTotpSecret();
    const [row] = await this.db.orm
      .insert(operators)
      .values({
        id: newId("op"),
        login: input.login.toLowerCase(),
        name: input.name,
        role: input.role,
        passwordHash: await Bun.password.hash(input.password, { algorithm: "argon2id" }),
        totpSecret: secret,
        adjustDailyMaxMicro: input.adjustDailyMaxMicro ?? SUPPORT_ADJUST_DAILY_MAX_MICRO_DEFAULT,
      })
      .onConflictDoNothing({ target: operators.login })
      .returning();
    return row ? { operator: row, secret } : null;
  }

  async list(): Promise<Operator[]> {
    return this.db.orm.select().from(operators).where(isNull(operators.removedAt)).orderBy(asc(operators.createdAt));
  }

  async get(id: string): Promise<Operator | undefined> {
    const [row] = await this.db.orm
      .select()
      .from(operators)
      .where(and(eq(operators.id, id), isNull(operators.removedAt)));
    return row;
  }

  async byLogin(login: string): Promise<Operator | undefined> {
    const [row] = await this.db.orm
      .select()
      .from(operators)
      .where(and(eq(operators.login, login.toLowerCase()), isNull(operators.removedAt)));
    return row;
  }

  /** Whether another live owner than `id` exists: the last owner stays an owner. */
  private async otherOwner(id: string): Promise<boolean> {
    const rows = await this.db.rows<{ n: number }>(
      sql`SELECT count(*)::int AS n FROM operators WHERE role = 'owner' AND removed_at IS NULL AND id <> ${id}`,
    );
    return (rows[0]?.n ?? 0) > 0;
  }

  /** Changes role, name or ceiling; "last_owner" when it would leave no owner. */
  async change(id: string, set: { role?: Role; name?: string; adjustDailyMaxMicro?: bigint }): Promise<Operator | "last_owner" | null> {
    const before = await this.get(id);
    if (!before) return null;
    if (before.role === "owner" && set.role !== undefined && set.role !== "owner" && !(await this.otherOwner(id))) return "last_owner";
    const [row] = await this.db.orm.update(operators).set(set).where(eq(operators.id, id)).returning();
    return row ?? null;
  }

  async remove(id: string): Promise<Operator | "last_owner" | null> {
    const before = await this.get(id);
    if (!before) return null;
    if (before.role === "owner" && !(await this.otherOwner(id))) return "last_owner";
    const now = new Date();
    const [row] = await this.db.orm.update(operators).set({ removedAt: now }).where(eq(operators.id, id)).returning();
    await this.db.orm
      .update(operatorTokens)
      .set({ revokedAt: now })
      .where(and(eq(operatorTokens.operatorId, id), isNull(operatorTokens.revokedAt)));
    await this.db.orm
      .update(operatorSessions)
      .set({ revokedAt: now })
      .where(and(eq(operatorSessions.operatorId, id), isNull(operatorSessions.revokedAt)));
    return row ?? null;
  }

  /** Takes a TOTP step for the operator: false when that step (or a later one) was used already. */
  async takeTotpStep(id: string, step: number): Promise<boolean> {
    const rows = await this.db.orm
      .update(operators)
      .set({ totpLastStep: step })
      .where(and(eq(operators.id, id), sql`${operators.totpLastStep} < ${step}`))
      .returning({ id: operators.id });
    return rows.length === 1;
  }

  async createToken(operatorId: string, name: string) {
    const token = generateKey(OPERATOR_TOKEN_PREFIX);
    const [row] = await this.db.orm
      .insert(operatorTokens)
      .values({
        id: newId("opt"),
        operatorId,
        name,
        hash: hashKey(token, this.pepper),
        display: displayKey(token, OPERATOR_TOKEN_PREFIX),
      })
      .returning();
    return { token, record: row! };
  }

  async revokeToken(id: string) {
    const [row] = await this.db.orm
      .update(operatorTokens)
      .set({ revokedAt: new Date() })
      .where(and(eq(operatorTokens.id, id), isNull(operatorTokens.revokedAt)))
      .returning();
    return row ?? null;
  }

  async tokens(operatorId: string) {
    return this.db.orm
      .select()
      .from(operatorTokens)
      .where(and(eq(operatorTokens.operatorId, operatorId), isNull(operatorTokens.revokedAt)));
  }

  /** The operator of a live personal token, or null. */
  async byToken(token: string): Promise<{ operator: Operator; tokenId: string } | null> {
    if (!looksLikeKey(token, OPERATOR_TOKEN_PREFIX)) return null;
    const [row] = await this.db.orm
      .select({ operator: operators, tokenId: operatorTokens.id })
      .from(operatorTokens)
      .innerJoin(operators, eq(operators.id, operatorTokens.operatorId))
      .where(and(eq(operatorTokens.hash, hashKey(token, this.pepper)), isNull(operatorTokens.revokedAt), isNull(operators.removedAt)));
    return row ?? null;
  }

  async createSession(operatorId: string, address: string | null): Promise<{ id: string; token: string }> {
    const token = randomBase62(OPERATOR_SESSION_TOKEN_LENGTH);
    const id = newId("ops");
    const now = Date.now();
    await this.db.orm.insert(operatorSessions).values({
      id,
      tokenHash: sha256(token),
      operatorId,
      clientAddress: address,
      createdAt: new Date(now),
      lastUsedAt: new Date(now),
      expiresAt: new Date(now + OPERATOR_SESSION_TTL_MS),
    });
    return { id, token };
  }

  /** The live session of a cookie and its operator, or null (unknown, ended, idle, expired, operator removed). */
  async bySession(
    token: string | null,
    nowMs = Date.now(),
  ): Promise<{ operator: Operator; sessionId: string; signedInAtMs: number } | null> {
    if (!token || token.length !== OPERATOR_SESSION_TOKEN_LENGTH) return null;
    const [row] = await this.db.orm
      .select({
        operator: operators,
        id: operatorSessions.id,
        createdAt: operatorSessions.createdAt,
        lastUsedAt: operatorSessions.lastUsedAt,
      })
      .from(operatorSessions)
      .innerJoin(operators, eq(operators.id, operatorSessions.operatorId))
      .where(
        and(
          eq(operatorSessions.tokenHash, sha256(token)),
          isNull(operatorSessions.revokedAt),
          gt(operatorSessions.expiresAt, new Date(nowMs)),
          isNull(operators.removedAt),
        ),
      );
    if (!row || row.lastUsedAt.getTime() + OPERATOR_SESSION_IDLE_MS <= nowMs) return null;
    await this.db.orm
      .update(operatorSessions)
      .set({ lastUsedAt: new Date(nowMs) })
      .where(eq(operatorSessions.id, row.id));
    return { operator: row.operator, sessionId: row.id, signedInAtMs: row.createdAt.getTime() };
  }

  async endSession(sessionId: string): Promise<void> {
    await this.db.orm.update(operatorSessions).set({ revokedAt: new Date() }).where(eq(operatorSessions.id, sessionId));
  }
}

/** The principal of an operator reaching the API through a session or a token. */
export function principalOf(
  operator: Operator,
  via: "session" | "token",
  extra: { tokenId?: string; signedInAtMs?: number; address: string | null },
): Principal {
  return {
    actor: operator.id,
    role: operator.role as Role,
    via,
    tokenId: extra.tokenId ?? null,
    signedInAtMs: extra.signedInAtMs ?? null,
    adjustDailyMaxMicro: operator.adjustDailyMaxMicro,
    address: extra.address,
  };
}
