/**
 * One-time sign-in codes, built so that a stranger who knows a phone number can neither lock its
 * owner out nor guess their way in:
 *
 *   send(phone, address): a new 6-digit code (uniform, CSPRNG), stored as HMAC(secret, phone:code)
 *     with a life of OTP_TTL_MS, and sent; the reply carries the code's id, which only the one who
 *     asked learns. Limits count the requester (the phone asked from this client address, IPv6 per
 *     /64): one a minute, OTP_SENDS_PER_PHONE_ADDRESS_PER_DAY_MAX a day; the address, whatever
 *     phones it asks for, OTP_SENDS_PER_ADDRESS_PER_HOUR_MAX an hour; and the phone from every
 *     address together, OTP_SENDS_PER_PHONE_PER_DAY_MAX a day. A stranger's own limits run out
 *     long before the phone's, so the owner, from their own network, still gets a code.
 *   verify(phone, codeId, code): a try is counted on that one code first (conditional UPDATE, so
 *     concurrent tries cannot exceed OTP_TRIES_MAX), then the code is compared in constant time; a
 *     match consumes the code once and gives its try back. Wrong tries kill the code, never the
 *     phone, and a stranger cannot even name the owner's code.
 *
 * So in any 24 hours a phone's codes take at most OTP_SENDS_PER_PHONE_PER_DAY_MAX × OTP_TRIES_MAX
 * = 100 guesses, from all addresses together, each right with a chance of 10⁻⁶: at most 1 in
 * 10,000 a day (OTP_GUESS_CHANCE_PER_DAY_MAX, asserted below).
 *
 * Limits are checked under transaction-scoped advisory locks on the address and the phone, so two
 * nodes cannot both pass a limit at its edge. Times come from `now` (tests move it).
 */
import { strict as assert } from "node:assert";
import { timingSafeEqual } from "node:crypto";
import { sql } from "drizzle-orm";
import { txRows, type Db } from "../db/client.ts";
import { fail, type Failure } from "../errors.ts";
import { newId } from "../ids.ts";
import type { Logger } from "../log.ts";
import { addressBucket } from "./address.ts";
import { asciiDigits, maskPhone } from "./phone.ts";
import type { SmsSender } from "./sms.ts";

export const OTP_DIGITS = 6;
export const OTP_TTL_MS = 2 * 60_000;
export const OTP_TRIES_MAX = 5;
/** Between two codes for one phone asked from one address. */
export const OTP_RESEND_INTERVAL_MS = 60_000;
/** Codes for one phone asked from one address (IPv6: one /64) in any 24 hours. */
export const OTP_SENDS_PER_PHONE_ADDRESS_PER_DAY_MAX = 5;
/** Codes for one phone from all addresses together in any 24 hours: what bounds guessing. */
export const OTP_SENDS_PER_PHONE_PER_DAY_MAX = 20;
/** Codes asked from one address (IPv6: one /64), whatever the phones, in any hour. */
export const OTP_SENDS_PER_ADDRESS_PER_HOUR_MAX = 20;
/** Guesses a phone's codes of any 24 hours can take, from every address together. */
export const OTP_GUESSES_PER_PHONE_PER_DAY_MAX = OTP_SENDS_PER_PHONE_PER_DAY_MAX * OTP_TRIES_MAX;
/** The promise: a stranger guesses a phone's code with a chance of at most this a day. */
export const OTP_GUESS_CHANCE_PER_DAY_MAX = 1 / 10_000;
assert(OTP_GUESSES_PER_PHONE_PER_DAY_MAX / 10 ** OTP_DIGITS <= OTP_GUESS_CHANCE_PER_DAY_MAX);
assert(OTP_SENDS_PER_PHONE_ADDRESS_PER_DAY_MAX < OTP_SENDS_PER_PHONE_PER_DAY_MAX);
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
  /** Names the code at sign-in: only the requester knows it, so nobody else can try (and kill) their code. */
  codeId: string;
  expiresInS: number;
  resendInS: number;
}

/** A time as a SQL parameter both drivers accept (postgres.js refuses Date objects in raw SQL). */
const at = (ms: number) => sql`${new Date(ms).toISOString()}::timestamptz`;
const ceilS = (ms: number) => Math.max(1, Math.ceil(ms / 1000));

/** What the limits count when a code is asked for (see `send`). */
interface SendCounts {
  /** The phone's codes of the last 24 hours, from every address. */
  phoneDay: number;
  phoneDayOldest: Date | string | null;
  /** … of them asked from this address. */
  requesterDay: number;
  requesterDayOldest: Date | string | null;
  requesterNewest: Date | string | null;
  /** Codes this address asked for in the last hour, whatever the phone. */
  addressHour: number;
  addressHourOldest: Date | string | null;
}

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
    const address = addressBucket(clientAddress);
    const code = generateCode();
    const codeId = newId("otp");
    const refused = await this.db.orm.transaction(async (tx) => {
      await tx.execute(sql`SELECT pg_advisory_xact_lock(hashtext(${`otp-address:${address}`}))`);
      await tx.execute(sql`SELECT pg_advisory_xact_lock(hashtext(${`otp-phone:${phone}`}))`);
      const [counts] = await txRows<SendCounts>(
        tx,
        sql`
        SELECT count(*)::int AS "phoneDay", min(created_at) AS "phoneDayOldest",
               count(*) FILTER (WHERE client_address = ${address})::int AS "requesterDay",
               min(created_at) FILTER (WHERE client_address = ${address}) AS "requesterDayOldest",
               max(created_at) FILTER (WHERE client_address = ${address}) AS "requesterNewest",
               (SELECT count(*)::int FROM otp_codes WHERE client_address = ${address} AND created_at > ${at(now - HOUR_MS)}) AS "addressHour",
               (SELECT min(created_at) FROM otp_codes WHERE client_address = ${address} AND created_at > ${at(now - HOUR_MS)}) AS "addressHourOldest"
        FROM otp_codes WHERE phone = ${phone} AND created_at > ${at(now - DAY_MS)}`,
      );
      const refusal = sendRefusal(counts!, now);
      if (refusal) return refusal;
      await tx.execute(sql`
        INSERT INTO otp_codes (id, phone, code_hash, client_address, expires_at, created_at)
        VALUES (${codeId}, ${phone}, ${codeHash(this.options.secret, phone, code)}, ${address}, ${at(now + OTP_TTL_MS)}, ${at(now)})`);
      return null;
    });
    if (refused) return refused;
    const failed = await this.options.sender.sendCode(phone, code);
    if (failed) return failed;
    this.options.log("info", "otp_sent", { phone: maskPhone(phone), sender: this.options.sender.kind });
    return { codeId, expiresInS: OTP_TTL_MS / 1000, resendInS: OTP_RESEND_INTERVAL_MS / 1000 };
  }

  /** null when `code` is the code `codeId` names for this phone (now used up), else why not. */
  async verify(phone: string, codeId: string, input: string): Promise<(Failure & { triesLeft?: number }) | null> {
    const code = asciiDigits(input.trim());
    if (!new RegExp(`^\\d{${OTP_DIGITS}}$`).test(code)) {
      return fail("code_invalid", `The code is ${OTP_DIGITS} digits.`, { param: "code" });
    }
    const now = new Date(this.now());
    const [tried] = await this.db.rows<{ id: string; code_hash: string; tries: number }>(sql`
      UPDATE otp_codes SET tries = tries + 1
      WHERE id = ${codeId} AND phone = ${phone}
        AND consumed_at IS NULL AND expires_at > ${at(now.getTime())} AND tries < ${OTP_TRIES_MAX}
      RETURNING id, code_hash, tries`);
    if (!tried) return this.whyNot(phone, codeId, now);
    const expected = Buffer.from(tried.code_hash, "hex");
    const given = Buffer.from(codeHash(this.options.secret, phone, code), "hex");
    if (!timingSafeEqual(expected, given)) {
      const left = OTP_TRIES_MAX - tried.tries;
      this.options.log("info", "otp_wrong", { phone: maskPhone(phone), triesLeft: left });
      if (left === 0) return deadCode();
      return { ...fail("code_invalid", `Wrong code; ${left} ${left === 1 ? "try" : "tries"} left.`, { param: "code" }), triesLeft: left };
    }
    const [used] = await this.db.rows(sql`
      UPDATE otp_codes SET consumed_at = ${at(now.getTime())}, tries = tries - 1 WHERE id = ${tried.id} AND consumed_at IS NULL RETURNING id`);
    return used ? null : expired();
  }

  private async whyNot(phone: string, codeId: string, now: Date): Promise<Failure> {
    const [code] = await this.db.rows<{ tries: number; consumed_at: unknown; expires_at: string | Date }>(sql`
      SELECT tries, consumed_at, expires_at FROM otp_codes WHERE id = ${codeId} AND phone = ${phone}`);
    if (code && code.consumed_at === null && new Date(code.expires_at) > now && code.tries >= OTP_TRIES_MAX) return deadCode();
    return expired();
  }
}

/** Why a code may not be sent now, or null. The requester's own limits come first: they are what a stranger runs into. */
function sendRefusal(counts: SendCounts, now: number): Failure | null {
  const waitS = (oldest: Date | string | null, windowMs: number) => ceilS(new Date(oldest ?? now).getTime() + windowMs - now);
  const newestMs = counts.requesterNewest ? new Date(counts.requesterNewest).getTime() : null;
  if (newestMs !== null && now - newestMs < OTP_RESEND_INTERVAL_MS) {
    const retryAfterS = ceilS(OTP_RESEND_INTERVAL_MS - (now - newestMs));
    return fail("code_resend_limited", `A code was just sent to this number; ask again in ${retryAfterS} s.`, { retryAfterS });
  }
  if (counts.requesterDay >= OTP_SENDS_PER_PHONE_ADDRESS_PER_DAY_MAX) {
    const retryAfterS = waitS(counts.requesterDayOldest, DAY_MS);
    return fail("code_resend_limited", "Too many codes were asked for this number from your network today; try again later.", {
      retryAfterS,
    });
  }
  if (counts.addressHour >= OTP_SENDS_PER_ADDRESS_PER_HOUR_MAX) {
    const retryAfterS = waitS(counts.addressHourOldest, HOUR_MS);
    return fail("code_resend_limited", "Too many codes were asked for from your network this hour; try again later.", { retryAfterS });
  }
  if (counts.phoneDay >= OTP_SENDS_PER_PHONE_PER_DAY_MAX) {
    const retryAfterS = waitS(counts.phoneDayOldest, DAY_MS);
    return fail("code_resend_limited", "Too many codes were sent to this number today; try again later.", { retryAfterS });
  }
  return null;
}

function expired(): Failure {
  return fail("code_expired", "This code has expired or was already used; ask for a new code.", { param: "code" });
}

function deadCode(): Failure {
  return fail("code_attempts_exceeded", `That code was wrong ${OTP_TRIES_MAX} times and no longer works; ask for a new code.`, {
    param: "code",
  });
}
