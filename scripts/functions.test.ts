import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { functionSpans, overLimit } from "./functions.ts";

const dir = mkdtempSync(join(tmpdir(), "functions-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const lines = (n: number) => Array.from({ length: n }, (_, i) => `line ${i}`).join("\n");
const SOURCE = `export function page(): string {
  return \`
${lines(10)}\`;
}

// biome-ignore lint/complexity/noExcessiveLinesPerFunction: a declarative table.
export function table(): string {
  return \`
${lines(10)}\`;
}

class Holder {
  method(): number {
    // one
    // two
    return 1;
  }
}
export const arrow = () => new Holder().method();
`;

test("a function's every line counts, a template literal's too; a marked one is exempt", () => {
  writeFileSync(join(dir, "biome.json"), "{}");
  writeFileSync(join(dir, "pages.ts"), SOURCE);
  const spans = functionSpans(["pages.ts"], dir);
  expect(spans.map((span) => [span.path, span.first, span.last])).toEqual([
    ["pages.ts", 1, 13],
    ["pages.ts", 16, 28],
    ["pages.ts", 31, 35],
    ["pages.ts", 37, 37],
  ]);
  expect(overLimit(spans, 5, () => SOURCE)).toEqual([
    { key: "pages.ts: export function page", text: "pages.ts:1 (13 lines): export function page(): string {" },
  ]);
});
