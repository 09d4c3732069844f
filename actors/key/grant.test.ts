import { expect, test } from "bun:test";
import { partitionOf } from "../subjects.ts";
import { FakeClock } from "../../test/fakeClock.ts";
import {
  ASK_RETRY_MS,
  ASK_WAIT_MS_MAX,
  askOwner,
  awaitGrant,
  joinAsk,
  KeyStates,
  PartitionOwner,
  type Asking,
  type Tenure,
} from "./grant.ts";

const QUIET_MS = 1_000;

function owner(clock: FakeClock, acquiredAtMs: number) {
  let tenure: Tenure | null = { fenceToken: 1n, acquiredAtMs };
  const partitionOwner = new PartitionOwner({ tenure: () => tenure, clock, quietMs: QUIET_MS });
  return { partitionOwner, tenure: () => tenure!, move: (next: Tenure | null) => (tenure = next) };
}

test("within the quiet period a grant that grows waits until it ends; one that does not goes on at once", async () => {
  const clock = new FakeClock({ startMs: 5_000 });
  const o = owner(clock, 5_000);
  expect(await o.partitionOwner.quiet(0, o.tenure(), false)).toBe("quiet");
  expect(clock.now()).toBe(5_000);
  expect(await o.partitionOwner.quiet(0, o.tenure(), true)).toBe("over");
  expect(clock.now()).toBeGreaterThan(5_000 + QUIET_MS);
  expect(await o.partitionOwner.quiet(0, o.tenure(), false)).toBe("over");
});

test("a grant waiting out the quiet period learns that the partition moved meanwhile", async () => {
  const clock = new FakeClock({ auto: false });
  const o = owner(clock, 0);
  const first = o.tenure();
  const waiting = o.partitionOwner.quiet(0, first, true);
  o.move({ fenceToken: 2n, acquiredAtMs: 10 });
  clock.advance(QUIET_MS + 1);
  expect(await waiting).toBe("moved");
  expect(o.partitionOwner.holds(0, first)).toBe(false);
  expect(o.partitionOwner.holds(0, o.tenure())).toBe(true);
  o.move(null);
  expect(o.partitionOwner.tenureOf(0)).toBeNull();
});

test("a duplicate ask is coalesced: one request while it is under way, a new one after", async () => {
  const holder: Asking<number> = { asking: null };
  let started = 0;
  let answer = (_: number) => {};
  const start = () => {
    started++;
    return new Promise<number>((resolve) => (answer = resolve));
  };
  const first = joinAsk(holder, start);
  const second = joinAsk(holder, start);
  expect([first.mine, second.mine, started]).toEqual([true, false, 1]);
  answer(7);
  expect(await Promise.all([first.reply, second.reply])).toEqual([7, 7]);
  expect(holder.asking).toBeNull();
  const third = joinAsk(holder, start);
  expect([third.mine, started]).toEqual([true, 2]);
});

test("an ask is sent again every ASK_RETRY_MS while the partition has no owner, until one answers", async () => {
  const clock = new FakeClock();
  const sentAt: number[] = [];
  const ownerFromMs = 350;
  const reply = await askOwner(clock, async (sentAtMs) => {
    sentAt.push(sentAtMs);
    if (sentAtMs < 150) return null; // a not-owner reply: the partition is moving
    if (sentAtMs < ownerFromMs) throw new Error("no responders"); // nobody serves it yet
    return "granted";
  });
  expect(reply).toBe("granted");
  expect(sentAt).toEqual([0, 100, 200, 300, 400]);
  expect(sentAt.every((t, i) => i === 0 || t - sentAt[i - 1]! === ASK_RETRY_MS)).toBe(true);
});

test("an ask that no owner answers gives up within ASK_WAIT_MS_MAX", async () => {
  const clock = new FakeClock();
  let attempts = 0;
  const reply = await askOwner(clock, async () => {
    attempts++;
    return null;
  });
  expect(reply).toBeNull();
  expect(clock.now()).toBeLessThanOrEqual(ASK_WAIT_MS_MAX);
  expect(attempts).toBe(Math.floor(ASK_WAIT_MS_MAX / ASK_RETRY_MS) + 1);
});

/** A node's grant of `units`, with one shared ask that the owner answers after `latencyMs`, granting `perAsk`. */
function node(clock: FakeClock, perAsk: number, latencyMs = 10) {
  const state = { left: 0, asks: 0, asking: null as Promise<number> | null };
  const ask = () =>
    joinAsk(state, async () => {
      state.asks++;
      await clock.sleep(latencyMs);
      state.left += perAsk;
      return perAsk;
    });
  const admit = () =>
    awaitGrant(clock, {
      ask,
      take: () => state.left > 0 && state.left-- > 0,
      refusal: (granted: number, mine: boolean) => (granted === 0 && mine ? "refused" : undefined),
      timedOut: () => "timed out",
    });
  return { state, admit };
}

test("concurrent admissions wait on one ask and each takes from what came back", async () => {
  const clock = new FakeClock();
  const n = node(clock, 5);
  const outcomes = await Promise.all(Array.from({ length: 5 }, () => n.admit()));
  expect(outcomes).toEqual(Array(5).fill("taken"));
  expect(n.state.asks).toBe(1);
});

test("admissions that find the answer taken by others ask again; the asker's own refusal ends its wait", async () => {
  const clock = new FakeClock();
  const more = node(clock, 2);
  expect(await Promise.all(Array.from({ length: 5 }, () => more.admit()))).toEqual(Array(5).fill("taken"));
  expect(more.state.asks).toBe(3); // 2 + 2 + 2 units for 5 admissions
  const none = node(clock, 0);
  expect(await Promise.all([none.admit(), none.admit()])).toEqual(["refused", "refused"]);
  expect(none.state.asks).toBe(2); // the waiter that did not ask asks once itself
});

test("an admission whose asks never cover it is refused once ASK_WAIT_MS_MAX has passed", async () => {
  const clock = new FakeClock();
  const state = { asks: 0, asking: null as Promise<null> | null };
  const outcome = await awaitGrant(clock, {
    ask: () =>
      joinAsk(state, async () => {
        state.asks++;
        await clock.sleep(ASK_RETRY_MS);
        return null;
      }),
    take: () => false,
    refusal: () => undefined,
    timedOut: () => "timed out",
  });
  expect(outcome).toBe("timed out");
  expect(clock.now()).toBeGreaterThanOrEqual(ASK_WAIT_MS_MAX);
  expect(state.asks).toBe(ASK_WAIT_MS_MAX / ASK_RETRY_MS);
});

test("at sizeMax keys, state left idle after silence is evicted down to half; state in use stays", () => {
  const clock = new FakeClock();
  const silentMs = 1_000;
  const states = new KeyStates<{ lastUseMs: number; inUse: number }>({
    sizeMax: 8,
    idle: (s) => s.inUse === 0 && clock.now() - s.lastUseMs > silentMs,
  });
  for (let i = 0; i < 8; i++) states.of(`key_${i}`, () => ({ lastUseMs: clock.now(), inUse: i < 2 ? 1 : 0 }));
  clock.advance(silentMs + 1);
  states.of("key_new", () => ({ lastUseMs: clock.now(), inUse: 0 }));
  expect(states.size).toBeLessThanOrEqual(8 / 2 + 1);
  expect(states.get("key_0")).toBeDefined();
  expect(states.get("key_1")).toBeDefined();
  expect(states.get("key_new")).toBeDefined();
  // Nothing is idle before the silence: the next key is added and nothing is lost.
  const busy = new KeyStates<{ lastUseMs: number }>({ sizeMax: 2, idle: (s) => clock.now() - s.lastUseMs > silentMs });
  for (const id of ["a", "b", "c"]) busy.of(id, () => ({ lastUseMs: clock.now() }));
  expect(busy.size).toBe(3);
});

test("a partition's keys are listed and forgotten together", () => {
  const states = new KeyStates<number>({ sizeMax: 100, idle: () => false });
  const ids = Array.from({ length: 40 }, (_, i) => `key_${i}`);
  for (const id of ids) states.of(id, () => 1);
  const p = partitionOf(ids[0]!);
  const inP = ids.filter((id) => partitionOf(id) === p);
  expect(states.inPartition(p).sort()).toEqual(inP.sort());
  states.forget(p);
  expect(states.size).toBe(ids.length - inP.length);
  expect(states.inPartition(p)).toEqual([]);
});

test("the fake clock wakes sleepers in time order, by itself or when advanced", async () => {
  const auto = new FakeClock();
  const woke: string[] = [];
  await Promise.all([auto.sleep(30).then(() => woke.push(`b@${auto.now()}`)), auto.sleep(10).then(() => woke.push(`a@${auto.now()}`))]);
  expect(woke).toEqual(["a@10", "b@30"]);
  const manual = new FakeClock({ auto: false });
  let done = false;
  const sleeping = manual.sleep(50).then(() => (done = true));
  manual.advance(49);
  await Promise.resolve();
  expect([done, manual.sleepers]).toEqual([false, 1]);
  manual.advance(1);
  await sleeping;
  expect(done).toBe(true);
});
