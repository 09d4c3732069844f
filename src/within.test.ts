import { expect, test } from "bun:test";
import { TIMED_OUT, within } from "./within.ts";

test("a promise that settles in time gives its value, or its rejection", async () => {
  expect(await within(Promise.resolve(7), 1_000)).toBe(7);
  expect(await within(Promise.reject(new Error("refused")), 1_000).catch((e: Error) => e.message)).toBe("refused");
});

test("a promise that does not settle in time gives TIMED_OUT", async () => {
  expect(await within(new Promise(() => {}), 10)).toBe(TIMED_OUT);
  expect(await within(new Promise(() => {}), -5)).toBe(TIMED_OUT); // a bound already past
});
