/**
 * API key secrets. A key is `<KEY_PREFIX><40 base62 characters>`; only HMAC-SHA256(pepper, key)
 * is stored, so a stolen database does not yield usable keys and a lookup is one hash + one
 * indexed read. The full key is returned once, at creation.
 */
import { randomBase62 } from "../ids.ts";

export const KEY_SECRET_LENGTH = 40;

export function generateKey(prefix: string): string {
  return prefix + randomBase62(KEY_SECRET_LENGTH);
}

export function hashKey(key: string, pepper: string): string {
  return new Bun.CryptoHasher("sha256", pepper).update(key).digest("hex");
}

/** `sk-dvz-…AbCd`: recognisable in a list, useless to call with. */
export function displayKey(key: string, prefix: string): string {
  return `${prefix}…${key.slice(-4)}`;
}

/** Cheap shape check before any hashing: the prefix and the base62 body of the right length. */
export function looksLikeKey(candidate: string, prefix: string): boolean {
  if (!candidate.startsWith(prefix) || candidate.length !== prefix.length + KEY_SECRET_LENGTH) return false;
  for (let i = prefix.length; i < candidate.length; i++) {
    const c = candidate.charCodeAt(i);
    const ok = (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122);
    if (!ok) return false;
  }
  return true;
}
