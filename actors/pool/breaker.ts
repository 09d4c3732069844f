/**
 * A circuit breaker per backend, on this node.
 *
 *   closed:    every outcome is counted in a sliding window of `BREAKER_WINDOW_MS`; it opens on
 *              `BREAKER_FAILURES_MAX` consecutive failures, or when at least
 *              `BREAKER_WINDOW_REQUESTS_MIN` outcomes in the window failed at
 *              `BREAKER_FAILURE_RATIO_MAX` or more.
 *   open:      no traffic for a cool-down (`BREAKER_COOLDOWN_MS`, doubled on each failed probe
 *              up to `BREAKER_COOLDOWN_MS_MAX`); an active health probe that succeeds cuts a
 *              doubled cool-down back to the base one.
 *   half-open: exactly one request (the probe) is let through; its success closes the breaker,
 *              its failure opens it again.
 */

export const BREAKER_FAILURES_MAX = 5;
export const BREAKER_WINDOW_MS = 10_000;
export const BREAKER_WINDOW_REQUESTS_MIN = 10;
export const BREAKER_FAILURE_RATIO_MAX = 0.5;
export const BREAKER_COOLDOWN_MS = 5_000;
export const BREAKER_COOLDOWN_MS_MAX = 60_000;
/** Outcome buckets in the window: one per `BREAKER_WINDOW_MS / BREAKER_BUCKETS` ms. */
const BREAKER_BUCKETS = 10;

export type BreakerState = "closed" | "open" | "half-open";

export class Breaker {
  private state_: "closed" | "open" = "closed";
  private openUntilMs = 0;
  private openedAtMs = 0;
  private cooldownMs = BREAKER_COOLDOWN_MS;
  private probing = false;
  private consecutive = 0;
  private readonly ok = new Array<number>(BREAKER_BUCKETS).fill(0);
  private readonly bad = new Array<number>(BREAKER_BUCKETS).fill(0);
  private bucketAt = 0;

  state(nowMs: number): BreakerState {
    if (this.state_ === "closed") return "closed";
    return nowMs >= this.openUntilMs ? "half-open" : "open";
  }

  /** Whether a request may go now (half-open: only while no probe is out). */
  allows(nowMs: number): boolean {
    const state = this.state(nowMs);
    return state === "closed" || (state === "half-open" && !this.probing);
  }

  /** The request picked for this backend is on its way; in half-open it is the probe. */
  taken(nowMs: number): void {
    if (this.state(nowMs) === "half-open") this.probing = true;
  }

  succeeded(nowMs: number): void {
    this.consecutive = 0;
    if (this.state_ === "open") {
      // Only the probe's verdict closes it; a request started before it opened says nothing new.
      if (!this.probing && nowMs < this.openUntilMs) return;
      this.state_ = "closed";
      this.cooldownMs = BREAKER_COOLDOWN_MS;
      this.probing = false;
      this.ok.fill(0);
      this.bad.fill(0);
    }
    this.bucket(nowMs, this.ok);
  }

  failed(nowMs: number): void {
    this.consecutive++;
    if (this.state_ === "open") {
      // A failed probe (or a late failure while open): another, longer cool-down.
      if (this.probing || nowMs >= this.openUntilMs) this.open(nowMs, Math.min(this.cooldownMs * 2, BREAKER_COOLDOWN_MS_MAX));
      return;
    }
    this.bucket(nowMs, this.bad);
    const bad = sum(this.bad);
    const total = bad + sum(this.ok);
    const ratioTrips = total >= BREAKER_WINDOW_REQUESTS_MIN && bad / total >= BREAKER_FAILURE_RATIO_MAX;
    if (this.consecutive >= BREAKER_FAILURES_MAX || ratioTrips) this.open(nowMs, BREAKER_COOLDOWN_MS);
  }

  /**
   * An active health probe answered: a cool-down lengthened by failed probes is cut back to the
   * base one, so a host that is back is tried again soon (a host that answers health checks but
   * fails requests still waits `BREAKER_COOLDOWN_MS` between probes).
   */
  healthy(nowMs: number): void {
    if (this.state_ !== "open" || this.probing) return;
    this.openUntilMs = Math.min(this.openUntilMs, Math.max(nowMs, this.openedAtMs + BREAKER_COOLDOWN_MS));
  }

  /** A probe request ended without a verdict (client gone): let another one through. */
  probeAbandoned(): void {
    this.probing = false;
  }

  private open(nowMs: number, cooldownMs: number): void {
    this.state_ = "open";
    this.openedAtMs = nowMs;
    this.cooldownMs = cooldownMs;
    this.openUntilMs = nowMs + cooldownMs;
    this.probing = false;
  }

  private bucket(nowMs: number, into: number[]): void {
    const widthMs = BREAKER_WINDOW_MS / BREAKER_BUCKETS;
    const index = Math.floor(nowMs / widthMs);
    // Clear the buckets that slid out of the window since the last outcome.
    const stale = Math.min(BREAKER_BUCKETS, Math.max(0, index - this.bucketAt));
    for (let i = 1; i <= stale; i++) {
      const slot = (this.bucketAt + i) % BREAKER_BUCKETS;
      this.ok[slot] = 0;
      this.bad[slot] = 0;
    }
    if (index > this.bucketAt) this.bucketAt = index;
    into[((this.bucketAt % BREAKER_BUCKETS) + BREAKER_BUCKETS) % BREAKER_BUCKETS]!++;
  }
}

function sum(values: number[]): number {
  let total = 0;
  for (const v of values) total += v;
  return total;
}
