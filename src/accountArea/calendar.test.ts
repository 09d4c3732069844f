import { expect, test } from "bun:test";
import { jalaliMonthStart, tehranDayStart } from "./calendar.ts";

test("the Jalali month starts at Tehran midnight on its first day", () => {
  // 2026-11-23 15:00 UTC is 2 Azar 1405, 18:30 in Tehran (UTC+3:30); 1 Azar began 2026-11-21 20:30 UTC.
  expect(jalaliMonthStart(new Date("2026-11-23T15:00:00.250Z"))).toEqual({
    start: new Date("2026-11-21T20:30:00.000Z"),
    year: 1405,
    month: 9,
  });
  // Nowruz: 1 Farvardin 1405 began at Tehran midnight of 2026-03-21 (20:30 UTC the day before).
  expect(jalaliMonthStart(new Date("2026-03-20T20:30:00.000Z")).start).toEqual(new Date("2026-03-20T20:30:00.000Z"));
  expect(jalaliMonthStart(new Date("2026-03-20T20:29:59.000Z")).month).toBe(12);
});

test("the Tehran day starts at midnight there (20:30 UTC the day before)", () => {
  expect(tehranDayStart(new Date("2026-11-23T15:00:00.250Z"))).toEqual(new Date("2026-11-22T20:30:00.000Z"));
  expect(tehranDayStart(new Date("2026-11-23T20:30:00.000Z"))).toEqual(new Date("2026-11-23T20:30:00.000Z"));
});
