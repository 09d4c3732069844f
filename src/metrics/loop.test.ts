import { expect, test } from "bun:test";
import { LOOP_RESOLUTION_MS, startLoopMonitor } from "./loop.ts";

const BLOCK_MS = 80;

test("a reading holds the longest stall since the previous one, then starts a new window", async () => {
  const loop = startLoopMonitor();
  try {
    // The sleeps let the monitor's timer run for a few of its ticks: its windows are the behaviour
    // under test, and a reading (which starts a new window) cannot be polled for.
    await Bun.sleep(LOOP_RESOLUTION_MS * 3);
    const startedMs = performance.now();
    while (performance.now() - startedMs < BLOCK_MS); // holds the event loop, as a synchronous database call did
    await Bun.sleep(LOOP_RESOLUTION_MS * 3);
    const blocked = loop.read();
    expect(blocked.stallMaxMs).toBeGreaterThanOrEqual(BLOCK_MS - LOOP_RESOLUTION_MS * 2);
    await Bun.sleep(LOOP_RESOLUTION_MS * 5);
    // The stall belonged to the previous window.
    expect(loop.read().stallMaxMs).toBeLessThan(BLOCK_MS - LOOP_RESOLUTION_MS * 2);
  } finally {
    loop.stop();
  }
});
