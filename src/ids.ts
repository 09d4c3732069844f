/** Identifiers and secrets from the system CSPRNG, in base62. */

const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/** Bytes ≥ this are rejected so every base62 digit is equally likely (248 = 62 × 4). */
const UNBIASED_LIMIT = 248;
/**
 * Random bytes drawn from the CSPRNG at once, each used for one digit and never again: a draw per
 * identifier cost more than the identifier (one per request at least).
 */
export const RANDOM_POOL_BYTES = 4_096;

let pool = new Uint8Array(0);
let taken = 0;

function randomByte(): number {
  if (taken === pool.length) {
    pool = crypto.getRandomValues(new Uint8Array(RANDOM_POOL_BYTES));
    taken = 0;
  }
  return pool[taken++]!;
}

export function randomBase62(length: number): string {
  let out = "";
  while (out.length < length) {
    const byte = randomByte();
    if (byte < UNBIASED_LIMIT) out += BASE62[byte % 62];
  }
  return out;
}

/** `acc_…`, `key_…`, `req_…`: 20 base62 characters (~119 bits). */
export function newId(prefix: string): string {
  return `${prefix}_${randomBase62(20)}`;
}
