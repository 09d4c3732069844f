import { expect, test } from "bun:test";
import { Tiktoken } from "js-tiktoken/lite";
import o200k from "js-tiktoken/ranks/o200k_base";
import { O200K_TOKEN_BYTES_MAX, TokenCounter, type TokenCount } from "./bpe.ts";

const counter = new TokenCounter(o200k);
const reference = new Tiktoken(o200k);
const MIB = 1024 * 1024;

/** A seeded generator (mulberry32), so a failing sample can be reproduced. */
function random(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), seed | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const pick = (next: () => number, alphabet: string[], length: number) =>
  Array.from({ length }, () => alphabet[Math.floor(next() * alphabet.length)]!).join("");
const letters = [..."abcdefghijklmnopqrstuvwxyz"];
const han = Array.from({ length: 400 }, (_, i) => String.fromCharCode(0x4e00 + i));
const randomBytes = (next: () => number, n: number) =>
  new TextDecoder().decode(Uint8Array.from({ length: n }, () => Math.floor(next() * 256)));

test("counts equal js-tiktoken's on ordinary text in any script", () => {
  const next = random(1);
  const samples = [
    "Hello, world!",
    "سلام دنیا، حال شما چطور است؟ ۱۲۳۴",
    "🙂🙃👍🏽 family: 👨‍👩‍👧",
    "def f(x):\n    return x ** 2  # square\n\n\n",
    "I'm sure they'll say it's fine, DON'T panic.",
    "Ünïcödé ÀÉÎ naïve café 1234567 3.14159",
    `${"x".repeat(300)} ${" ".repeat(700)}\n\t\r\n`,
    pick(next, han, 500),
    pick(next, letters, 900),
    randomBytes(next, 4000),
    "The quick brown fox jumps over the lazy dog. ".repeat(100),
  ];
  for (const text of samples) {
    const count = counter.count(text);
    expect(count.tokens, text.slice(0, 20)).toBe(reference.encode(text).length);
    expect([count.lower, count.upper]).toEqual([count.tokens, count.tokens]); // no cut: exact
  }
});

test("a pre-token cut into pieces stays within its bounds: lower ≤ whole count ≤ upper", () => {
  const next = random(2);
  const generators = [
    () => pick(next, letters, 3000),
    () => pick(next, ["a", "b", "c", "d", "e"], 3000),
    () => pick(next, ["the", "quick", "brown", "fox", "tion", "ing", "er"], 600),
    () => pick(next, han, 1500),
    () => "a".repeat(1000 + Math.floor(next() * 3000)),
    () => " ".repeat(500 + Math.floor(next() * 3000)),
    () => "😀🙂".repeat(300),
    () => "-=".repeat(900),
  ];
  let cutBelowWhole = 0;
  for (const pieceBytesMax of [16, 64, 300, 1000]) {
    const cut = new TokenCounter(o200k, { pieceBytesMax });
    for (let round = 0; round < 12; round++) {
      for (const generate of generators) {
        const text = generate();
        const whole = counter.count(text).tokens;
        const bounded = cut.count(text);
        expect(bounded.lower).toBeLessThanOrEqual(whole);
        expect(bounded.upper).toBeGreaterThanOrEqual(whole);
        if (bounded.tokens < whole) cutBelowWhole++;
      }
    }
  }
  // Cuts usually only lose merges, but not always (3 of these seeded samples count lower cut than
  // whole): why `upper` carries a margin per cut rather than trusting the sum of the pieces.
  expect(cutBelowWhole).toBeGreaterThan(0);
});

test("long runs of one character count in linear time, with a tight proven lower bound", () => {
  expect(counter.tokenBytesMax).toBe(O200K_TOKEN_BYTES_MAX);
  // References at a size js-tiktoken can still count: 8 a's, 128 spaces and one 😀 are the longest run tokens.
  expect(reference.encode("a".repeat(2048)).length).toBe(256);
  expect(counter.count("a".repeat(2048)).tokens).toBe(256);
  const cases: [string, string, number][] = [
    ["a", "a".repeat(MIB), MIB / 8],
    ["spaces", " ".repeat(MIB), MIB / 128],
    ["emoji", "😀".repeat(MIB / 4), MIB / 4],
  ];
  for (const [name, text, tokens] of cases) {
    const count = counter.count(text);
    expect(count.tokens, name).toBe(tokens);
    expect(count.lower, name).toBe(tokens);
    expect(count.upper - count.tokens, name).toBeLessThanOrEqual(16); // one margin token per 64 KiB cut
  }
  // One long pre-token that is not a run, and random bytes: counted, within bounds.
  const mixed = counter.count("ab".repeat(MIB / 2));
  expect(mixed.lower).toBeLessThanOrEqual(mixed.tokens);
  expect(mixed.tokens).toBeGreaterThan(MIB / 16);
  const noise = counter.count(randomBytes(random(3), MIB));
  expect(noise.lower).toBe(noise.upper);
});

test("work is capped: past bytesMax the text is bounded by its bytes, and slices never change a count", () => {
  const text = "The quick brown fox jumps over the lazy dog. ".repeat(20_000);
  const exact = counter.count(text).tokens;
  const capped = counter.count(text, 64 * 1024);
  expect(capped.bytesCounted).toBeLessThan(64 * 1024 + 64);
  expect(capped.lower).toBeLessThanOrEqual(exact);
  expect(capped.upper).toBeGreaterThanOrEqual(exact);
  expect(capped.lower).toBeGreaterThan((64 * 1024) / 5); // the counted part counts fully

  // Enough to know: counting stops once the proven lower bound passes lowerEnough.
  const early = counter.start([text], { bytesMax: Number.POSITIVE_INFINITY, lowerEnough: 20_000 });
  while (!counter.step(early, 16 * 1024));
  expect(early.counts[0]!.lower).toBeGreaterThan(20_000);
  expect(early.counts[0]!.lower).toBeLessThanOrEqual(exact);
  expect(early.counts[0]!.bytesCounted).toBeLessThan(text.length / 4);

  const texts = ["Hello, world! ".repeat(500), `${"a".repeat(200_000)} tail`, randomBytes(random(4), 20_000)];
  const job = counter.start(texts, { bytesMax: Number.POSITIVE_INFINITY });
  let steps = 0;
  while (!counter.step(job, 1000)) steps++;
  expect(steps).toBeGreaterThan(10);
  const bounds = ({ tokens, lower, upper }: TokenCount) => ({ tokens, lower, upper }); // work differs: counts are remembered
  expect(job.counts.map(bounds)).toEqual(texts.map((t) => bounds(counter.count(t))));
});
