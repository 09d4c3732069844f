/**
 * An operator's sign-in: login, password (argon2id) and a TOTP code, all three or nothing. Failed
 * attempts are counted per login and per address over OPERATOR_SIGNIN_WINDOW_MS; past either limit
 * every attempt is refused (even a right one) until the window has moved on. A code is good once.
 */
import { and, eq, gte, sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { operatorSigninFailures } from "../db/schema.ts";
import { fail, type Failure } from "../errors.ts";
import type { Operator, OperatorStore } from "./store.ts";
import { verifyTotp } from "./totp.ts";

export const OPERATOR_SIGNIN_WINDOW_MS = 15 * 60_000;
/** Failed sign-ins of one login within the window before it is locked. */
export const OPERATOR_SIGNIN_FAILURES_PER_LOGIN_MAX = 5;
/** Failed sign-ins from one address within the window, every login together. */
export const OPERATOR_SIGNIN_FAILURES_PER_ADDRESS_MAX = 20;
/** A password hash checked for unknown logins too, so both take as long; made on the first sign-in. */
let decoyHash: Promise<string> | null = null;
const decoy = () => (decoyHash ??= Bun.password.hash("decoy-password-never-matches", { algorithm: "argon2id" }));

async function failuresSince(db: Db, column: "login" | "address", value: string, since: Date): Promise<number> {
  const col = column === "login" ? operatorSigninFailures.login : operatorSigninFailures.address;
  const [row] = await db.orm
    .select({ n: sql<number>`count(*)::int` })
    .from(operatorSigninFailures)
    .where(and(eq(col, value), gte(operatorSigninFailures.createdAt, since)));
  return row?.n ?? 0;
}

const refused = () => fail("code_invalid", "The login, password or code is wrong.");

export async function signIn(
  db: Db,
  store: OperatorStore,
  input: { login: string; password: string; code: string; address: string; nowMs?: number },
): Promise<Operator | Failure> {
  const nowMs = input.nowMs ?? Date.now();
  const login = input.login.toLowerCase();
  const since = new Date(nowMs - OPERATOR_SIGNIN_WINDOW_MS);
  if (
    (await failuresSince(db, "login", login, since)) >= OPERATOR_SIGNIN_FAILURES_PER_LOGIN_MAX ||
    (await failuresSince(db, "address", input.address, since)) >= OPERATOR_SIGNIN_FAILURES_PER_ADDRESS_MAX
  ) {
    return fail("sign_in_limited", "Too many failed sign-ins; try again later.", {
      retryAfterS: Math.ceil(OPERATOR_SIGNIN_WINDOW_MS / 1000),
    });
  }
  const operator = await store.byLogin(login);
  const passwordOk = await Bun.password.verify(input.password, operator?.passwordHash ?? (await decoy()));
  const step = operator && passwordOk ? verifyTotp(operator.totpSecret, input.code, nowMs, operator.totpLastStep) : null;
  // The step is taken atomically: two sign-ins with one code, at once, get one session.
  if (!operator || step === null || !(await store.takeTotpStep(operator.id, step))) {
    await db.orm.insert(operatorSigninFailures).values({ login, address: input.address });
    return refused();
  }
  return operator;
}
