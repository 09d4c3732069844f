import { expect, test } from "bun:test";
import { billedSeconds, reportedSeconds, reserveSeconds, wholeSeconds } from "./seconds.ts";

const json = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));

test("whole seconds round up, but float noise above a whole second does not", () => {
  expect([wholeSeconds(12), wholeSeconds(12.0000000001), wholeSeconds(12.001), wholeSeconds(0.2), wholeSeconds(0)]).toEqual([
    12, 12, 13, 1, 0,
  ]);
});

test("the reserve is the size bound, with the decoded seconds to fall back to", () => {
  expect(reserveSeconds({ decoded: 12.4, bound: 3_000.5 })).toEqual({ units: 3_001, exactUnits: 13 });
  // Frames that decode longer than the size bound (FLAC silence) reserve what they decode.
  expect(reserveSeconds({ decoded: 4_000, bound: 300 })).toEqual({ units: 4_000, exactUnits: 4_000 });
  // Nothing decoded: only the bound, with no exact figure to fall back to.
  expect(reserveSeconds({ decoded: null, bound: 99.2 })).toEqual({ units: 100 });
});

test("the upstream's report: verbose_json duration, a duration usage, never token usage or text", () => {
  expect(reportedSeconds(json({ text: "x", duration: 8.47 }), true)).toBe(8.47);
  expect(reportedSeconds(json({ text: "x", usage: { type: "duration", seconds: 9 } }), true)).toBe(9);
  expect(reportedSeconds(json({ text: "x", duration: 8.2, usage: { type: "duration", seconds: 9 } }), true)).toBe(9);
  expect(
    reportedSeconds(json({ text: "x", usage: { type: "tokens", input_tokens: 500, output_tokens: 9, total_tokens: 509 } }), true),
  ).toBeNull();
  expect(reportedSeconds(json({ text: "x", duration: -1 }), true)).toBeNull();
  expect(reportedSeconds(new TextEncoder().encode("not json"), true)).toBeNull();
  expect(reportedSeconds(json({ text: "x", duration: 5 }), false)).toBeNull();
});

test("billed: the larger of decoded and reported, a report cut to the size bound, the reserve when neither is known", () => {
  const s = { decoded: 12.4, bound: 3_000 };
  expect(billedSeconds(s, null)).toBe(13);
  expect(billedSeconds(s, 10)).toBe(13);
  expect(billedSeconds(s, 124)).toBe(124);
  expect(billedSeconds(s, 1e12)).toBe(3_000);
  expect(billedSeconds({ decoded: null, bound: 300 }, 42.1)).toBe(43);
  expect(billedSeconds({ decoded: null, bound: 300 }, null)).toBe(300);
});
