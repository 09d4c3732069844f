import { expect, test } from "bun:test";
import { startMemoryGuard } from "./memory.ts";

const MiB = 1024 * 1024;
const quiet = () => {};

/** A guard over a fake resident set; a concurrent collection gives back `concurrentGivesMib`. */
function guarded(growthMib: number, startRss: number, concurrentGivesMib = 0) {
  let rss = startRss;
  const collected: number[] = [];
  const asked: number[] = [];
  const guard = startMemoryGuard({
    growthMib,
    log: quiet,
    checkMs: 3_600_000, // checked by hand below
    rssBytes: () => rss,
    collect: () => {
      collected.push(rss);
      rss -= 40 * MiB; // what a collection gives back here
    },
    collectConcurrently: () => {
      asked.push(rss);
      rss -= concurrentGivesMib * MiB;
    },
  });
  return { guard, collected, asked, setRss: (bytes: number) => (rss = bytes) };
}

test("asks for a concurrent collection at the step; stops the node only when that gave back too little", () => {
  const { guard, collected, asked, setRss } = guarded(64, 100 * MiB);
  setRss(163 * MiB);
  guard.check();
  expect([asked, collected]).toEqual([[], []]);
  setRss(164 * MiB);
  guard.check();
  expect([asked, collected]).toEqual([[164 * MiB], []]);
  guard.check(); // nothing came back: now the full collection
  expect(collected).toEqual([164 * MiB]);
  expect(guard.stats).toMatchObject({ concurrent: 1, collections: 1 });
  expect(guard.stats.collections).toBe(1);
  // The baseline is now 124 MiB: the next collection comes at 188.
  setRss(187 * MiB);
  guard.check();
  expect(collected.length).toBe(1);
  setRss(188 * MiB);
  guard.check();
  guard.check();
  expect(collected.length).toBe(2);
  guard.stop();
});

test("a concurrent collection that gives back half a step or more is enough: no pause", () => {
  const { guard, collected, asked, setRss } = guarded(64, 100 * MiB, 32);
  setRss(170 * MiB);
  guard.check();
  guard.check(); // 138 MiB now: 32 MiB came back
  expect([asked, collected]).toEqual([[170 * MiB], []]);
  expect(guard.stats).toMatchObject({ concurrent: 1, collections: 0 });
  // Measured from 138 MiB from now on.
  setRss(201 * MiB);
  guard.check();
  expect(asked.length).toBe(1);
  setRss(202 * MiB);
  guard.check();
  expect(asked.length).toBe(2);
  guard.stop();
});

test("memory that falls on its own lowers the baseline", () => {
  const { guard, collected, setRss } = guarded(64, 300 * MiB);
  setRss(100 * MiB);
  guard.check();
  setRss(170 * MiB); // 70 MiB above the low point, though below the start
  guard.check();
  guard.check();
  expect(collected).toEqual([170 * MiB]);
  guard.stop();
});

test("a step of 0 turns the guard off", () => {
  const { guard, collected, setRss } = guarded(0, 100 * MiB);
  setRss(10_000 * MiB);
  guard.check();
  guard.check();
  expect(collected).toEqual([]);
  expect(guard.stats).toMatchObject({ concurrent: 0, collections: 0 });
});
