/* Bounded waits for a condition, for tests: kept free of heavy imports so unit tests can use it. */

/** How often a wait looks again: short, since what it waits for is usually a message or two away. */
const UNTIL_POLL_MS = 5;
/** The longest any wait may be given: a wait without end hangs a test instead of failing it. */
const UNTIL_MS_MAX = 180_000;
/** How much of the awaited condition's source and of the last value a failure quotes. */
const UNTIL_QUOTE_CHARS_MAX = 300;

export interface UntilOptions {
  /** How long to wait before failing (default 5 s; at most `UNTIL_MS_MAX`). */
  msMax?: number;
  /** What is awaited, for the failure message; the condition's source when absent. */
  what?: string;
  /** How long to pause between looks: longer for a look that costs (a query, a page round trip). */
  pollMs?: number;
}

export interface UntilValueOptions<T> extends UntilOptions {
  /** Which value ends the wait; by default any value but `undefined` and `null`. */
  accept?: (value: T) => boolean;
}

/**
 * Waits for a condition another task makes true, instead of sleeping a guessed time; throws when
 * `msMax` passes first, so a test waiting on something that never happens fails rather than goes on.
 *
 * @example await until(() => sink.writes === 2, { what: "both writes", msMax: 10_000 });
 */
export async function until(condition: () => boolean | Promise<boolean>, options: number | UntilOptions = {}): Promise<void> {
  const resolved = typeof options === "number" ? { msMax: options } : options;
  await untilValue(condition, { ...resolved, what: resolved.what ?? condition.toString(), accept: (ok) => Boolean(ok) });
}

/**
 * Waits until `read` gives a value (or one `accept` takes) and returns it; a failure names what was
 * awaited and the last value read, so it says how far things got.
 *
 * @example const logged = await untilValue(() => sim.log.byRequestId("abort-1")[0]);
 */
export function untilValue<T>(read: () => T | Promise<T>, options: UntilOptions & { accept: (value: T) => boolean }): Promise<T>;
export function untilValue<T>(read: () => T | Promise<T>, options?: UntilOptions): Promise<NonNullable<T>>;
export async function untilValue<T>(read: () => T | Promise<T>, options: UntilValueOptions<T> = {}): Promise<T> {
  const msMax = options.msMax ?? 5_000;
  if (!(msMax > 0 && msMax <= UNTIL_MS_MAX)) throw new Error(`a wait of ${msMax} ms is outside (0, ${UNTIL_MS_MAX}] ms`);
  const accept = options.accept ?? ((value: T) => value !== undefined && value !== null);
  const deadline = performance.now() + msMax;
  for (;;) {
    const value = await read();
    if (accept(value)) return value;
    if (performance.now() >= deadline) {
      const what = quote(options.what ?? read.toString());
      throw new Error(`not met within ${msMax} ms: ${what}; last value seen: ${quote(describe(value))}`);
    }
    await Bun.sleep(options.pollMs ?? UNTIL_POLL_MS);
  }
}

function describe(value: unknown): string {
  if (value === undefined) return "undefined";
  try {
    return JSON.stringify(value, (_, v) => (typeof v === "bigint" ? `${v}n` : v)) ?? String(value);
  } catch {
    return String(value);
  }
}

function quote(text: string): string {
  const oneLine = text.replace(/\s+/g, " ").trim();
  return oneLine.length > UNTIL_QUOTE_CHARS_MAX ? `${oneLine.slice(0, UNTIL_QUOTE_CHARS_MAX)}…` : oneLine;
}
