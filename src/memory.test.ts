import { expect, test } from "bun:test";
import { ownMemory, startMemoryGuard } from "./memory.ts";

const MiB = 1024 * 1024;
const quiet = () => {};

/** A guard on a fake resident set: a light collection gives back `lightMib`, a full one `fullMib`. */
function guarded(growthMib: number, startRss: number, gives = { lightMib: 40, fullMib: 40 }) {
  let rss = startRss;
  const collected: number[] = [];
  const full: number[] = [];
  const guard = startMemoryGuard({
    growthMib,
    log: quiet,
    checkMs: 3_600_000, // checked by hand below
    rssBytes: () => rss,
    collectLight: () => {
      collected.push(rss);
      rss -= gives.lightMib * MiB;
    },
    collectFull: () => {
      collected.push(rss);
      full.push(rss);
      rss -= gives.fullMib * MiB;
    },
  });
  return { guard, collected, full, setRss: (bytes: number) => (rss = bytes) };
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
  expect(guard.stats.fullCollections).toBe(0);
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

test("light collections first; a full one only once the resident set still grew by GC_FULL_AFTER_STEPS steps", () => {
  // Light collections give back little here (10 MiB), so memory creeps up through them.
  const { guard, collected, full, setRss } = guarded(64, 100 * MiB, { lightMib: 10, fullMib: 200 });
  for (const rss of [164, 218, 272, 326, 380, 243, 244]) {
    setRss(rss * MiB);
    guard.check();
  }
  // A step (64 MiB) above what each light one left: 164, 218, 272, 326. At 380 the node is 280 MiB
  // above where it started (4 steps or more): the full one. It leaves 180, so the next (light) is at 244.
  expect(collected).toEqual([164, 218, 272, 326, 380, 244].map((m) => m * MiB));
  expect(full).toEqual([380 * MiB]);
  expect(guard.stats).toMatchObject({ collections: 6, fullCollections: 1 });
  guard.stop();
});

test("another thread's heap: its growth is not this thread's, and its fall is not growth here", () => {
  let rss = 700 * MiB;
  let other = 1_290 * MiB;
  const collected: number[] = [];
  const guard = startMemoryGuard({
    growthMib: 64,
    log: quiet,
    checkMs: 3_600_000,
    rssBytes: () => rss,
    otherHeapsBytes: () => other,
    collectLight: () => collected.push(rss),
    collectFull: () => collected.push(-rss),
  });
  // The worker gives its reservation back: its heap falls by 850 MiB, the resident set by 330.
  other = 440 * MiB;
  rss = 370 * MiB;
  guard.check();
  // The worker grows by 200 MiB, of which the resident set shows 150: none of it is this thread's.
  other = 640 * MiB;
  rss = 520 * MiB;
  guard.check();
  expect(collected).toEqual([]);
  // This thread's own growth past the step (from its lowest point, 370 less the 50 the worker's
  // reservation outgrew the resident set by) is collected: light.
  rss = 520 * MiB + 64 * MiB;
  guard.check();
  expect(collected).toEqual([584 * MiB]);
  expect(guard.stats).toMatchObject({ collections: 1, fullCollections: 0 });
  guard.stop();
});

test("ownMemory without other heaps is the resident set itself", () => {
  let rss = 5;
  const own = ownMemory(() => rss);
  rss = 9;
  expect(own()).toBe(9);
});
