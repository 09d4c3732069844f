import { describe, expect, test } from "bun:test";
import { FifoMap } from "./fifoMap.ts";

describe("FifoMap", () => {
  test("evicts the oldest setting beyond sizeMax", () => {
    const m = new FifoMap<string, number>(3);
    for (const [i, k] of ["a", "b", "c", "d"].entries()) m.set(k, i);
    expect([m.has("a"), m.get("b"), m.get("c"), m.get("d"), m.size]).toEqual([false, 1, 2, 3, 3]);
  });

  test("a key set again becomes the newest; a deleted key is not evicted in another's place", () => {
    const m = new FifoMap<string, number>(3);
    m.set("a", 1);
    m.set("b", 2);
    m.set("c", 3);
    m.set("a", 4); // a is now newest: b goes first
    m.set("d", 5);
    expect([m.has("b"), m.get("a"), m.get("c"), m.get("d")]).toEqual([false, 4, 3, 5]);
    m.delete("c");
    m.set("e", 6); // room for e: nothing evicted
    expect([m.get("a"), m.get("d"), m.get("e"), m.size]).toEqual([4, 5, 6, 3]);
    m.set("f", 7); // a is the oldest live setting
    expect([m.has("a"), m.size]).toEqual([false, 3]);
  });

  test("matches a model Map over a long random run of sets and deletes", () => {
    const sizeMax = 50;
    const m = new FifoMap<number, number>(sizeMax);
    const model = new Map<number, number>(); // insertion order = age, re-set moves to the end
    let seed = 7;
    const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    for (let i = 0; i < 20_000; i++) {
      const key = Math.floor(random() * 120);
      if (random() < 0.2) {
        m.delete(key);
        model.delete(key);
      } else {
        m.set(key, i);
        model.delete(key);
        model.set(key, i);
        if (model.size > sizeMax) model.delete(model.keys().next().value!);
      }
      expect(m.size).toBe(model.size);
    }
    for (const [key, value] of model) expect(m.get(key)).toBe(value);
  });

  test("refuses a size it cannot keep", () => {
    expect(() => new FifoMap(0)).toThrow(RangeError);
    expect(() => new FifoMap(1.5)).toThrow(RangeError);
  });
});
