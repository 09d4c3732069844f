/** What the benchmarks' command lines share: a count kept in bounds and `--env NAME=value` pairs. */

/**
 * A count flag as a number from 1 to `max`; `fallback` where it is not a number (or 0).
 * @example const rounds = countFlag(flags.rounds, { fallback: 3, max: 10 });
 */
export function countFlag(text: string | undefined, bounds: { fallback: number; max: number }): number {
  return Math.min(bounds.max, Math.max(1, Number(text) || bounds.fallback));
}

/**
 * The gateway's environment from repeated `--env NAME=value`; anything else ends the run with its
 * usage, named after `bench` (a silently wrong variable would measure the wrong setting).
 * @example const env = envFlags(flags.env, "bench/tail.ts");
 */
export function envFlags(pairs: string[], bench: string): Record<string, string> {
  return Object.fromEntries(
    pairs.map((text) => {
      const at = text.indexOf("=");
      if (at < 1) {
        console.error(`${bench}: --env takes NAME=value, not ${JSON.stringify(text)}`);
        process.exit(2);
      }
      return [text.slice(0, at), text.slice(at + 1)];
    }),
  );
}
