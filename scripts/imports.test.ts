import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { check, readLayers, scan, typeOnlyClause, type Rules } from "./imports.ts";

const LAYOUT = `# Layout

## Layers

| layer | folders and files | not from |
|---|---|---|
| top | \`src/top/\` | |
| mid | \`src/mid/\` | |
| store | \`src/store/\` | \`top\` |
| basics | every other file | |

## Files
`;

/** A tree with one break of each rule, and imports that keep them (a type-only skip, an entry point). */
const TREE: Record<string, string> = {
  "src/top/main.ts": `import { m } from "../mid/m.ts";\nimport { s, again } from "../store/s.ts";\nimport type { S } from "../store/s.ts";\nimport { door } from "../store/door.ts";\nimport { x } from "../mid/x.ts";\nexport const all = [m, s, again, door, x];\nexport type T = S;\n`,
  "src/mid/m.ts": `import { s } from "../store/s.ts";\nimport { log } from "../log.ts";\nexport const m = s + log;\n`,
  "src/store/s.ts": `import { m } from "../mid/m.ts";\nexport const s = 1;\nexport type S = number;\nexport const again = () => m;\n`,
  "src/store/door.ts": `export const door = 2;\n`,
  "src/mid/x.ts": `import { y } from "./y.ts";\nexport const x = () => y;\n`,
  "src/mid/y.ts": `import { x } from "./x.ts";\nexport const y = () => x;\n`,
  "src/log.ts": `export const log = 3;\nexport function setLogForTests() {}\nexport const LOG_LINES_MAX = 9;\n`,
  "src/helper.ts": `export const helper = 4;\n`,
  "src/pure.ts": `import { z } from "zod";\nexport const pure = z;\n`,
  "src/mid/m.test.ts": `import { helper } from "../helper.ts";\nimport { all } from "../top/main.ts";\nimport { setLogForTests } from "../log.ts";\nexport const t = [helper, all, setLogForTests];\n`,
};

const root = mkdtempSync(join(tmpdir(), "imports-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));
for (const [file, text] of Object.entries(TREE)) {
  mkdirSync(join(root, dirname(file)), { recursive: true });
  writeFileSync(join(root, file), text);
}

const rules = (more: Partial<Rules> = {}): Rules => ({
  layers: readLayers(LAYOUT),
  upwardAllowed: {},
  entryPoints: { "src/store/door.ts": "the door the top takes" },
  skipAllowed: {},
  knownCycles: {},
  start: { entry: "src/top/main.ts", forbidden: ["src/sim/"] },
  noImports: { "src/pure.ts": "loaded as is" },
  production: ["src/"],
  roots: ["src/top/main.ts", "src/pure.ts"],
  testsOnlyAllowed: {},
  testHooksAllowed: {},
  testTools: [],
  ...more,
});

describe("the import checker", () => {
  test("reads the layers table, the basics row without paths", () => {
    expect(readLayers(LAYOUT)).toEqual([
      { name: "top", paths: ["src/top/"], notFrom: [] },
      { name: "mid", paths: ["src/mid/"], notFrom: [] },
      { name: "store", paths: ["src/store/"], notFrom: ["top"] },
      { name: "basics", paths: [], notFrom: [] },
    ]);
    expect(() => readLayers(LAYOUT.replace("`top` |", "`nowhere` |"))).toThrow("no layer named nowhere");
  });

  test("refuses the skipping import, the upward import, the cycle, the import of a package, the tests-only file and test hook, each named", () => {
    const found = check(scan(root, ["src"]), rules());
    expect(found.map((f) => `${f.rule}: ${f.text.split(" (")[0]}`).sort()).toEqual([
      "cycle: src/mid/m.ts -> src/store/s.ts -> src/mid/m.ts",
      "cycle: src/mid/x.ts -> src/mid/y.ts -> src/mid/x.ts",
      "imports: src/pure.ts -> zod",
      "skip: src/top/main.ts -> src/store/s.ts",
      "tests only: src/helper.ts",
      "tests only: src/log.ts: setLogForTests",
      "up: src/store/s.ts -> src/mid/m.ts",
    ]);
  });

  test("an allowance with its reason keeps an import; one that matches nothing fails as gone", () => {
    const found = check(
      scan(root, ["src"]),
      rules({
        skipAllowed: { "src/top/main.ts -> src/store/s.ts": "a reason", "src/top/main.ts -> src/log.ts": "matches nothing" },
        upwardAllowed: { "src/store/s.ts -> src/mid/m.ts": "a reason" },
        knownCycles: {
          "src/mid/m.ts -> src/store/s.ts -> src/mid/m.ts": "a reason",
          "src/mid/x.ts -> src/mid/y.ts -> src/mid/x.ts": "a reason",
        },
        entryPoints: { "src/store/door.ts": "the door", "src/store/none.ts": "no import goes through it" },
        testsOnlyAllowed: { "src/helper.ts": "a reason" },
        testHooksAllowed: { "src/log.ts: setLogForTests": "a reason" },
        noImports: {},
      }),
    );
    expect(found.map((f) => `${f.rule}: ${f.text}`).sort()).toEqual([
      "gone: src/store/none.ts (ENTRY_POINTS)",
      "gone: src/top/main.ts -> src/log.ts (SKIP_ALLOWED)",
    ]);
  });

  test("the start path: a forbidden folder reached through other files is named with its chain", () => {
    const found = check(scan(root, ["src"]), rules({ start: { entry: "src/top/main.ts", forbidden: ["src/log.ts"] } }));
    expect(found.filter((f) => f.rule === "start").map((f) => f.text)).toEqual(["src/top/main.ts -> src/mid/m.ts -> src/log.ts"]);
  });

  test("an import that names no file fails the scan", () => {
    const broken = mkdtempSync(join(tmpdir(), "imports-"));
    try {
      mkdirSync(join(broken, "src"));
      writeFileSync(join(broken, "src/a.ts"), `import { b } from "./b.ts";\n`);
      expect(() => scan(broken, ["src"])).toThrow("src/a.ts: ./b.ts");
    } finally {
      rmSync(broken, { recursive: true, force: true });
    }
  });

  test("type-only clauses", () => {
    expect(typeOnlyClause("type { A } ")).toBe(true);
    expect(typeOnlyClause("{ type A, type B }")).toBe(true);
    expect(typeOnlyClause("{ type A, b }")).toBe(false);
    expect(typeOnlyClause("* as all ")).toBe(false);
  });
});
