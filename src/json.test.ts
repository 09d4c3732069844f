/** Money travels as JSON with bigints as decimal strings, and reads back as the same bigints. */
import { expect, test } from "bun:test";
import { z } from "zod";
import { bigintJson, encodeJson, jsonDepthExceeds } from "./json.ts";

test("bigints at any depth become decimal strings; everything else is written as JSON.stringify writes it", () => {
  const value = {
    billed: 12_345_678_901_234_567_890n,
    refund: -5n,
    nested: [{ units: 0n, at: new Date(Date.UTC(2026, 10, 24)), label: "x" }, 1, null, undefined],
    skipped: undefined,
    flag: true,
  };
  expect(encodeJson(value)).toBe(
    '{"billed":"12345678901234567890","refund":"-5","nested":[{"units":"0","at":"2026-11-24T00:00:00.000Z","label":"x"},1,null,null],"flag":true}',
  );
  expect(encodeJson(7n)).toBe('"7"');
  expect(encodeJson("plain")).toBe('"plain"');
});

test("what encodeJson writes, bigintJson reads back exactly", () => {
  const schema = z.object({ a: bigintJson, b: z.array(bigintJson) });
  const value = { a: 9_007_199_254_740_993n, b: [-1n, 0n, 10n ** 25n] };
  expect(schema.parse(JSON.parse(encodeJson(value)))).toEqual(value);
});

test("jsonDepthExceeds counts nesting outside strings only, and stops at the bound", () => {
  expect(jsonDepthExceeds('{"a":[[1]]}', 3)).toBe(false);
  expect(jsonDepthExceeds('{"a":[[1]]}', 2)).toBe(true);
  // Brackets and escaped quotes inside strings are text, not nesting.
  expect(jsonDepthExceeds(JSON.stringify({ a: '[[[{{{ \\" [[[ "' }), 1)).toBe(false);
  expect(jsonDepthExceeds(JSON.stringify(["\\", [[]]]), 2)).toBe(true);
  expect(jsonDepthExceeds(`${"[".repeat(1_000_000)}`, 128)).toBe(true);
  // An unterminated string ends the scan; the parser reports it.
  expect(jsonDepthExceeds('{"a": "[[[[', 1)).toBe(false);
});

test("bigintJson refuses what is not a bigint or its decimal string, and a required one that is missing", () => {
  const schema = z.object({ a: bigintJson, b: bigintJson.optional() });
  for (const a of ["1.5", "abc", "", " 1", "1".repeat(31), 12, null, undefined, {}]) expect(schema.safeParse({ a }).success).toBe(false);
  expect(schema.safeParse({}).success).toBe(false);
  expect(schema.parse({ a: "-12", b: undefined })).toEqual({ a: -12n, b: undefined });
  expect(schema.parse({ a: 7n })).toEqual({ a: 7n });
});
