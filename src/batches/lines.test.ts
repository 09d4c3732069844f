import { expect, test } from "bun:test";
import { lineTexts } from "./lines.ts";

const texts = (text: string) => [...lineTexts(new TextEncoder().encode(text))];

test("a file's lines as a split on newlines would give them: the last dropped when only whitespace follows the last newline", () => {
  expect(texts("a\nb\n")).toEqual(["a", "b"]);
  expect(texts("a\nb")).toEqual(["a", "b"]);
  expect(texts("a\n\n")).toEqual(["a", ""]);
  expect(texts("a\n  ")).toEqual(["a"]);
  expect(texts("\na")).toEqual(["", "a"]);
  expect(texts("")).toEqual([]);
  expect(texts("\n")).toEqual([""]);
});

test("each line decodes as in the whole file: a byte-order mark dropped at its start only, many-byte characters whole", () => {
  expect(texts("\uFEFFسلام\n\uFEFFb\r\n")).toEqual(["سلام", "\uFEFFb\r"]);
  for (const text of ["\uFEFFسلام\n\uFEFFb\r\n", "x\n\n y \n", "😀\n😀😀"]) {
    const whole = text.replace(/^\uFEFF/, "").split("\n");
    if (whole.at(-1)?.trim() === "") whole.pop();
    expect(texts(text)).toEqual(whole);
  }
});
