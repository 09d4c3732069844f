/**
 * The known-device cookie: set at a successful sign-in, it tells a later code request for the
 * same phone from this browser apart from a stranger's, so the owner's requests have a cap of
 * their own (src/accountArea/otp.ts). It grants nothing else: no session, no key, no code.
 *
 *   <phone tag>.<device id>.<expiry, Unix s>.<HMAC-SHA256 under the console secret>
 *
 * The phone appears only as a tag (an HMAC of it), so the cookie does not tell whose it is; the
 * signature covers the phone itself, the device id and the expiry, so it cannot be moved to
 * another phone, renewed, or made up without the secret. Stateless: nothing is stored.
 */
import { timingSafeEqual } from "node:crypto";
import { randomBase62 } from "../ids.ts";

export const KNOWN_DEVICE_COOKIE = "dvz_device";
export const SECURE_KNOWN_DEVICE_COOKIE = `__Host-${KNOWN_DEVICE_COOKIE}`;
/** A known-device cookie lasts this long after the sign-in that set it (each sign-in renews it). */
export const KNOWN_DEVICE_TTL_S = 180 * 24 * 3_600;
/** Longer values are not ours: refused before any HMAC is computed. */
export const KNOWN_DEVICE_COOKIE_CHARS_MAX = 200;
const DEVICE_ID_CHARS = 22;

function mac(secret: string, label: string): string {
  return new Bun.CryptoHasher("sha256", secret).update(label).digest("base64url");
}

const phoneTag = (secret: string, phone: string) => mac(secret, `known-device-phone:${phone}`).slice(0, 16);
const signature = (secret: string, phone: string, deviceId: string, expiresS: number) =>
  mac(secret, `known-device:${phone}:${deviceId}:${expiresS}`);

/** A new cookie value for `phone`, valid KNOWN_DEVICE_TTL_S from `nowMs`; keeps `deviceId` when the browser had one. */
export function knownDeviceValue(secret: string, phone: string, nowMs: number, deviceId = randomBase62(DEVICE_ID_CHARS)): string {
  const expiresS = Math.floor(nowMs / 1000) + KNOWN_DEVICE_TTL_S;
  return `${phoneTag(secret, phone)}.${deviceId}.${expiresS}.${signature(secret, phone, deviceId, expiresS)}`;
}

/** The device id of a valid, unexpired cookie for `phone`; null for anything else. */
export function knownDeviceOf(secret: string, phone: string, value: string | null, nowMs: number): string | null {
  if (!value || value.length > KNOWN_DEVICE_COOKIE_CHARS_MAX) return null;
  const match = /^([\w-]{16})\.([0-9A-Za-z]{1,40})\.(\d{1,12})\.([\w-]{43})$/.exec(value);
  if (!match) return null;
  const [, tag, deviceId, expires, given] = match as unknown as [string, string, string, string, string];
  if (tag !== phoneTag(secret, phone) || Number(expires) * 1000 <= nowMs) return null;
  const expected = Buffer.from(signature(secret, phone, deviceId, Number(expires)));
  return timingSafeEqual(expected, Buffer.from(given)) ? deviceId : null;
}

/** The cookie as `set-cookie` sets it: Secure (and `__Host-`) when the console is reached over https. */
export function knownDeviceCookie(origin: string, value: string): string {
  const https = new URL(origin).protocol === "https:";
  return `${knownDeviceCookieName(origin)}=${value}; Path=/; HttpOnly; SameSite=Lax; Max-Age=${KNOWN_DEVICE_TTL_S}${https ? "; Secure" : ""}`;
}

export function knownDeviceCookieName(origin: string): string {
  return new URL(origin).protocol === "https:" ? SECURE_KNOWN_DEVICE_COOKIE : KNOWN_DEVICE_COOKIE;
}
