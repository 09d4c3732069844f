import { expect, test } from "bun:test";
import { InvariantBroken, invariant, onInvariantBroken } from "./invariant.ts";

test("a broken invariant throws under test, naming itself", () => {
  expect(invariant(true, "held_covers_charged", {})).toBe(true);
  expect(() => invariant(false, "held_covers_charged", { billed: 2n, held: 1n })).toThrow(InvariantBroken);
  expect(() => invariant(false, "settled_once", { requestId: "r" })).toThrow(/settled_once/);
});

test("in production a broken invariant is reported and the caller told to fail safe", () => {
  const reported: string[] = [];
  const env = process.env.NODE_ENV;
  process.env.NODE_ENV = "production";
  onInvariantBroken((name) => reported.push(name));
  try {
    expect(invariant(false, "in_flight_non_negative", { inFlight: -1 })).toBe(false);
  } finally {
    process.env.NODE_ENV = env;
  }
  expect(reported).toEqual(["in_flight_non_negative"]);
});
