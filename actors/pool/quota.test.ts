import { expect, test } from "bun:test";
import { splitCap } from "./quota.ts";

const sumOver = (cap: number, wants: Map<string, number>) => [...wants.keys()].reduce((sum, node) => sum + splitCap(cap, wants, node), 0);

test("one node alone gets the whole cap", () => {
  expect(splitCap(10, new Map([["a", 3]]), "a")).toBe(10);
});

test("a cap is split by want, one slot each first, never summing above the cap", () => {
  const wants = new Map([["a", 6], ["b", 2], ["c", 0]]);
  expect(splitCap(11, wants, "a")).toBe(1 + 6);
  expect(splitCap(11, wants, "b")).toBe(1 + 2);
  expect(splitCap(11, wants, "c")).toBe(1);
  for (const cap of [1, 2, 3, 5, 7, 100]) {
    for (const w of [new Map([["a", 1], ["b", 1], ["c", 1]]), new Map([["a", 9], ["b", 1], ["c", 5]]), new Map([["a", 0], ["b", 0], ["c", 0]])]) {
      expect(sumOver(cap, w)).toBeLessThanOrEqual(cap);
    }
  }
});

test("with fewer slots than nodes, the nodes that want most get one each", () => {
  const wants = new Map([["a", 1], ["b", 5], ["c", 3]]);
  expect([splitCap(2, wants, "a"), splitCap(2, wants, "b"), splitCap(2, wants, "c")]).toEqual([0, 1, 1]);
});
