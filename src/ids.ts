/** Identifiers and secrets from the system CSPRNG, in base62. */

const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/** Bytes ≥ this are rejected so every base62 digit is equally likely (248 = 62 × 4). */
const UNBIASED_LIMIT = 248;

export function randomBase62(length: number): string {
  let out = "";
  while (out.length < length) {
    for (const byte of crypto.getRandomValues(new Uint8Array(length * 2))) {
      if (byte < UNBIASED_LIMIT) out += BASE62[byte % 62];
      if (out.length === length) break;
    }
  }
  return out;
}

/** `acc_…`, `key_…`, `req_…`: 20 base62 characters (~119 bits). */
export function newId(prefix: string): string {
  return `${prefix}_${randomBase62(20)}`;
}
