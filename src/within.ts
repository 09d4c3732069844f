/**
 * A wait with a bound: what a promise settles to, or TIMED_OUT once `ms` have passed first. The
 * timer is cleared either way; the work itself goes on (a caller that must stop it cancels it).
 */

export const TIMED_OUT: unique symbol = Symbol("timed out");

/**
 * `work`'s value (or its rejection), or TIMED_OUT when it has not settled within `ms`.
 * @example if ((await within(db.rows(sql`SELECT 1`), 1_000)) === TIMED_OUT) return "no answer";
 */
export async function within<T>(work: Promise<T>, ms: number): Promise<T | typeof TIMED_OUT> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<typeof TIMED_OUT>((resolve) => {
    timer = setTimeout(() => resolve(TIMED_OUT), Math.max(0, ms));
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
  }
}
