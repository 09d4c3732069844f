import { describe, expect, test } from "bun:test";
import { until } from "../../test/until.ts";
import { silentLogger } from "../log.ts";
import {
  BATCH_LINE_GAP_UNDER_LIVE_MS,
  BATCH_LINES_IN_FLIGHT_MAX,
  BATCH_LINES_UNDER_LIVE_MAX,
  BATCH_LIVE_QUIET_MS,
  LivePriority,
} from "./priority.ts";
import { LocalWorkQueue, type Verdict } from "./queue.ts";

/** A gate on a clock and a live count the test moves. */
function gate() {
  const state = { nowMs: 1_000, live: 0 };
  const priority = new LivePriority({ liveInFlight: () => state.live, nowMs: () => state.nowMs });
  return { state, priority };
}

describe("lines yield to live traffic", () => {
  test("a quiet node runs the full share; one with a live request in flight runs one line", () => {
    const { state, priority } = gate();
    expect(priority.slots()).toBe(BATCH_LINES_IN_FLIGHT_MAX);
    state.live = 3;
    expect(priority.slots()).toBe(BATCH_LINES_UNDER_LIVE_MAX);
    expect(BATCH_LINES_UNDER_LIVE_MAX).toBeLessThan(BATCH_LINES_IN_FLIGHT_MAX);
  });

  test("the share stays low until the node has been quiet for BATCH_LIVE_QUIET_MS", () => {
    const { state, priority } = gate();
    state.live = 1;
    priority.slots();
    state.live = 0;
    state.nowMs += BATCH_LIVE_QUIET_MS - 1;
    expect(priority.slots()).toBe(BATCH_LINES_UNDER_LIVE_MAX);
    state.nowMs += 1;
    expect(priority.slots()).toBe(BATCH_LINES_IN_FLIGHT_MAX);
  });

  test("under live traffic a line starts BATCH_LINE_GAP_UNDER_LIVE_MS after the last one ended, not sooner", () => {
    const { state, priority } = gate();
    state.live = 1;
    priority.ended();
    expect(priority.slots()).toBe(0);
    state.nowMs += BATCH_LINE_GAP_UNDER_LIVE_MS - 1;
    expect(priority.slots()).toBe(0);
    state.nowMs += 1;
    expect(priority.slots()).toBe(BATCH_LINES_UNDER_LIVE_MAX);
    // A quiet node does not wait for the gap.
    priority.ended();
    state.live = 0;
    state.nowMs += BATCH_LIVE_QUIET_MS;
    expect(priority.slots()).toBe(BATCH_LINES_IN_FLIGHT_MAX);
  });

  test("under steady live load a batch still moves: a line at least every gap plus a line's time, and no faster", () => {
    const { state, priority } = gate();
    state.live = 1;
    const lineMs = 7;
    const spanMs = 60_000;
    let started = 0;
    let running = 0;
    let endsAt = 0;
    for (const end = state.nowMs + spanMs; state.nowMs < end; state.nowMs++) {
      if (running > 0 && state.nowMs >= endsAt) {
        running = 0;
        priority.ended();
      }
      if (running < priority.slots()) {
        running++;
        started++;
        endsAt = state.nowMs + lineMs;
      }
    }
    expect(started).toBeGreaterThanOrEqual(Math.floor(spanMs / (BATCH_LINE_GAP_UNDER_LIVE_MS + lineMs + 1)));
    expect(started).toBeLessThanOrEqual(Math.ceil(spanMs / (BATCH_LINE_GAP_UNDER_LIVE_MS + lineMs)));
  });
});

describe("the embedded queue keeps to its slots as they change", () => {
  test("no more items run than the slots allow, none while they are 0, and an opened gate starts them without another push", async () => {
    const queue = new LocalWorkQueue(silentLogger);
    const slots = { max: 3, allowed: 0, now: () => slots.allowed };
    let running = 0;
    let runningMax = 0;
    let done = 0;
    const release: (() => void)[] = [];
    queue.start(async (): Promise<Verdict> => {
      running++;
      runningMax = Math.max(runningMax, running);
      await new Promise<void>((resolve) => release.push(resolve));
      running--;
      done++;
      return "settled";
    }, slots);
    try {
      await queue.push(Array.from({ length: 5 }, (_, i) => ({ kind: "line" as const, batchId: "batch_1", line: i + 1 })));
      // Closed: the items wait (the queue's depth holds them all, none running).
      expect(running).toBe(0);
      slots.allowed = 1;
      await until(() => running === 1, { what: "one item started once the gate opened to 1" });
      slots.allowed = 3;
      await until(() => running === 3, { what: "three items running once the gate opened to 3" });
      while (done < 5) {
        release.shift()?.();
        await until(() => release.length > 0 || done === 5, { what: "the next item running" });
      }
      expect(runningMax).toBe(3);
    } finally {
      for (const r of release) r();
      await queue.stop();
    }
  });
});
