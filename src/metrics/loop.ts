/**
 * How long the event loop was held up: a request arriving during a stall waits for all of it.
 * Bun's perf_hooks delay histogram samples every LOOP_RESOLUTION_MS; a reading returns the
 * longest delay since the previous reading and starts a new window, so a scrape
 * (or a benchmark's two scrapes around a run) sees the stalls of its own interval.
 */
import { monitorEventLoopDelay } from "node:perf_hooks";

/** Sampling period: 100 wake-ups a second cost nothing next to a request. */
export const LOOP_RESOLUTION_MS = 10;

export interface LoopWindow {
  stallMaxMs: number;
}

export function startLoopMonitor(): { read: () => LoopWindow; stop: () => void } {
  const histogram = monitorEventLoopDelay({ resolution: LOOP_RESOLUTION_MS });
  histogram.enable();
  return {
    read: () => {
      const window = { stallMaxMs: histogram.count === 0 ? 0 : histogram.max / 1e6 };
      histogram.reset();
      return window;
    },
    stop: () => histogram.disable(),
  };
}
