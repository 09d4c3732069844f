/**
 * Suites that need real services (NATS, PostgreSQL) run only when the environment names them.
 * When they cannot run they are skipped LOUDLY, with a count, never silently; and each test that
 * does run on a service appends a line to $DARVAZE_SERVICE_TESTS_LOG, so that CI can fail a
 * services pass that ran none of them.
 */
import { appendFileSync } from "node:fs";
import { describe, test } from "bun:test";

export type Service = "nats" | "postgres";

const VARIABLE: Record<Service, string> = { nats: "NATS_URL", postgres: "DATABASE_URL" };

// biome-ignore lint/suspicious/noConfusingVoidType: the shape of bun:test's own test function
type TestFn = (name: string, fn: () => void | Promise<unknown>, timeoutMs?: number) => void;

function missing(needs: Service[]): Service[] {
  return needs.filter((s) => !process.env[VARIABLE[s]]);
}

/** `describe` for a suite that needs the given services; `it` inside registers its tests. */
export function describeWith(needs: Service[], name: string, body: (it: TestFn) => void): void {
  const absent = missing(needs);
  if (absent.length === 0) {
    describe(name, () =>
      body((testName, fn, timeoutMs) =>
        test(
          testName,
          async () => {
            const log = process.env.DARVAZE_SERVICE_TESTS_LOG;
            if (log) appendFileSync(log, `${name} > ${testName}\n`);
            await fn();
          },
          timeoutMs,
        ),
      ),
    );
    return;
  }
  const needed = absent.map((s) => VARIABLE[s]).join(" and ");
  describe.skip(name, () => {
    let count = 0;
    body((testName, fn, timeoutMs) => {
      count++;
      test.skip(testName, fn, timeoutMs);
    });
    process.stderr.write(`\n*** SKIPPED ${count} test(s) in "${name}": they need ${needed} (real services) ***\n\n`);
  });
}
