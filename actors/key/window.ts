/**
 * A per-minute budget (requests or tokens per minute) as a sliding window of one-second buckets.
 * Memory is fixed (60 buckets) whatever the rate.
 */

export const WINDOW_SECONDS = 60;

export class MinuteWindow {
  private readonly buckets = new Float64Array(WINDOW_SECONDS);
  private readonly stamps = new Float64Array(WINDOW_SECONDS).fill(-1);

  constructor(private readonly nowMs: () => number) {}

  private second(): number {
    return Math.floor(this.nowMs() / 1000);
  }

  /** Units used in the last 60 s. */
  used(): number {
    const now = this.second();
    let total = 0;
    for (let i = 0; i < WINDOW_SECONDS; i++) if (now - this.stamps[i]! < WINDOW_SECONDS) total += this.buckets[i]!;
    return total;
  }

  add(units: number): void {
    const now = this.second();
    const i = now % WINDOW_SECONDS;
    if (this.stamps[i] !== now) {
      this.stamps[i] = now;
      this.buckets[i] = 0;
    }
    this.buckets[i]! += units;
  }

  /** Seconds until enough of the window expires to free `units` under `limit` (at least 1). */
  secondsUntilFree(units: number, limit: number): number {
    const now = this.second();
    let excess = this.used() + units - limit;
    for (let age = WINDOW_SECONDS - 1; age >= 0 && excess > 0; age--) {
      const i = (((now - age) % WINDOW_SECONDS) + WINDOW_SECONDS) % WINDOW_SECONDS;
      if (this.stamps[i] === now - age) excess -= this.buckets[i]!;
      if (excess <= 0) return Math.max(1, WINDOW_SECONDS - age);
    }
    return WINDOW_SECONDS;
  }
}
