/**
 * Unpriced work: endpoints that charge nothing but still make the gateway work (token counting,
 * reading a key's usage or its wallet). Free of charge, not of limits: after the key check
 * (`enter`), each request takes a slot of this gate and leaves it when done.
 *
 *   slots:  at most the key's `concurrency_max` unpriced requests of one key at once on this node
 *           (429 `concurrency_limit_exceeded`, `retry-after: 1`); apart from its paid slots, so
 *           counting cannot lock a key's own paid requests out, nor they it.
 *   rate:   at most `FREE_RPM` requests per key to each endpoint in any 60 s on this node (429
 *           `rate_limit_exceeded` with `retry-after`); counted when let in, so refusals cost nothing.
 *
 * Both are this node's: a key spread over n nodes may do n times as much. The work itself is
 * bounded where it runs (token counts take turns by key on the tokenizer threads, src/tokens).
 * Memory: at most FREE_KEYS_MAX keys are tracked; past it, keys with nothing in flight are forgotten.
 */
import { MinuteWindow } from "../../actors/key/window.ts";
import { fail, type Failure } from "../errors.ts";
import type { KeyRecord } from "../keys/store.ts";

/** Keys (× endpoints) whose unpriced use is remembered at once. */
export const FREE_KEYS_MAX = 100_000;

/** The endpoints this gate limits, each with a window of its own. */
export type FreeEndpoint = "count_tokens" | "key" | "credits" | "generation" | "files" | "batches";

interface KeyUse {
  inFlight: number;
  windows: Map<FreeEndpoint, MinuteWindow>;
}

export interface FreeLimits {
  /** Requests per key per endpoint in any 60 s (FREE_RPM). */
  rpm: number;
  nowMs?: () => number;
}

/** A slot taken: call it once when the work is done. */
export type FreeRelease = () => void;

export class FreeGate {
  private readonly uses = new Map<string, KeyUse>();

  constructor(private readonly limits: FreeLimits) {}

  /**
   * Lets one request of `key` to `endpoint` in, or says why not.
   * @example const release = gate.enter(key, "count_tokens"); if (typeof release !== "function") return refuse(release); try { … } finally { release(); }
   */
  enter(key: Pick<KeyRecord, "id" | "concurrencyMax">, endpoint: FreeEndpoint): FreeRelease | Failure {
    const use = this.useOf(key.id);
    if (use.inFlight >= key.concurrencyMax) {
      return fail("concurrency_limit_exceeded", `Too many concurrent requests for this key (limit ${key.concurrencyMax}).`, {
        retryAfterS: 1,
      });
    }
    let window = use.windows.get(endpoint);
    if (!window) use.windows.set(endpoint, (window = new MinuteWindow(this.limits.nowMs ?? (() => Date.now()))));
    if (window.used() + 1 > this.limits.rpm) {
      return fail("rate_limit_exceeded", `Rate limit reached: ${this.limits.rpm} ${endpoint} requests per minute for this key.`, {
        retryAfterS: window.secondsUntilFree(1, this.limits.rpm),
      });
    }
    window.add(1);
    use.inFlight++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      use.inFlight--;
    };
  }

  /** Keys tracked now (tests). */
  get size(): number {
    return this.uses.size;
  }

  private useOf(keyId: string): KeyUse {
    let use = this.uses.get(keyId);
    if (use) return use;
    if (this.uses.size >= FREE_KEYS_MAX) this.forgetIdle();
    use = { inFlight: 0, windows: new Map() };
    this.uses.set(keyId, use);
    return use;
  }

  /** Forgets keys with nothing in flight (their windows with them): the table stays bounded. */
  private forgetIdle(): void {
    for (const [keyId, use] of this.uses) if (use.inFlight === 0) this.uses.delete(keyId);
  }
}
