/**
 * The clock the grant protocol (grant.ts) reads and sleeps on, injected so that its tests run
 * on virtual time (test/fakeClock.ts): a quiet period of a second or an ask retried for eight
 * passes in no real time.
 */

export interface Clock {
  /** Monotonic milliseconds. */
  now(): number;
  sleep(ms: number): Promise<void>;
}

export const systemClock: Clock = {
  now: () => performance.now(),
  sleep: (ms) => Bun.sleep(ms),
};
