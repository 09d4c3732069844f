import { expect, test } from "bun:test";
import type { Measurement } from "./measurement.ts";
import { oneClientMarkdown, type OneClientRow } from "./one-client.ts";

const row = (target: string, p99Ms: number, maxMs: number, stallMaxMs: number | null, gc: number | null): OneClientRow => ({
  target,
  phase: "first seconds",
  round: 1,
  m: {
    target,
    workload: "chat c=1, first seconds",
    requests: 1000,
    rps: 200,
    p50Ms: 0.3,
    p90Ms: 0.5,
    p99Ms,
    maxMs,
    errors: 0,
    readings: {
      cpuMsPer1k: null,
      cpu0Busy: 0.5,
      stallMaxMs,
      gcForced: gc,
      gcPauseMs: gc === null ? null : 1.5,
      gcFull: gc === null ? null : 0,
    },
  } satisfies Measurement,
});

test("each Darvaze figure is judged against the bare proxy's of the same phase and round", () => {
  const table = oneClientMarkdown([row("bare", 3, 10, 4, null), row("Darvaze", 4.5, 21, 8.5, 1)], "bare");
  const darvaze = table.split("\n").find((line) => line.includes("| Darvaze |"))!;
  // p99 +1.5 (goal ≤ 2) passes; max +11 (goal ≤ 10) fails; stall +4.5 (goal ≤ 5) passes.
  expect(darvaze).toContain("4.50 (+1.5 ✓)");
  expect(darvaze).toContain("21.00 (+11.0 ✗)");
  expect(darvaze).toContain("8.50 (+4.5 ✓)");
  expect(darvaze).toContain("1, 0 (1.50)");
  const bare = table.split("\n").find((line) => line.includes("| bare |"))!;
  expect(bare).not.toContain("✓");
});

test("a figure under the bare proxy's reads as less, and passes", () => {
  const table = oneClientMarkdown([row("bare", 3, 10, 4, null), row("Darvaze", 2, 9, 3, 0)], "bare");
  expect(table).toContain("2.00 (−1.0 ✓)");
});
