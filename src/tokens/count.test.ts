import { expect, test } from "bun:test";
import { countPromptTokens, countTokens, countTokensMany, promptTokensUpperBound } from "./count.ts";

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
  expect(ticks).toBeGreaterThan(3);
});
