/** The goals tables: the 1,000-keys row against its own hot-key row; the tail goals beside the bare proxy. */
import { expect, test } from "bun:test";
import type { Measurement } from "./measurement.ts";
import { BARE, LIMIT_BUN, LIMIT_ELYSIA, LIMIT_NATS2, limitGoalsTable, MANY_KEYS, manyKeysGoalsTable, tailGoalsTable } from "./report.ts";

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

const withStall = (m: Measurement, stallMaxMs: number): Measurement => ({
  ...m,
  readings: { cpuMsPer1k: null, cpu0Busy: 0, stallMaxMs, gcForced: null, gcPauseMs: null, gcFull: null },
});

test("the tail goals judge each target's longest stall of any row, the bare proxy's beside it", () => {
  const table = tailGoalsTable([
    withStall(row(BARE, "stream c=64", 3_000, 30), 9),
    withStall(row(BARE, "chat c=64", 9_000, 16), 41),
    withStall(row("Darvaze embedded", "stream c=64", 1_200, 120), 70),
    withStall(row("Darvaze embedded", "chat c=1", 900, 3), 4),
    withStall(row("Darvaze NATS", "chat c=1", 900, 3), 3),
  ]);
  expect(table.split("\n").slice(2)).toEqual([
    "| Darvaze embedded | 40% ✓ | n/a | n/a | 70.0 ms ✗ | 41.0 ms |",
    "| Darvaze NATS | n/a | n/a | n/a | 3.00 ms ✓ | 41.0 ms |",
  ]);
});

test("each mode is judged against the limits of its own shape, from the same run", () => {
  const table = limitGoalsTable([
    row(LIMIT_BUN, "chat c=64", 25_000, 5),
    row(LIMIT_ELYSIA, "chat c=64", 20_000, 5),
    row(LIMIT_ELYSIA, "stream c=64", 10_000, 9),
    row(LIMIT_NATS2, "chat c=64", 8_000, 12),
    row("Darvaze embedded (PGlite, in-process bus)", "chat c=64", 10_000, 20),
    row("Darvaze embedded (PGlite, in-process bus)", "stream c=64", 5_000, 20),
    row("Darvaze NATS + PostgreSQL, 1 node", "chat c=64", 7_000, 20),
  ]);
  expect(table.split("\n").slice(2)).toEqual([
    "| Darvaze embedded (PGlite, in-process bus) | 10,000 ÷ 20,000 = 50% (goal ≥ 50%) ✓ | — | 5,000 ÷ 10,000 = 50% (goal ≥ 60%) ✗ | 10,000 ÷ 25,000 = 40% |",
    "| Darvaze NATS + PostgreSQL, 1 node | 7,000 ÷ 20,000 = 35% (goal ≥ 40%) ✗ | 7,000 ÷ 8,000 = 88% (goal ≥ 100%) ✗ | n/a (Darvaze NATS + PostgreSQL, 1 node stream c=64 not measured) | 7,000 ÷ 25,000 = 28% |",
  ]);
  expect(limitGoalsTable([row("Darvaze embedded", "chat c=64", 10_000, 20)])).toBe("");
});

test("a mode the run did not measure still has its row, each goal saying what was missing", () => {
  const table = limitGoalsTable([
    row(LIMIT_ELYSIA, "chat c=64", 20_000, 5),
    row("Darvaze embedded (PGlite, in-process bus)", "chat c=64", 12_000, 20),
  ]);
  expect(table.split("\n").slice(2)).toEqual([
    `| Darvaze embedded (PGlite, in-process bus) | 12,000 ÷ 20,000 = 60% (goal ≥ 50%) ✓ | — | n/a (Darvaze embedded (PGlite, in-process bus) stream c=64 not measured) | n/a (${LIMIT_BUN} chat c=64 not measured) |`,
    `| Darvaze NATS + PostgreSQL, 1 node | n/a (Darvaze NATS + PostgreSQL, 1 node chat c=64 not measured) | n/a (Darvaze NATS + PostgreSQL, 1 node chat c=64 not measured) | n/a (Darvaze NATS + PostgreSQL, 1 node stream c=64 not measured) | n/a (Darvaze NATS + PostgreSQL, 1 node chat c=64 not measured) |`,
  ]);
});
