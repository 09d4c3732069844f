import type { Clock } from "../actors/key/clock.ts";

interface Timer {
  atMs: number;
  wake: () => void;
}

/**
 * Virtual time for tests. `advance(ms)` moves it and wakes the sleepers that are due. With `auto`
 * (the default) a sleep also moves time itself, once everything else has run: when only sleepers
 * are left, time jumps to the earliest one's wake-up, as a discrete-event simulation does. So
 * nothing waits in real time, and what happens in one virtual millisecond happens in order.
 */
export class FakeClock implements Clock {
  private nowMs: number;
  private readonly timers: Timer[] = [];
  private jumpScheduled = false;
  private readonly auto: boolean;

  constructor(options: { startMs?: number; auto?: boolean } = {}) {
    this.nowMs = options.startMs ?? 0;
    this.auto = options.auto ?? true;
  }

  now(): number {
    return this.nowMs;
  }

  sleep(ms: number): Promise<void> {
    return new Promise((wake) => {
      this.timers.push({ atMs: this.nowMs + Math.max(0, ms), wake });
      if (this.auto) this.scheduleJump();
    });
  }

  /** Moves time on by `ms`, waking every sleeper due by then. */
  advance(ms: number): void {
    this.nowMs += ms;
    this.wakeDue();
  }

  /** Sleepers not yet woken (tests). */
  get sleepers(): number {
    return this.timers.length;
  }

  /** After the microtasks under way (setImmediate runs once they are done): nothing but sleepers can move. */
  private scheduleJump(): void {
    if (this.jumpScheduled) return;
    this.jumpScheduled = true;
    setImmediate(() => {
      this.jumpScheduled = false;
      const next = Math.min(...this.timers.map((t) => t.atMs));
      if (!Number.isFinite(next)) return;
      this.nowMs = Math.max(this.nowMs, next);
      this.wakeDue();
      if (this.timers.length > 0) this.scheduleJump();
    });
  }

  /** Wakes the due sleepers, earliest first (a stable sort keeps the order they slept in). */
  private wakeDue(): void {
    const due = this.timers.filter((t) => t.atMs <= this.nowMs).sort((a, b) => a.atMs - b.atMs);
    for (const t of due) this.timers.splice(this.timers.indexOf(t), 1);
    for (const t of due) t.wake();
  }
}
