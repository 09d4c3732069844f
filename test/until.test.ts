import { expect, test } from "bun:test";
import { until, untilValue } from "./until.ts";

test("untilValue returns the first value read once another task sets it", async () => {
  let ready: { n: number } | undefined;
  setTimeout(() => (ready = { n: 1 }), 20);
  expect(await untilValue(() => ready)).toEqual({ n: 1 });
  let n = 0;
  expect(await untilValue(() => ++n, { accept: (value) => value >= 3 })).toBe(3);
});

test("a wait that is never met fails naming what it awaited and the last value seen", async () => {
  const error = await untilValue(() => ({ held: 2n }), { msMax: 30, what: "the hold released", accept: () => false }).catch(
    (e: Error) => e,
  );
  expect(error).toBeInstanceOf(Error);
  expect((error as Error).message).toBe('not met within 30 ms: the hold released; last value seen: {"held":"2n"}');
  const sent = { count: 1 };
  const unnamed = await until(() => sent.count === 3, 30).catch((e: Error) => e.message);
  expect(unnamed).toBe("not met within 30 ms: () => sent.count === 3; last value seen: false");
});

test("a wait has a bound", async () => {
  await expect(until(() => false, Number.POSITIVE_INFINITY)).rejects.toThrow("outside");
  await expect(until(() => false, 0)).rejects.toThrow("outside");
});
