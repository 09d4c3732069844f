/**
 * A host's batch limit: at most `options.concurrency` requests are served at once, the rest wait
 * in arrival order, so a saturated simulator gets slower like a GPU host whose batch is full.
 * Its waiting and running counts feed `/metrics` (vllm:num_requests_waiting / _running).
 */

/** Requests that may wait; beyond it the simulator answers 503 at once. */
export const simQueueDepthMax = 10_000;

export class SimGate {
  running = 0;
  private readonly queue: (() => void)[] = [];

  constructor(private readonly capacity: () => number | null) {}

  get waiting(): number {
    return this.queue.length;
  }

  /** Resolves true once a slot is held; false when the signal aborted or the queue is full. */
  enter(signal: AbortSignal): Promise<boolean> {
    const limit = this.capacity();
    if (limit === null || (this.running < limit && this.queue.length === 0)) {
      this.running++;
      return Promise.resolve(true);
    }
    if (this.queue.length >= simQueueDepthMax || signal.aborted) return Promise.resolve(false);
    return new Promise((resolve) => {
      const admit = () => {
        signal.removeEventListener("abort", onAbort);
        this.running++;
        resolve(true);
      };
      const onAbort = () => {
        const at = this.queue.indexOf(admit);
        if (at >= 0) this.queue.splice(at, 1);
        resolve(false);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      this.queue.push(admit);
    });
  }

  leave(): void {
    this.running--;
    this.drain();
  }

  /** Admits waiters while there is room (the capacity may have been raised at run time). */
  drain(): void {
    const limit = this.capacity();
    while (this.queue.length > 0 && (limit === null || this.running < limit)) this.queue.shift()!();
  }
}
