/**
 * One-time sign-in codes. The flow and what bounds guessing:
 *
 *   send(phone, address): refused when the phone asked less than OTP_RESEND_INTERVAL_MS ago, or
 *     OTP_SENDS_PER_PHONE_PER_HOUR_MAX times this hour, or the address OTP_SENDS_PER_ADDRESS_PER_HOUR_MAX
 *     times, or the phone is locked out for the day; else a new 6-digit code (uniform, CSPRNG) is
 *     stored as HMAC(secret, phone:code) with a life of OTP_TTL_MS, and sent. A new code replaces
 *     the phone's earlier ones: only the newest is ever checked.
 *   verify(phone, code): one try is counted first (conditional UPDATE, so concurrent tries
 *     cannot exceed OTP_TRIES_MAX), then the code is compared in constant time; a match consumes
 *     the code once and gives its try back. Over a day a phone has at most
 *     OTP_WRONG_TRIES_PER_DAY_MAX wrong tries, however many codes it asks for: 20 guesses of
 *     10⁶ a day.
 *
 * Limits are checked under transaction-scoped advisory locks on the address and the phone, so two
 * nodes cannot both pass a limit at its edge. Times come from `now` (tests move it).
 */
import { timingSafeEqual } from "node:crypto";
import { sql } from "drizzle-orm";
import { txRows, type Db } from "../db/client.ts";
import { fail, type Failure } from "../errors.ts";
import { newId } from "../ids.ts";
import type { Logger } from "../log.ts";
import { asciiDigits, maskPhone } from "./phone.ts";
import type { SmsSender } from "./sms.ts";

export const OTP_DIGITS = 6;
export const OTP_TTL_MS = 2 * 60_000;
export const OTP_TRIES_MAX = 5;
export const OTP_WRONG_TRIES_PER_DAY_MAX = 20;
export const OTP_RESEND_INTERVAL_MS = 60_000;
export const OTP_SENDS_PER_PHONE_PER_HOUR_MAX = 5;
export const OTP_SENDS_PER_ADDRESS_PER_HOUR_MAX = 20;
const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;

/** A uniformly random code of OTP_DIGITS digits (rejection sampling: no modulo bias). */
export function generateCode(): string {
  const range = 10 ** OTP_DIGITS;
  const limit = Math.floor(0x1_0000_0000 / range) * range;
  for (;;) {
    const [value] = crypto.getRandomValues(new Uint32Array(1));
    if (value! < limit) return String(value! % range).padStart(OTP_DIGITS, "0");
  }
}

export function codeHash(secret: string, phone: string, code: string): string {
  return new Bun.CryptoHasher("sha256", secret).update(`otp:${phone}:${code}`).digest("hex");
}

export interface OtpOptions {
  secret: string;
  sender: SmsSender;
  log: Logger;
  now?: () => number;
}

export interface CodeSent {
  expiresInS: number;
  resendInS: number;
}

/** A time as a SQL parameter both drivers accept (postgres.js refuses Date objects in raw SQL). */
const at = (ms: number) => sql`${new Date(ms).toISOString()}::timestamptz`;
const ceilS = (ms: number) => Math.max(1, Math.ceil(ms / 1000));

export class OtpService {
  constructor(
    private readonly db: Db,
    private readonly options: OtpOptions,
  ) {}

  private now(): number {
    return this.options.now?.() ?? Date.now();
  }

  async send(phone: string, clientAddress: string): Promise<CodeSent | Failure> {
    const now = this.now();
    const code = generateCode();
    const refused = await this.db.orm.transaction(async (tx) => {
      await tx.execute(sql`SELECT pg_advisory_xact_lock(hashtext(${`otp-address:${clientAddress}`}))`);
      await tx.execute(sql`SELECT pg_advisory_xact_lock(hashtext(${`otp-phone:${phone}`}))`);
      const hourAgo = at(now - HOUR_MS);
      const [byPhone] = await txRows<{ sends: number; newest: string | Date | null; wrong: number }>(
        tx,
        sql`
        SELECT count(*) FILTER (WHERE created_at > ${hourAgo})::int AS sends,
               max(created_at) AS newest,
               coalesce(sum(tries), 0)::int AS wrong
        FROM otp_codes WHERE phone = ${phone} AND created_at > ${at(now - DAY_MS)}`,
      );
      const [byAddress] = await txRows<{ sends: number }>(
        tx,
        sql`
        SELECT count(*)::int AS sends FROM otp_codes WHERE client_address = ${clientAddress} AND created_at > ${hourAgo}`,
      );
      const newestMs = byPhone?.newest ? new Date(byPhone.newest).getTime() : null;
      if ((byPhone?.wrong ?? 0) >= OTP_WRONG_TRIES_PER_DAY_MAX) return lockedOut();
      if (newestMs !== null && now - newestMs < OTP_RESEND_INTERVAL_MS) {
        const waitS = ceilS(OTP_RESEND_INTERVAL_MS - (now - newestMs));
        return fail("code_resend_limited", `A code was just sent to this number; ask again in ${waitS} s.`, { retryAfterS: waitS });
      }
      if ((byPhone?.sends ?? 0) >= OTP_SENDS_PER_PHONE_PER_HOUR_MAX) {
        return fail("code_resend_limited", "Too many codes were sent to this number this hour; try again later.", { retryAfterS: 3600 });
      }
      if ((byAddress?.sends ?? 0) >= OTP_SENDS_PER_ADDRESS_PER_HOUR_MAX) {
        return fail("code_resend_limited", "Too many codes were asked for from your network this hour; try again later.", {
          retryAfterS: 3600,
        });
      }
      await tx.execute(sql`
        INSERT INTO otp_codes (id, phone, code_hash, client_address, expires_at, created_at)
        VALUES (${newId("otp")}, ${phone}, ${codeHash(this.options.secret, phone, code)}, ${clientAddress}, ${at(now + OTP_TTL_MS)}, ${at(now)})`);
      return null;
    });
    if (refused) return refused;
    const failed = await this.options.sender.sendCode(phone, code);
    if (failed) return failed;
    this.options.log("info", "otp_sent", { phone: maskPhone(phone), sender: this.options.sender.kind });
    return { expiresInS: OTP_TTL_MS / 1000, resendInS: OTP_RESEND_INTERVAL_MS / 1000 };
  }

  /** null when the code is right (and now used up), else why not. */
  async verify(phone: string, input: string): Promise<Failure | null> {
    const code = asciiDigits(input.trim());
    if (!new RegExp(`^\\d{${OTP_DIGITS}}$`).test(code)) {
      return fail("code_invalid", `The code is ${OTP_DIGITS} digits.`, { param: "code" });
    }
    const now = new Date(this.now());
    const [day] = await this.db.rows<{ wrong: number }>(sql`
      SELECT coalesce(sum(tries), 0)::int AS wrong FROM otp_codes WHERE phone = ${phone} AND created_at > ${at(now.getTime() - DAY_MS)}`);
    if ((day?.wrong ?? 0) >= OTP_WRONG_TRIES_PER_DAY_MAX) return lockedOut();
    const [tried] = await this.db.rows<{ id: string; code_hash: string; tries: number }>(sql`
      UPDATE otp_codes SET tries = tries + 1
      WHERE id = (SELECT id FROM otp_codes WHERE phone = ${phone} ORDER BY created_at DESC LIMIT 1)
        AND consumed_at IS NULL AND expires_at > ${at(now.getTime())} AND tries < ${OTP_TRIES_MAX}
      RETURNING id, code_hash, tries`);
    if (!tried) return this.whyNot(phone, now);
    const expected = Buffer.from(tried.code_hash, "hex");
    const given = Buffer.from(codeHash(this.options.secret, phone, code), "hex");
    if (!timingSafeEqual(expected, given)) {
      const left = OTP_TRIES_MAX - tried.tries;
      this.options.log("info", "otp_wrong", { phone: maskPhone(phone), triesLeft: left });
      if (left === 0)
        return fail("code_attempts_exceeded", "That code was wrong 5 times and no longer works; ask for a new code.", { param: "code" });
      return fail("code_invalid", `Wrong code; ${left} ${left === 1 ? "try" : "tries"} left.`, { param: "code" });
    }
    const [used] = await this.db.rows(sql`
      UPDATE otp_codes SET consumed_at = ${at(now.getTime())}, tries = tries - 1 WHERE id = ${tried.id} AND consumed_at IS NULL RETURNING id`);
    return used ? null : expired();
  }

  private async whyNot(phone: string, now: Date): Promise<Failure> {
    const [latest] = await this.db.rows<{ tries: number; consumed_at: unknown; expires_at: string | Date }>(sql`
      SELECT tries, consumed_at, expires_at FROM otp_codes WHERE phone = ${phone} ORDER BY created_at DESC LIMIT 1`);
    if (latest && latest.consumed_at === null && new Date(latest.expires_at) > now && latest.tries >= OTP_TRIES_MAX) {
      return fail("code_attempts_exceeded", "That code was wrong 5 times and no longer works; ask for a new code.", { param: "code" });
    }
    return expired();
  }
}

function expired(): Failure {
  return fail("code_expired", "This code has expired or was already used; ask for a new code.", { param: "code" });
}

function lockedOut(): Failure {
  return fail("code_attempts_exceeded", "Too many wrong codes for this number today; try again tomorrow.", { retryAfterS: DAY_MS / 1000 });
}
