import { expect, test } from "bun:test";
import { boundedUsage, type UsageBounds } from "./bounds.ts";

const bounds: UsageBounds = { inputMax: 100, outputMax: 50, cacheWriteMax: 0, hostedCallsMax: 2 };

test("a report within its bounds is taken as it was", () => {
  const used = { input: 100, output: 50, cache_read: 20, hosted_call: 2 };
  expect(boundedUsage(used, bounds)).toEqual({ used, anomalies: [] });
});

test("each part beyond its bound is clamped to it, and named", () => {
  const { used, anomalies } = boundedUsage({ input: 1_000, output: 60, cache_read: 500, cache_write: 30, hosted_call: 9 }, bounds);
  expect(used).toEqual({ input: 100, output: 50, cache_read: 100, cache_write: 0, hosted_call: 2 });
  expect(anomalies.map((a) => `${a.part}_${a.kind}`)).toEqual(["input_over", "output_over", "cache_write_over", "hosted_calls_over"]);
});

test("a report below what was proven used is raised to it; a floor above the bound stops at the bound", () => {
  const raised = boundedUsage({ input: 5, output: 1 }, { ...bounds, floor: { input: 20, output: 10 } });
  expect(raised).toEqual({
    used: { input: 20, output: 10, cache_read: undefined, cache_write: undefined },
    anomalies: [
      { part: "input", kind: "under" },
      { part: "output", kind: "under" },
    ],
  });
  expect(boundedUsage({ input: 100, output: 50 }, { ...bounds, floor: { input: 200, output: 80 } }).anomalies).toEqual([]);
});

test("1-hour cache writes are at most the cache writes kept", () => {
  const { used } = boundedUsage({ input: 100, output: 1, cache_write: 40, cache_write_1h: 40 }, { ...bounds, cacheWriteMax: 30 });
  expect([used.cache_write, used.cache_write_1h]).toEqual([30, 30]);
});
