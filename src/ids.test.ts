import { expect, test } from "bun:test";
import { newId, RANDOM_POOL_BYTES, randomBase62 } from "./ids.ts";

test("ids are base62 of the asked length and never repeat, across many pool refills", () => {
  const seen = new Set<string>();
  const count = (RANDOM_POOL_BYTES / 20) * 50;
  for (let i = 0; i < count; i++) {
    const id = newId("req");
    expect(id).toMatch(/^req_[0-9A-Za-z]{20}$/);
    seen.add(id);
  }
  expect(seen.size).toBe(count);
  expect(randomBase62(1)).toMatch(/^[0-9A-Za-z]$/);
  expect(randomBase62(RANDOM_POOL_BYTES * 2)).toHaveLength(RANDOM_POOL_BYTES * 2);
});

test("every digit is about equally likely", () => {
  const counts = new Map<string, number>();
  const text = randomBase62(62 * 2_000);
  for (const char of text) counts.set(char, (counts.get(char) ?? 0) + 1);
  expect(counts.size).toBe(62);
  // 2,000 expected per digit; the standard deviation is ~44, so ±400 fails only a broken source.
  for (const n of counts.values()) expect(Math.abs(n - 2_000)).toBeLessThan(400);
});
