/**
 * Batch lines run at a lower priority than live traffic: how many work items a node may run at
 * this moment. While live requests are in flight on the node (or were within
 * BATCH_LIVE_QUIET_MS), at most BATCH_LINES_UNDER_LIVE_MAX, each starting
 * BATCH_LINE_GAP_UNDER_LIVE_MS after the last one ended; once the node is quiet, up to
 * BATCH_LINES_IN_FLIGHT_MAX at once. The share under live traffic is never 0 (a line at least
 * every BATCH_LINE_GAP_UNDER_LIVE_MS plus a line's time), so a batch still finishes under steady
 * live load (liveness), only slower. Measured: bench/batch-live.ts, docs/batches.md.
 */

/** Lines a node runs at once, all accounts together, when no live request is in flight. */
export const BATCH_LINES_IN_FLIGHT_MAX = 4;
/**
 * Lines a node runs at once while live requests are in flight: one, the minimum share that keeps
 * a batch moving under steady live load; a second line in flight doubled the work a live request
 * waits behind (bench/batch-live.ts).
 */
export const BATCH_LINES_UNDER_LIVE_MAX = 1;
/**
 * A node counts as serving live traffic for this long after it last saw a live request in flight:
 * a client sending one request after another leaves gaps of well under a millisecond, and the
 * full share must not start in each of them.
 */
export const BATCH_LIVE_QUIET_MS = 250;
/**
 * Under live traffic, a line starts this long after the last one ended at the soonest: at most
 * ~20 lines a second on a node then (a line takes a few ms). Run back to back, one line still
 * raised a live client's p99 by tens of ms on NATS + PostgreSQL (its database writes share the
 * database's CPU with the live requests'); 50 ms apart it stayed within 2 ms (bench/batch-live.ts).
 */
export const BATCH_LINE_GAP_UNDER_LIVE_MS = 50;
/** How often a queue whose items wait for a slot looks again whether the node is quiet. */
export const BATCH_GATE_POLL_MS = 25;

/** What the gate reads: the node's live requests in flight now, and a clock in ms. */
export interface LiveReadings {
  liveInFlight(): number;
  nowMs(): number;
}

export class LivePriority {
  private lastLiveMs = Number.NEGATIVE_INFINITY;
  private lastEndMs = Number.NEGATIVE_INFINITY;

  constructor(private readonly readings: LiveReadings) {}

  /** Items the node may run at this moment: BATCH_LINES_UNDER_LIVE_MAX under live traffic, else BATCH_LINES_IN_FLIGHT_MAX. */
  slots(): number {
    const now = this.readings.nowMs();
    if (this.readings.liveInFlight() > 0) this.lastLiveMs = now;
    if (now - this.lastLiveMs >= BATCH_LIVE_QUIET_MS) return BATCH_LINES_IN_FLIGHT_MAX;
    return now - this.lastEndMs >= BATCH_LINE_GAP_UNDER_LIVE_MS ? BATCH_LINES_UNDER_LIVE_MAX : 0;
  }

  /** An item ended: under live traffic the next one waits BATCH_LINE_GAP_UNDER_LIVE_MS. */
  ended(): void {
    this.lastEndMs = this.readings.nowMs();
  }
}
