/** The 1,000-keys goals: the many-keys row of a target against its own hot-key row. */
import { expect, test } from "bun:test";
import type { Measurement } from "./measurement.ts";
import { MANY_KEYS, manyKeysGoalsTable } from "./report.ts";

const row = (target: string, workload: string, rps: number, p99Ms: number): Measurement => ({
  target,
  workload,
  requests: rps,
  rps,
  p50Ms: 1,
  p90Ms: 1,
  p99Ms,
  maxMs: p99Ms,
  errors: 0,
});

test("each target's 1,000 keys are judged against its own hot key, in req/s and p99", () => {
  const table = manyKeysGoalsTable([
    row("embedded", "chat c=64", 6_000, 50),
    row("embedded", MANY_KEYS, 5_700, 90),
    row("nats", "chat c=64", 7_000, 20),
    row("nats", MANY_KEYS, 5_600, 45),
    row("bare", "chat c=64", 30_000, 5),
  ]);
  expect(table.split("\n").slice(2)).toEqual(["| embedded | 95% ✓ | 1.80× ✓ |", "| nats | 80% ✗ | 2.25× ✗ |"]);
});

test("no table when no target ran both rows", () => {
  expect(manyKeysGoalsTable([row("embedded", "chat c=64", 6_000, 50)])).toBe("");
});
