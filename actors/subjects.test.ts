import { expect, test } from "bun:test";
import { KEY_PARTITIONS, partitionOf, subjects } from "./subjects.ts";

test("subjects are built under <prefix>.v1", () => {
  const s = subjects("gw");
  expect(s.keyAdmit(0)).toBe("gw.v1.keys.0.admit");
  expect(s.keySettle(63)).toBe("gw.v1.keys.63.settle");
  expect(s.keyEvents).toBe("gw.v1.events.keys");
  expect(s.metricsPools).toBe("gw.v1.metrics.pools");
  expect(s.poolEvents).toBe("gw.v1.events.pools");
  expect(s.poolStats).toBe("gw.v1.pools.stats");
});

test("a prefix must be one subject token", () => {
  expect(() => subjects("a.b")).toThrow();
  expect(() => subjects("a b")).toThrow();
  expect(() => subjects("*")).toThrow();
  expect(() => subjects("")).toThrow();
});

test("partitions are bounded", () => {
  expect(() => subjects("gw").keyAdmit(KEY_PARTITIONS)).toThrow(RangeError);
  expect(() => subjects("gw").keyAdmit(-1)).toThrow(RangeError);
  expect(() => subjects("gw").keyAdmit(1.5)).toThrow(RangeError);
});

test("partitionOf is stable and spreads keys over every partition", () => {
  expect(partitionOf("key_abc")).toBe(partitionOf("key_abc"));
  const counts = new Array(KEY_PARTITIONS).fill(0);
  for (let i = 0; i < 64_000; i++) counts[partitionOf(`key_${i.toString(36)}`)]++;
  expect(Math.min(...counts)).toBeGreaterThan(700);
  expect(Math.max(...counts)).toBeLessThan(1300);
});

test("extension, meter and operation subjects", () => {
  const s = subjects("gw");
  expect(s.keyExtend(5)).toBe("gw.v1.keys.5.extend");
  expect(s.keyPermits(7)).toBe("gw.v1.keys.7.permits");
  expect(s.meter("llama-3.3-70b")).toBe("gw.v1.meter.llama-3_3-70b");
  expect(s.meter("a*b>c d")).toBe("gw.v1.meter.a_b_c_d");
  expect(s.operation("chat.completions")).toBe("gw.v1.chat.completions");
  expect(s.operation("audio.speech")).toBe("gw.v1.audio.speech");
  expect(() => s.operation("chat.*")).toThrow();
  expect(() => s.operation("chat..x")).toThrow();
  expect(s.streamCredit("str_ab12")).toBe("gw.v1.streams.str_ab12.credit");
  expect(s.streamCancel("str_ab12")).toBe("gw.v1.streams.str_ab12.cancel");
  expect(() => s.streamCancel("a.b")).toThrow();
});
