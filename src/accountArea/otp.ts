/**
 * One-time sign-in codes, built so that a stranger who knows a phone number can neither lock its
 * owner out nor guess their way in:
 *
 *   send(phone, address, device): a new 6-digit code (uniform, CSPRNG), stored as HMAC(secret,
 *     phone:code) with a life of OTP_TTL_MS, and sent; the reply carries the code's id, which only
 *     the one who asked learns. A known device of the phone (its signed cookie, knownDevice.ts) is
 *     counted apart: one a minute per device, OTP_SENDS_PER_PHONE_KNOWN_PER_DAY_MAX a day for the
 *     phone's devices together, and nothing a stranger does touches that. An unknown requester is
 *     counted by its client address (IPv6 per /64): one a minute and
 *     OTP_SENDS_PER_PHONE_ADDRESS_PER_DAY_MAX a day for the phone; OTP_SENDS_PER_ADDRESS_PER_HOUR_MAX
 *     an hour whatever the phones; shares of the SMS budget a day per address and per range (IPv4
 *     /24, IPv6 /48: smsCeilings), so one network cannot drain it; and all unknown requesters
 *     together OTP_SENDS_PER_PHONE_UNKNOWN_PER_DAY_MAX a day for the phone.
 *   verify(phone, codeId, code): a try is counted on that one code first (conditional UPDATE, so
 *     concurrent tries cannot exceed OTP_TRIES_MAX), then the code is compared in constant time; a
 *     match consumes the code once and gives its try back. Wrong tries kill the code, never the
 *     phone, and a stranger cannot even name the owner's code.
 *
 * So in any 24 hours a phone's codes take at most OTP_SENDS_PER_PHONE_PER_DAY_MAX × OTP_TRIES_MAX
 * = 100 guesses, from all addresses together, each right with a chance of 10⁻⁶: at most 1 in
 * 10,000 a day (OTP_GUESS_CHANCE_PER_DAY_MAX, asserted below).
 *
 * Limits are checked under transaction-scoped advisory locks on the address, the range and the
 * phone, so two nodes cannot both pass a limit at its edge. Times come from `now` (tests move it).
 */
import { strict as assert } from "node:assert";
import { timingSafeEqual } from "node:crypto";
import { sql } from "drizzle-orm";
import { txRows, type Db } from "../db/client.ts";
import { fail, type Failure } from "../errors.ts";
import { newId } from "../ids.ts";
import type { Logger } from "../log.ts";
import { addressBucket, addressRange } from "./address.ts";
import { asciiDigits, maskPhone } from "./phone.ts";
import type { SmsSender } from "./sms.ts";

export const OTP_DIGITS = 6;
export const OTP_TTL_MS = 2 * 60_000;
export const OTP_TRIES_MAX = 5;
/** Between two codes for one phone asked from one address, or by one known device. */
export const OTP_RESEND_INTERVAL_MS = 60_000;
/** Codes for one phone asked from one address (IPv6: one /64) by unknown requesters, in any 24 hours. */
export const OTP_SENDS_PER_PHONE_ADDRESS_PER_DAY_MAX = 5;
/** Codes for one phone asked by unknown requesters (no known-device cookie for it), all addresses together, in any 24 hours. */
export const OTP_SENDS_PER_PHONE_UNKNOWN_PER_DAY_MAX = 8;
/** Codes for one phone asked by its known devices together in any 24 hours: a cap no stranger can spend. */
export const OTP_SENDS_PER_PHONE_KNOWN_PER_DAY_MAX = 12;
/** Codes for one phone, whoever asked, in any 24 hours: what bounds guessing. */
export const OTP_SENDS_PER_PHONE_PER_DAY_MAX = OTP_SENDS_PER_PHONE_UNKNOWN_PER_DAY_MAX + OTP_SENDS_PER_PHONE_KNOWN_PER_DAY_MAX;
/** Codes unknown requesters ask from one address (IPv6: one /64), whatever the phones, in any hour. */
export const OTP_SENDS_PER_ADDRESS_PER_HOUR_MAX = 20;
/**
 * Of the day's SMS budget (SMS_DAILY_BUDGET_MAX), what unknown requesters may spend in any 24
 * hours from one address and from one range (IPv4 /24, IPv6 /48): so one network cannot drain it.
 */
export const SMS_BUDGET_SHARE_PER_ADDRESS_MAX = 0.02;
export const SMS_BUDGET_SHARE_PER_RANGE_MAX = 0.05;
/** Guesses a phone's codes of any 24 hours can take, from every address together. */
export const OTP_GUESSES_PER_PHONE_PER_DAY_MAX = OTP_SENDS_PER_PHONE_PER_DAY_MAX * OTP_TRIES_MAX;
/** The promise: a stranger guesses a phone's code with a chance of at most this a day. */
export const OTP_GUESS_CHANCE_PER_DAY_MAX = 1 / 10_000;
assert(OTP_GUESSES_PER_PHONE_PER_DAY_MAX / 10 ** OTP_DIGITS <= OTP_GUESS_CHANCE_PER_DAY_MAX);
assert(OTP_SENDS_PER_PHONE_ADDRESS_PER_DAY_MAX < OTP_SENDS_PER_PHONE_UNKNOWN_PER_DAY_MAX);
assert(SMS_BUDGET_SHARE_PER_ADDRESS_MAX < SMS_BUDGET_SHARE_PER_RANGE_MAX && SMS_BUDGET_SHARE_PER_RANGE_MAX < 1);
const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;

/** Codes unknown requesters may be sent in any 24 hours from one address and from one range, for a daily SMS budget. */
export function smsCeilings(dailyMax: number): { addressDay: number; rangeDay: number } {
  return {
    addressDay: Math.max(1, Math.floor(dailyMax * SMS_BUDGET_SHARE_PER_ADDRESS_MAX)),
    rangeDay: Math.max(1, Math.floor(dailyMax * SMS_BUDGET_SHARE_PER_RANGE_MAX)),
  };
}

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
  /** SMS_DAILY_BUDGET_MAX: the ceilings per address and per range are shares of it (smsCeilings). */
  smsDailyMax: number;
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

/** A window's count and its oldest row: a limit refuses while `count` is at its max, until the oldest leaves the window. */
interface Window {
  count: number;
  oldest: Date | string | null;
}

/** What the limits count when a code is asked for (see `send`); `newest`: the requester's last code for this phone. */
type SendCounts = Record<"phoneDay" | "requesterDay" | "addressHour" | "addressDay" | "rangeDay", Window> & {
  newest: Date | string | null;
};

/** Who asks: a known device of the phone (its id), or an unknown requester at an address and range. */
interface Asker {
  address: string;
  range: string;
  deviceId: string | null;
}

export class OtpService {
  constructor(
    private readonly db: Db,
    private readonly options: OtpOptions,
  ) {}

  private now(): number {
    return this.options.now?.() ?? Date.now();
  }

  /**
   * `deviceId`: the known device asking (a valid known-device cookie for this phone), or null.
   * A known device's codes count only against the phone's known-device cap and the device's own
   * resend interval; an unknown requester's against its address, its range and the phone's
   * unknown cap, none of which a known device's codes use.
   */
  async send(phone: string, clientAddress: string, deviceId: string | null = null): Promise<CodeSent | Failure> {
    const now = this.now();
    const asker: Asker = { address: addressBucket(clientAddress), range: addressRange(clientAddress), deviceId };
    const code = generateCode();
    const codeId = newId("otp");
    const refused = await this.db.orm.transaction(async (tx) => {
      if (!deviceId) {
        await tx.execute(sql`SELECT pg_advisory_xact_lock(hashtext(${`otp-address:${asker.address}`}))`);
        await tx.execute(sql`SELECT pg_advisory_xact_lock(hashtext(${`otp-range:${asker.range}`}))`);
      }
      await tx.execute(sql`SELECT pg_advisory_xact_lock(hashtext(${`otp-phone:${phone}`}))`);
      const [row] = await txRows<Record<string, unknown>>(tx, countsQuery(phone, asker, now));
      const counts = sendCounts(row!);
      const refusal = sendRefusal(counts, now, deviceId ? null : smsCeilings(this.options.smsDailyMax));
      if (refusal) return refusal;
      await tx.execute(sql`
        INSERT INTO otp_codes (id, phone, code_hash, client_address, client_range, device_id, expires_at, created_at)
        VALUES (${codeId}, ${phone}, ${codeHash(this.options.secret, phone, code)}, ${asker.address}, ${asker.range},
                ${deviceId}, ${at(now + OTP_TTL_MS)}, ${at(now)})`);
      this.noteRange(asker, counts);
      return null;
    });
    if (refused) return refused;
    const failed = await this.options.sender.sendCode(phone, code, { knownDevice: deviceId !== null });
    if (failed) return failed;
    this.options.log("info", "otp_sent", {
      phone: maskPhone(phone),
      range: asker.range,
      knownDevice: deviceId !== null,
      sender: this.options.sender.kind,
    });
    return { codeId, expiresInS: OTP_TTL_MS / 1000, resendInS: OTP_RESEND_INTERVAL_MS / 1000 };
  }

  /** The operator learns which range spends the budget: once, as it reaches its ceiling. */
  private noteRange(asker: Asker, counts: SendCounts): void {
    const ceiling = smsCeilings(this.options.smsDailyMax).rangeDay;
    if (asker.deviceId || counts.rangeDay.count + 1 !== ceiling) return;
    this.options.log("warn", "sms_range_ceiling_reached", { range: asker.range, codesPerDayMax: ceiling });
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

/**
 * One row of counts. A known device is counted against the phone's known-device codes and its own
 * last code; an unknown requester against unknown requesters' codes only (its address's, its
 * range's, the phone's), so neither kind can spend the other's limits.
 */
function countsQuery(phone: string, asker: Asker, now: number) {
  const day = at(now - DAY_MS);
  const hour = at(now - HOUR_MS);
  const kind = asker.deviceId ? sql`device_id IS NOT NULL` : sql`device_id IS NULL`;
  const requester = asker.deviceId ? sql`device_id = ${asker.deviceId}` : sql`client_address = ${asker.address}`;
  const window = (where: ReturnType<typeof sql>, since: ReturnType<typeof sql>, name: string) =>
    sql`(SELECT json_build_object('count', count(*), 'oldest', min(created_at)) FROM otp_codes WHERE ${where} AND ${kind} AND created_at > ${since}) AS ${sql.identifier(name)}`;
  return sql`SELECT
    ${window(sql`phone = ${phone}`, day, "phoneDay")},
    ${window(sql`phone = ${phone} AND ${requester}`, day, "requesterDay")},
    ${window(sql`client_address = ${asker.address}`, hour, "addressHour")},
    ${window(sql`client_address = ${asker.address}`, day, "addressDay")},
    ${window(sql`client_range = ${asker.range}`, day, "rangeDay")},
    (SELECT max(created_at) FROM otp_codes WHERE phone = ${phone} AND ${requester} AND ${kind} AND created_at > ${day}) AS "newest"`;
}

/** The counts as both drivers return them (json as text or parsed). */
function sendCounts(row: Record<string, unknown>): SendCounts {
  const window = (value: unknown): Window => {
    const parsed = (typeof value === "string" ? JSON.parse(value) : value) as { count: number | string; oldest: string | null };
    return { count: Number(parsed.count), oldest: parsed.oldest };
  };
  return {
    phoneDay: window(row.phoneDay),
    requesterDay: window(row.requesterDay),
    addressHour: window(row.addressHour),
    addressDay: window(row.addressDay),
    rangeDay: window(row.rangeDay),
    newest: (row.newest as Date | string | null) ?? null,
  };
}

/**
 * Why a code may not be sent now, or null. The requester's own limits come first: they are what a
 * stranger runs into. `ceilings`: an unknown requester's shares of the SMS budget; null for a known device.
 */
function sendRefusal(counts: SendCounts, now: number, ceilings: ReturnType<typeof smsCeilings> | null): Failure | null {
  const newestMs = counts.newest ? new Date(counts.newest).getTime() : null;
  if (newestMs !== null && now - newestMs < OTP_RESEND_INTERVAL_MS) {
    const retryAfterS = ceilS(OTP_RESEND_INTERVAL_MS - (now - newestMs));
    return fail("code_resend_limited", `A code was just sent to this number; ask again in ${retryAfterS} s.`, { retryAfterS });
  }
  const limits: [Window, number, number, string][] = ceilings
    ? [
        [
          counts.requesterDay,
          OTP_SENDS_PER_PHONE_ADDRESS_PER_DAY_MAX,
          DAY_MS,
          "Too many codes were asked for this number from your network today",
        ],
        [counts.addressHour, OTP_SENDS_PER_ADDRESS_PER_HOUR_MAX, HOUR_MS, "Too many codes were asked for from your network this hour"],
        [counts.addressDay, ceilings.addressDay, DAY_MS, "Too many codes were asked for from your network today"],
        [counts.rangeDay, ceilings.rangeDay, DAY_MS, "Too many codes were asked for from your network's range today"],
        [counts.phoneDay, OTP_SENDS_PER_PHONE_UNKNOWN_PER_DAY_MAX, DAY_MS, "Too many codes were sent to this number today"],
      ]
    : [[counts.phoneDay, OTP_SENDS_PER_PHONE_KNOWN_PER_DAY_MAX, DAY_MS, "Too many codes were sent to this number today"]];
  for (const [window, max, windowMs, message] of limits) {
    if (window.count < max) continue;
    const retryAfterS = ceilS(new Date(window.oldest ?? now).getTime() + windowMs - now);
    return fail("code_resend_limited", `${message}; try again later.`, { retryAfterS });
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
