/**
 * TOTP (RFC 6238 over RFC 4226's HOTP): HMAC-SHA-1, 6 digits, 30 s steps, a code accepted one step
 * either side of now for clocks that drift. The caller keeps the newest step it accepted, so a code
 * is good once (`verifyTotp` returns the step; a step not above the last one is refused).
 */
import { createHmac, randomBytes } from "node:crypto";

export const TOTP_STEP_S = 30;
export const TOTP_DIGITS = 6;
/** Steps either side of now a code may come from. */
export const TOTP_DRIFT_STEPS = 1;
/** 20 random bytes: SHA-1's block-sized key, as RFC 4226 recommends (160 bits). */
export const TOTP_SECRET_BYTES = 20;

const BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

export function base32Encode(bytes: Uint8Array): string {
  let bits = 0;
  let value = 0;
  let out = "";
  for (const byte of bytes) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += BASE32[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += BASE32[(value << (5 - bits)) & 31];
  return out;
}

export function base32Decode(text: string): Buffer {
  let bits = 0;
  let value = 0;
  const out: number[] = [];
  for (const char of text.replace(/=+$/, "").toUpperCase()) {
    const index = BASE32.indexOf(char);
    if (index < 0) throw new Error("not base32");
    value = (value << 5) | index;
    bits += 5;
    if (bits >= 8) {
      out.push((value >>> (bits - 8)) & 255);
      bits -= 8;
    }
  }
  return Buffer.from(out);
}

export function newTotpSecret(): string {
  return base32Encode(randomBytes(TOTP_SECRET_BYTES));
}

/** RFC 4226's HOTP of a counter, `digits` long. */
export function hotp(key: Uint8Array, counter: number, digits = TOTP_DIGITS): string {
  const message = Buffer.alloc(8);
  message.writeBigUInt64BE(BigInt(counter));
  const mac = createHmac("sha1", key).update(message).digest();
  const offset = mac[mac.length - 1]! & 0x0f;
  const binary = mac.readUInt32BE(offset) & 0x7fffffff;
  return String(binary % 10 ** digits).padStart(digits, "0");
}

export function totpStep(nowMs: number): number {
  return Math.floor(nowMs / 1000 / TOTP_STEP_S);
}

/** The step a code belongs to (within the drift), or null; never a step at or below `lastStep`. */
export function verifyTotp(secret: string, code: string, nowMs: number, lastStep: number): number | null {
  if (!/^[0-9]{6}$/.test(code)) return null;
  const key = base32Decode(secret);
  const now = totpStep(nowMs);
  for (let step = now - TOTP_DRIFT_STEPS; step <= now + TOTP_DRIFT_STEPS; step++) {
    if (step > lastStep && hotp(key, step) === code) return step;
  }
  return null;
}

/** The enrolment URI an authenticator app reads (Key Uri Format), shown once. */
export function otpauthUri(secret: string, login: string, issuer = "Darvaze"): string {
  const label = encodeURIComponent(`${issuer}:${login}`);
  const query = new URLSearchParams({ secret, issuer, algorithm: "SHA1", digits: String(TOTP_DIGITS), period: String(TOTP_STEP_S) });
  return `otpauth://totp/${label}?${query}`;
}
