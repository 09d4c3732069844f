import { expect, test } from "bun:test";
import { startMemoryGuard } from "./memory.ts";

const MiB = 1024 * 1024;
const quiet = () => {};

function guarded(growthMib: number, startRss: number) {
  let rss = startRss;
  const collected: number[] = [];
  const guard = startMemoryGuard({
    growthMib,
    log: quiet,
    checkMs: 3_600_000, // checked by hand below
    rssBytes: () => rss,
    collect: () => {
      collected.push(rss);
      rss -= 40 * MiB; // what a collection gives back here
    },
  });
  return { guard, collected, setRss: (bytes: number) => (rss = bytes) };
}

test("collects once the resident set grew by the step, then measures from what is left", () => {
  const { guard, collected, setRss } = guarded(64, 100 * MiB);
  setRss(163 * MiB);
  guard.check();
  expect(collected).toEqual([]);
  setRss(164 * MiB);
  guard.check();
  expect(collected).toEqual([164 * MiB]);
  expect(guard.stats.collections).toBe(1);
  // The baseline is now 124 MiB: the next collection comes at 188.
  setRss(187 * MiB);
  guard.check();
  expect(collected.length).toBe(1);
  setRss(188 * MiB);
  guard.check();
  expect(collected.length).toBe(2);
  guard.stop();
});

test("memory that falls on its own lowers the baseline", () => {
  const { guard, collected, setRss } = guarded(64, 300 * MiB);
  setRss(100 * MiB);
  guard.check();
  setRss(170 * MiB); // 70 MiB above the low point, though below the start
  guard.check();
  expect(collected).toEqual([170 * MiB]);
  guard.stop();
});

test("a step of 0 turns the guard off", () => {
  const { guard, collected, setRss } = guarded(0, 100 * MiB);
  setRss(10_000 * MiB);
  guard.check();
  expect(collected).toEqual([]);
  expect(guard.stats.collections).toBe(0);
});
