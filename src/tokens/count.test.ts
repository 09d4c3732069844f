import { expect, test } from "bun:test";
import {
  ADMISSION_COUNT_BYTES_MAX,
  countPromptTokens,
  countTokens,
  countTokensMany,
  isJsWhitespace,
  measureTokensMany,
  promptTokensUpperBound,
  startTokenizer,
  TOKENIZER_COUNTS_PER_KEY_MAX,
  wordsLowerBound,
} from "./count.ts";

test("exact o200k counts, and OpenAI's per-message counts for a prompt", async () => {
  expect(await countTokens("Hello, world!")).toBe(4); // "Hello" "," " world" "!"
  expect(await countTokensMany(["", "Hello, world!", ""])).toEqual([0, 4, 0]);
  // (3 + 4) per message + 3 to prime the reply
  expect(await countPromptTokens([{ role: "user", content: "Hello, world!" }])).toBe(10);
  expect(await countPromptTokens([{ role: "user", content: [{ type: "text", text: "Hello, world!" }], name: "ali" }])).toBe(11);
});

test("the cheap bound is never below the exact count", async () => {
  for (const text of [
    "Hello, world!",
    "سلام دنیا، حال شما چطور است؟",
    "🙂🙃".repeat(50),
    "x".repeat(10_000),
    "def f(x):\n  return x**2\n",
  ]) {
    const messages = [{ role: "user", content: text }];
    await countPromptTokens(messages); // a 10,000-character run without spaces counts in time
    expect(promptTokensUpperBound({ messages })).toBeGreaterThanOrEqual(await countPromptTokens(messages));
  }
});

test("a large count runs off the event loop: timers keep firing while it works", async () => {
  const text = "The quick brown fox jumps over the lazy dog. ".repeat(50_000); // ~2.2 MB
  await countTokens("warm up");
  let ticks = 0;
  const timer = setInterval(() => ticks++, 2);
  const count = await countTokens(text);
  clearInterval(timer);
  expect(count).toBeGreaterThan(400_000);
  // Counted on this thread, the timer could not fire before the count's continuation clears it (0
  // ticks); any tick proves the loop ran meanwhile. How many depends on the machine's speed.
  expect(ticks).toBeGreaterThan(0);
});

const admission = (fairnessKey: string) => ({ purpose: "admission" as const, fairnessKey });
const noise = (bytes: number) => new TextDecoder().decode(crypto.getRandomValues(new Uint8Array(bytes)));

test("admission counts are capped per request: past the cap the prompt is bounded, not counted", async () => {
  const prose = "The quick brown fox jumps over the lazy dog. ".repeat(70_000); // ~3 MB
  const [capped] = await measureTokensMany([prose], admission("cap"));
  const [billing] = await measureTokensMany([prose]);
  expect(capped!.bytesCounted).toBeLessThanOrEqual(ADMISSION_COUNT_BYTES_MAX + 64);
  expect(capped!.lower).toBeLessThan(billing!.tokens);
  expect(capped!.upper).toBeGreaterThan(billing!.tokens);
  expect([billing!.lower, billing!.upper]).toEqual([billing!.tokens, billing!.tokens]); // billing counts everything
  // The cap is per request, across all of its texts.
  const split = await measureTokensMany([prose.slice(0, prose.length / 2), prose.slice(prose.length / 2)], admission("cap"));
  expect(split[0]!.bytesCounted + split[1]!.bytesCounted).toBeLessThanOrEqual(ADMISSION_COUNT_BYTES_MAX + 64);
});

test("one key's long counts do not hold up another key's small one", async () => {
  await countTokens("warm up");
  const finished: string[] = [];
  const heavy = Array.from({ length: TOKENIZER_COUNTS_PER_KEY_MAX }, (_, i) =>
    measureTokensMany([noise(ADMISSION_COUNT_BYTES_MAX / 2)], admission("heavy")).then(() => finished.push(`heavy ${i}`)),
  );
  await Bun.sleep(5); // the heavy counts are under way (the tokenizer shows no queue to wait on)
  const light = countTokens("How many tokens is this?", admission("light")).then(() => finished.push("light"));
  const [queuedTooMany] = await measureTokensMany([noise(1000)], admission("heavy")); // one more at once
  await Promise.all([...heavy, light]);
  expect(finished.indexOf("light")).toBeLessThan(2); // at most the counts already on both threads end first
  expect(queuedTooMany!.bytesCounted).toBe(0); // decided by byte bounds, not queued
});

test("a key over its tokenizer time is decided by byte bounds, other keys are still counted", async () => {
  startTokenizer({ msPerKey: 1 });
  try {
    const text = noise(200_000);
    const [first] = await measureTokensMany([text], admission("spender"));
    expect(first!.bytesCounted).toBeGreaterThan(0);
    const [again] = await measureTokensMany([text], admission("spender"));
    expect(again!.bytesCounted).toBe(0);
    const bytes = Buffer.byteLength(text, "utf8");
    expect([again!.lower, again!.upper]).toEqual([Math.floor(bytes / 128), bytes]);
    const [other] = await measureTokensMany(["Hello, world!"], admission("other"));
    expect([other!.lower, other!.upper]).toEqual([4, 4]);
  } finally {
    startTokenizer();
  }
});

test("a service count is exact however long, and takes its key's turn: billing and other keys' counts end first", async () => {
  await countTokens("warm up");
  const text = "The quick brown fox jumps over the lazy dog. ".repeat(35_000); // ~1.5 MB: past the admission cap
  const finished: string[] = [];
  const service = { purpose: "service" as const, fairnessKey: "counter" };
  const heavy = measureTokensMany([text], service).then((counts) => {
    finished.push("service");
    return counts[0]!;
  });
  await Bun.sleep(5); // the service count is under way (the tokenizer shows no queue to wait on)
  const billing = countTokens("What the upstream wrote.").then(() => finished.push("billing"));
  const other = countTokens("How many tokens is this?", admission("other")).then(() => finished.push("other"));
  const [counted] = await Promise.all([heavy, billing, other]);
  expect(finished.indexOf("service")).toBe(2);
  expect(counted.bytesCounted).toBeGreaterThan(ADMISSION_COUNT_BYTES_MAX);
  expect(counted.lower).toBe(counted.upper);
});

test("words are split on exactly JavaScript's whitespace, the whole Basic Multilingual Plane checked", () => {
  const differ: number[] = [];
  for (let c = 0; c < 0x10000; c++) if (/\s/.test(String.fromCharCode(c)) !== isJsWhitespace(c)) differ.push(c);
  expect(differ).toEqual([]);
  const texts = ["", "   ", "one", " Hello,\tbig\u00a0world!\n", "این\u200cیک متن\u3000است", "a\u2028b\ufeffc 😀 d"];
  for (const text of texts) expect(wordsLowerBound(text)).toBe(text.match(/\S+/g)?.length ?? 0);
});
