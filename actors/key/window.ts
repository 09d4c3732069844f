/**
 * A per-minute budget (requests or tokens per minute) as a sliding window of one-second buckets.
 * Memory is fixed (60 buckets) whatever the rate.
 */
import { fail, type Failure } from "../../src/errors.ts";
import { holderNoun } from "../../src/keys/accountLimits.ts";
import type { RateInfo } from "../protocol.ts";

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

/** The per-minute limits a key may have (null: none). */
export interface RateLimits {
  /** Whose limits (a key's or an account's id): named in a refusal. */
  id?: string;
  rpm: number | null;
  tpm: number | null;
}

/** A refusal by rpm or tpm, with the x-ratelimit-* view when the client should retry. */
export interface RateRefusal {
  failure: Failure;
  rate?: RateInfo;
}

/**
 * A key's requests-per-minute and tokens-per-minute windows: the key actor's own on one node, the
 * partition owner's in a cluster (permits.ts). `check` says whether more would fit, `add` counts it.
 */
export class RateWindows {
  readonly requests: MinuteWindow;
  readonly tokens: MinuteWindow;

  constructor(nowMs: () => number = () => Date.now()) {
    this.requests = new MinuteWindow(nowMs);
    this.tokens = new MinuteWindow(nowMs);
  }

  add(requests: number, tokens: number): void {
    if (requests !== 0) this.requests.add(requests);
    if (tokens !== 0) this.tokens.add(tokens);
  }

  /** Null when `requests` more requests using `tokens` tokens fit the key's limits. */
  check(key: RateLimits, requests: number, tokens: number): RateRefusal | null {
    const noun = holderNoun({ id: key.id ?? "" });
    if (key.rpm !== null && requests > 0 && this.requests.used() + requests > key.rpm) {
      const retryAfterS = this.requests.secondsUntilFree(requests, key.rpm);
      return {
        failure: fail("rate_limit_exceeded", `Rate limit reached: ${key.rpm} requests per minute for this ${noun}.`, { retryAfterS }),
        rate: this.info(key),
      };
    }
    if (key.tpm !== null && tokens > 0 && this.tokens.used() + tokens > key.tpm) {
      if (tokens > key.tpm) {
        return {
          failure: fail(
            "rate_limit_exceeded",
            `This request may use ${tokens} tokens, more than the ${noun}'s ${key.tpm} tokens per minute.`,
            {
              param: "max_tokens",
              retryable: false,
            },
          ),
        };
      }
      const retryAfterS = this.tokens.secondsUntilFree(tokens, key.tpm);
      return {
        failure: fail("rate_limit_exceeded", `Rate limit reached: ${key.tpm} tokens per minute for this ${noun}.`, { retryAfterS }),
        rate: this.info(key),
      };
    }
    return null;
  }

  /** What the x-ratelimit-* headers report, for the limits the key has. */
  info(key: RateLimits): RateInfo | undefined {
    if (key.rpm === null && key.tpm === null) return undefined;
    const info: RateInfo = {};
    if (key.rpm !== null) {
      const used = this.requests.used();
      Object.assign(info, {
        limitRequests: key.rpm,
        remainingRequests: Math.max(0, key.rpm - used),
        resetRequestsS: used > 0 ? this.requests.secondsUntilFree(0, used - 1) : 0,
      });
    }
    if (key.tpm !== null) {
      const used = Math.ceil(this.tokens.used());
      Object.assign(info, {
        limitTokens: key.tpm,
        remainingTokens: Math.max(0, key.tpm - used),
        resetTokensS: used > 0 ? this.tokens.secondsUntilFree(0, used - 1) : 0,
      });
    }
    return info;
  }
}
