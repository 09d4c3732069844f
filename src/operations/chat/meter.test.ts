import { expect, test } from "bun:test";
import { METER_STEP_TOKENS_MIN, type MeterHold, StreamMeter } from "./meter.ts";

/** A hold covering `covered` output tokens that grows by what `grant` allows, as an admission does. */
function hold(covered: number, grant: (add: number) => Promise<boolean>): MeterHold {
  return {
    coveredOutputUnits: covered,
    async extend(add) {
      if (!(await grant(add))) return false;
      this.coveredOutputUnits += add;
      return true;
    },
  } as MeterHold & { coveredOutputUnits: number };
}

/** One token per word: an exact count the test can check by hand. */
const words = async (text: string) => text.split(" ").filter((w) => w !== "").length;

test("delivers while covered, extends ahead in growing steps, and never delivers past the hold", async () => {
  const granted: number[] = [];
  let budget = 150; // tokens the wallet can still cover
  const meter = new StreamMeter({
    hold: hold(16, async (add) => {
      if (add > budget) return false;
      budget -= add;
      granted.push(add);
      return true;
    }),
    capTokens: 10_000,
    count: words,
  });
  let delivered = 0;
  for (let i = 0; i < 1_000; i++) {
    if (!(await meter.deliver(" word"))) break;
    delivered++;
  }
  // 16 + every step granted; steps halved down to the minimum at the wallet's edge.
  expect(delivered).toBe(16 + granted.reduce((a, b) => a + b, 0));
  expect(delivered).toBeLessThanOrEqual(16 + 150);
  expect(delivered).toBeGreaterThan(16 + 150 - METER_STEP_TOKENS_MIN);
  expect(granted[1]!).toBeGreaterThan(granted[0]!); // steps grow while money lasts
  expect(await meter.exact()).toBe(delivered);
  expect(meter.covered).toBe(delivered);
});

test("the byte bound is made exact before asking for money", async () => {
  let asked = 0;
  const meter = new StreamMeter({ hold: hold(4, async () => (asked++, false)), capTokens: 4, count: words });
  // 4 words of 5 bytes each: 20 bytes bound, 4 exact tokens: all fit without an extension.
  for (let i = 0; i < 4; i++) expect(await meter.deliver(" abcd")).toBe(true);
  expect(await meter.deliver(" abcd")).toBe(false);
  expect(asked).toBe(0); // at the cap: nothing to ask for
  expect(await meter.exact()).toBe(4);
});

test("the upstream's running usage is the count when it reports one", async () => {
  const meter = new StreamMeter({ hold: hold(10, async () => false), capTokens: 10, count: words });
  expect(await meter.deliver("a much longer piece of text than one token", 9)).toBe(true);
  expect(meter.tokens).toBe(9);
  expect(await meter.deliver("x", 11)).toBe(false);
  expect(await meter.exact()).toBe(9);
});

test("a stream with the client's own max_tokens is counted but never cut", async () => {
  const meter = new StreamMeter({ hold: hold(2, async () => true), capTokens: 2, count: words, enforce: false });
  for (let i = 0; i < 5; i++) expect(await meter.deliver(" w")).toBe(true);
  expect(await meter.exact()).toBe(5);
  expect(meter.covered).toBe(2); // and no extension was asked for
});

test("a usage figure without text (hidden reasoning) becomes the count, and the hold is extended to cover it", async () => {
  let budget = 500;
  const meter = new StreamMeter({
    hold: hold(64, async (add) => {
      if (add > budget) return false;
      budget -= add;
      return true;
    }),
    capTokens: 10_000,
    count: words,
  });
  expect(await meter.report(300)).toBe(true);
  expect(meter.tokens).toBe(300);
  expect(meter.covered).toBeGreaterThanOrEqual(300);
  // Past what the wallet can cover: the report is not covered, and the next text is withheld.
  expect(await meter.report(5_000)).toBe(false);
  expect(meter.covered).toBeLessThanOrEqual(64 + 500);
  expect(await meter.deliver(" more")).toBe(false);
  expect(await meter.exact()).toBe(5_000);
});
