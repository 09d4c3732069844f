/**
 * No function of src/, actors/ or scripts/ (tests aside) spans more lines than biome.jsonc's
 * `noExcessiveLinesPerFunction.maxLines`, counted from its first line to its last, every line
 * (blank lines, comments and the lines of a template literal included). biome's own rule counts
 * fewer (it skips a template literal's lines and the function's first and last), so a function
 * of 106 lines passed it: this check reads the functions' spans from biome's parser (`biome
 * search`) and counts them whole. A function marked `biome-ignore
 * lint/complexity/noExcessiveLinesPerFunction` with its reason (a declarative table) is exempt.
 *
 *   bun run check:functions
 */
import { readFileSync } from "node:fs";
import { z } from "zod";

/**
 * Functions over the limit for now, each "path: its first line up to the parameters" with its
 * reason: printed on every run, and one no longer over fails, so the list only shrinks.
 */
export const OVER_LIMIT_FOR_NOW: Record<string, string> = {};

/** Every kind of function biome's syntax has. */
const FUNCTION_NODES = [
  "JsFunctionDeclaration",
  "JsFunctionExportDefaultDeclaration",
  "JsFunctionExpression",
  "JsArrowFunctionExpression",
  "JsMethodClassMember",
  "JsMethodObjectMember",
  "JsConstructorClassMember",
  "JsGetterClassMember",
  "JsSetterClassMember",
  "JsGetterObjectMember",
  "JsSetterObjectMember",
];
const MARKER = "biome-ignore lint/complexity/noExcessiveLinesPerFunction";

const searchReport = z.object({
  diagnostics: z.array(
    z.object({ location: z.object({ path: z.string(), start: z.object({ line: z.number() }), end: z.object({ line: z.number() }) }) }),
  ),
});

/** A function's span: its file and its first and last lines (1-based). */
export interface Span {
  path: string;
  first: number;
  last: number;
}

/** Every function of `files` (paths from `cwd`, a folder with a biome configuration), as biome parses them. */
export function functionSpans(files: string[], cwd: string, biome = `${import.meta.dir}/../node_modules/.bin/biome`): Span[] {
  const pattern = `or { ${FUNCTION_NODES.map((node) => `${node}()`).join(", ")} }`;
  const args = ["search", "--reporter=json", "--max-diagnostics=none", "--colors=off", pattern, ...files];
  const run = Bun.spawnSync([biome, ...args], { cwd, stdout: "pipe", stderr: "pipe" });
  const out = run.stdout.toString();
  const json = out.slice(out.indexOf("{"));
  if (!json.startsWith("{")) throw new Error(`biome search failed: ${run.stderr.toString()}${out}`);
  return searchReport
    .parse(JSON.parse(json))
    .diagnostics.map(({ location }) => ({ path: location.path, first: location.start.line, last: location.end.line }))
    .sort((a, b) => a.path.localeCompare(b.path) || a.first - b.first);
}

/** True when the comment lines right above `line` carry the marker. */
export function marked(lines: string[], line: number): boolean {
  for (let at = line - 2; at >= 0; at--) {
    const text = lines[at]!.trim();
    if (text.includes(MARKER)) return true;
    if (!(text.startsWith("//") || text.startsWith("*") || text.startsWith("/*"))) return false;
  }
  return false;
}

/** A function over the limit: its name for OVER_LIMIT_FOR_NOW ("path: first line up to the parameters") and where it is. */
export interface Over {
  key: string;
  text: string;
}

/** The functions over `maxLines`, unmarked. */
export function overLimit(spans: Span[], maxLines: number, read: (path: string) => string): Over[] {
  const texts = new Map<string, string[]>();
  const found: Over[] = [];
  for (const span of spans) {
    const length = span.last - span.first + 1;
    if (length <= maxLines) continue;
    const lines = texts.get(span.path) ?? read(span.path).split("\n");
    texts.set(span.path, lines);
    if (marked(lines, span.first)) continue;
    const first = lines[span.first - 1]!.trim();
    found.push({
      key: `${span.path}: ${first.split("(")[0]!.trim()}`,
      text: `${span.path}:${span.first} (${length} lines): ${first.slice(0, 100)}`,
    });
  }
  return found;
}

if (import.meta.main) {
  const root = `${import.meta.dir}/..`;
  const config = Bun.JSONC.parse(readFileSync(`${root}/biome.jsonc`, "utf8")) as {
    linter: { rules: { complexity: { noExcessiveLinesPerFunction: { options: { maxLines: number } } } } };
  };
  const maxLines = config.linter.rules.complexity.noExcessiveLinesPerFunction.options.maxLines;
  const listed = Bun.spawnSync(["git", "ls-files", "--cached", "--others", "--exclude-standard", "src", "actors", "scripts"], {
    cwd: root,
  });
  const files = listed.stdout
    .toString()
    .split("\n")
    .filter((file) => file.endsWith(".ts") && !file.endsWith(".test.ts"));
  const found = overLimit(functionSpans(files, root), maxLines, (path) => readFileSync(`${root}/${path}`, "utf8"));
  const broken = found.filter((over) => !(over.key in OVER_LIMIT_FOR_NOW));
  for (const over of broken) console.log(`OVER    ${over.text}`);
  const gone = Object.keys(OVER_LIMIT_FOR_NOW).filter((key) => !found.some((over) => over.key === key));
  for (const over of found.filter((over) => over.key in OVER_LIMIT_FOR_NOW))
    console.log(
      `\n!!! FOR NOW, OVER ${maxLines} LINES: ${over.text}\n!!! ${OVER_LIMIT_FOR_NOW[over.key]} (OVER_LIMIT_FOR_NOW, scripts/functions.ts)\n`,
    );
  for (const key of gone) console.log(`gone    ${key} (remove it from OVER_LIMIT_FOR_NOW in scripts/functions.ts)`);
  console.log(`functions: ${files.length} files, ${found.length} over ${maxLines} lines, ${broken.length} not allowed`);
  process.exit(broken.length > 0 || gone.length > 0 ? 1 : 0);
}
