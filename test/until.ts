/* A bounded wait for a condition, for tests: kept free of heavy imports so unit tests can use it. */

/** How often `until` looks again: short, since what it waits for is usually a message or two away. */
const UNTIL_POLL_MS = 5;

/**
 * Waits for a condition another task makes true, instead of sleeping a guessed time; throws when
 * `msMax` passes first, so a test waiting on something that never happens fails rather than goes on.
 */
export async function until(condition: () => boolean | Promise<boolean>, msMax = 5_000): Promise<void> {
  const deadline = performance.now() + msMax;
  while (!(await condition())) {
    if (performance.now() >= deadline) throw new Error(`condition not met within ${msMax} ms`);
    await Bun.sleep(UNTIL_POLL_MS);
  }
}
