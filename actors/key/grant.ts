/**
 * The grant protocol shared by concurrency shares (capacity.ts) and rate permits (permits.ts): the
 * owner of a key's partition grants, the other nodes ask it (one request/reply) and admit from
 * what it granted.
 *
 * In full, with the reasoning: docs/internals.md#the-grant-protocol.
 */
import { fail, type Failure } from "../../src/errors.ts";
import { partitionOf } from "../subjects.ts";
import type { Clock } from "./clock.ts";

/**
 * Longest an admission that needs a bigger grant waits for an owner while a partition moves: a
 * graceful handover takes up to a renewal tick, a claim and the quiet period (about 2.5 s), a
 * dead owner's partition its lease TTL plus a renewal on top of that.
 */
export const ASK_WAIT_MS_MAX = 8_000;
/** Between two asks while a partition has no owner. */
export const ASK_RETRY_MS = 100;

/** This node's ownership of a partition: since when, and the fencing token it raised. */
export interface Tenure {
  fenceToken: bigint;
  acquiredAtMs: number;
}

/** The reply of a node asked for a partition it does not own (a grant or a permit). */
export function notOwner(p: number): { ok: false; failure: Failure } {
  return {
    ok: false,
    failure: fail("service_unavailable", `This node does not own key partition ${p} (it is moving).`, { retryAfterS: 1 }),
  };
}

/**
 * An admission whose key's owner answered none of its asks (ASK_WAIT_MS_MAX of a partition with no
 * reachable owner): the limit was not checked, so it is a 503, never the key's 429.
 */
export function ownerUnreachable(): Failure {
  return fail("service_unavailable", "The key's partition owner cannot be reached; try again shortly.", { retryAfterS: 1 });
}

/** Where an owner's grant stands with the quiet period after its takeover. */
export type Quiet = "over" | "quiet" | "moved";

export interface OwnerDeps {
  /** This node's tenure of a partition; null when it does not own it. */
  tenure: (partition: number) => Tenure | null;
  clock: Clock;
  /** How long after taking a partition the owner grows nothing. */
  quietMs: number;
}

/** The owner's side: the tenure a grant runs under, and the quiet period after a takeover. */
export class PartitionOwner {
  constructor(private readonly deps: OwnerDeps) {}

  /** The partition's tenure now: a grant begins under it, or answers notOwner when null. */
  tenureOf(partition: number): Tenure | null {
    return this.deps.tenure(partition);
  }

  /**
   * Before a grant's synchronous part. Within the quiet period a grant that `grows` what a node
   * holds waits until the period ends, since other nodes may still hold what the previous owner
   * granted them and not have said so yet: "over" then, or "moved" when the partition changed
   * owner meanwhile (the grant starts over). A grant that does not grow goes on at once: "quiet"
   * while the period lasts, "over" after.
   */
  async quiet(partition: number, tenure: Tenure, grows: boolean): Promise<Quiet> {
    const leftMs = this.quietLeftMs(tenure);
    if (leftMs <= 0) return "over";
    if (!grows) return "quiet";
    await this.deps.clock.sleep(leftMs + 1);
    return this.holds(partition, tenure) ? "over" : "moved";
  }

  /** How long the quiet period of `tenure` lasts yet (≤ 0: over). */
  quietLeftMs(tenure: Tenure): number {
    return tenure.acquiredAtMs + this.deps.quietMs - this.deps.clock.now();
  }

  /** Whether the partition is still under `tenure`: a grant's synchronous part runs only then. */
  holds(partition: number, tenure: Tenure): boolean {
    return this.deps.tenure(partition) === tenure;
  }
}

/** A key's ask under way, if any: concurrent waiters share it. */
export interface Asking<T> {
  asking: Promise<T> | null;
}

export interface Joined<T> {
  reply: Promise<T>;
  /** This call started the ask (its answer is this admission's own). */
  mine: boolean;
}

/** Joins the key's ask under way, or starts one with `start`. */
export function joinAsk<T>(holder: Asking<T>, start: () => Promise<T>): Joined<T> {
  if (holder.asking) return { reply: holder.asking, mine: false };
  const reply = start().finally(() => (holder.asking = null));
  holder.asking = reply;
  return { reply, mine: true };
}

/**
 * One ask of a key's owner. `attempt` sends once (at `sentAtMs`) and returns the reply that ends
 * the ask, or null when no owner answered it (the partition is moving; a throw counts the same):
 * then it is sent again every ASK_RETRY_MS for at most ASK_WAIT_MS_MAX. Null when none ended it.
 */
export async function askOwner<T>(clock: Clock, attempt: (sentAtMs: number) => Promise<T | null>): Promise<T | null> {
  const deadlineMs = clock.now() + ASK_WAIT_MS_MAX;
  for (;;) {
    try {
      const reply = await attempt(clock.now());
      if (reply !== null) return reply;
    } catch {
      // No owner right now (the partition is moving) or it is slow: ask again shortly.
    }
    if (clock.now() + ASK_RETRY_MS > deadlineMs) return null;
    await clock.sleep(ASK_RETRY_MS);
  }
}

/** How one request waits for its grant: it joins the key's ask, takes when the node holds enough, or is refused. */
export interface GrantWait<T, R> {
  /** Joins (or starts) the key's ask. */
  ask: () => Joined<T>;
  /** Takes what the admission needs if what the node holds now covers it. */
  take: () => boolean;
  /** An answer that left the admission uncovered: its refusal, or undefined to ask again. */
  refusal: (reply: T, mine: boolean) => R | undefined;
  /** The refusal once ASK_WAIT_MS_MAX has passed. */
  timedOut: () => R;
}

/**
 * An admission that its node's grant does not cover: waits on the key's ask and takes once what
 * came back covers it. Others on this node may take what came back first, so it asks again
 * until a refusal or ASK_WAIT_MS_MAX. "taken", or the refusal.
 */
export async function awaitGrant<T, R>(clock: Clock, admission: GrantWait<T, R>): Promise<R | "taken"> {
  const deadlineMs = clock.now() + ASK_WAIT_MS_MAX;
  for (;;) {
    const { reply, mine } = admission.ask();
    const answer = await reply;
    if (admission.take()) return "taken";
    const refused = admission.refusal(answer, mine);
    if (refused !== undefined) return refused;
    if (clock.now() >= deadlineMs) return admission.timedOut();
  }
}

export interface KeyStateBounds<V> {
  sizeMax: number;
  /** Whether a key's state may go (it holds nothing anyone counts on). */
  idle: (state: V) => boolean;
}

/** Per-key state, bounded: at `sizeMax` keys, idle ones are swept until half that is left (or none is idle). */
export class KeyStates<V> implements Iterable<[string, V]> {
  private readonly states = new Map<string, V>();

  constructor(private readonly bounds: KeyStateBounds<V>) {}

  get size(): number {
    return this.states.size;
  }

  get(keyId: string): V | undefined {
    return this.states.get(keyId);
  }

  /** The key's state, made by `create` when it has none. */
  of(keyId: string, create: () => V): V {
    let state = this.states.get(keyId);
    if (!state) {
      if (this.states.size >= this.bounds.sizeMax) this.sweep();
      state = create();
      this.states.set(keyId, state);
    }
    return state;
  }

  delete(keyId: string): void {
    this.states.delete(keyId);
  }

  keys(): IterableIterator<string> {
    return this.states.keys();
  }

  [Symbol.iterator](): IterableIterator<[string, V]> {
    return this.states.entries();
  }

  /** The keys of a partition (it just changed owner). */
  inPartition(partition: number): string[] {
    return [...this.states.keys()].filter((keyId) => partitionOf(keyId) === partition);
  }

  /** The partition moved away: its keys' state belongs to the next owner now. */
  forget(partition: number): void {
    for (const keyId of this.inPartition(partition)) this.states.delete(keyId);
  }

  clear(): void {
    this.states.clear();
  }

  private sweep(): void {
    for (const [keyId, state] of this.states) {
      if (this.bounds.idle(state)) this.states.delete(keyId);
      if (this.states.size < this.bounds.sizeMax / 2) return;
    }
  }
}
