import { expect, test } from "bun:test";
import fc from "fast-check";
import { type ByteSource, inOnePiece, lineTexts } from "./lines.ts";

const lineList = async (source: ByteSource) => {
  const out: string[] = [];
  for await (const text of lineTexts(source)) out.push(text);
  return out;
};
const texts = (text: string) => lineList(inOnePiece(new TextEncoder().encode(text)));

/** The bytes cut at these offsets into slices, as the table's reads give them. */
async function* cutAt(bytes: Uint8Array, cuts: number[]): AsyncGenerator<Uint8Array> {
  let start = 0;
  for (const cut of [...new Set(cuts)].sort((a, b) => a - b)) {
    yield bytes.subarray(start, cut);
    start = cut;
  }
  yield bytes.subarray(start);
}

/** A file's lines as the whole file decoded at once and split on newlines would give them. */
function wholeFileLines(bytes: Uint8Array): string[] {
  const lines = new TextDecoder("utf-8", { ignoreBOM: true })
    .decode(bytes)
    .replace(/^\uFEFF/, "")
    .split("\n");
  if (lines.at(-1)?.trim() === "") lines.pop();
  return lines;
}

test("a file's lines as a split on newlines would give them: the last dropped when only whitespace follows the last newline", async () => {
  expect(await texts("a\nb\n")).toEqual(["a", "b"]);
  expect(await texts("a\nb")).toEqual(["a", "b"]);
  expect(await texts("a\n\n")).toEqual(["a", ""]);
  expect(await texts("a\n  ")).toEqual(["a"]);
  expect(await texts("\na")).toEqual(["", "a"]);
  expect(await texts("")).toEqual([]);
  expect(await texts("\n")).toEqual([""]);
});

test("each line decodes as in the whole file: a byte-order mark dropped at its start only, many-byte characters whole", async () => {
  expect(await texts("\uFEFFسلام\n\uFEFFb\r\n")).toEqual(["سلام", "\uFEFFb\r"]);
  for (const text of ["\uFEFFسلام\n\uFEFFb\r\n", "x\n\n y \n", "😀\n😀😀"]) {
    expect(await texts(text)).toEqual(wholeFileLines(new TextEncoder().encode(text)));
  }
});

test("a line split over two slices, and a character split over two slices, read as in the whole file", async () => {
  const bytes = new TextEncoder().encode('{"a":"😀"}\r\n\nسلام');
  const emoji = bytes.indexOf(0xf0);
  expect(await lineList(cutAt(bytes, [3, emoji + 2]))).toEqual(['{"a":"😀"}\r', "", "سلام"]);
  // The byte-order mark itself cut in two, and a slice of nothing.
  expect(await lineList(cutAt(new Uint8Array([0xef, 0xbb, 0xbf, 0x61]), [1, 1, 4]))).toEqual(["a"]);
});

test("any file cut into any slices reads as the whole file: CRLF, empty lines, a last line without its newline, bytes not UTF-8", async () => {
  const pieces = ["a", "{}", "\n", "\r\n", " ", "é", "😀", "سلام", "\uFEFF", "\n\n"];
  const textFile = fc.array(fc.constantFrom(...pieces), { maxLength: 60 }).map((p) => new TextEncoder().encode(p.join("")));
  const anyBytes = fc.uint8Array({ maxLength: 200 }).map((b) => b.map((x) => (x % 7 === 0 ? 0x0a : x)));
  const file = fc.oneof(textFile, anyBytes);
  const cut = file.chain((bytes) => fc.tuple(fc.constant(bytes), fc.array(fc.nat({ max: bytes.length }), { maxLength: 12 })));
  await fc.assert(
    fc.asyncProperty(cut, async ([bytes, cuts]) => {
      expect(await lineList(cutAt(bytes, cuts))).toEqual(wholeFileLines(bytes));
    }),
    { numRuns: 500, seed: 20_261_203 },
  );
});
