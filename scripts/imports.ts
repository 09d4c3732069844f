/**
 * The import graph of a source tree, and the rules docs/layout.md draws over it: cycles, layers
 * (no import up, no import that skips past the layers a store sits under), the gateway's start
 * path, files that must import nothing, and production files that only tests use. Pure but for
 * reading files; scripts/cycles.ts runs it on this repository, its test on a fixture tree.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, normalize } from "node:path";

/** One import: `from` and `to` relative to the tree's root; `typeOnly` when it names types alone. */
export interface Edge {
  from: string;
  to: string;
  typeOnly: boolean;
  /** A file loaded by its URL (a `new URL` of `import.meta.url`): a worker, a page's script. */
  loaded: boolean;
  /** The names imported, or "*" for all of them (a namespace, a default, a dynamic import, a load). */
  names: string[] | "*";
}

export interface Graph {
  files: string[];
  edges: Edge[];
  /** Each file's exported values (functions, classes, variables; UPPER_CASE limits aside) not used in the file itself. */
  exports: Record<string, string[]>;
  /** Each file's imports of packages and built-ins (`zod`, `node:fs`). */
  packages: Record<string, string[]>;
}

/** A row of docs/layout.md's layers table, highest first. */
export interface Layer {
  name: string;
  paths: string[];
  /** Layers above this one that may not import it directly: they reach it through a layer between. */
  notFrom: string[];
}

export interface Rules {
  layers: Layer[];
  /** Imports that point up a layer, "importer -> imported", each with its reason. */
  upwardAllowed: Record<string, string>;
  /** Files of a closed layer that the layers above may import directly, each with its reason. */
  entryPoints: Record<string, string>;
  /** Skipping imports left for a reason, "importer -> imported". */
  skipAllowed: Record<string, string>;
  /** Cycles left for a reason, files joined by " -> " from the cycle's smallest file. */
  knownCycles: Record<string, string>;
  /** The gateway's entry point and the folders its imports (of any kind) must never reach. */
  start: { entry: string; forbidden: string[] };
  /** Files that must import nothing, each with its reason. */
  noImports: Record<string, string>;
  /** Where production files live; a production file no production file imports must be a root. */
  production: string[];
  /** Files run as programs (package scripts, `import.meta.main`) or imported by other programs: production roots. */
  roots: string[];
  /** Production files that only tests use, left for a reason. */
  testsOnlyAllowed: Record<string, string>;
  /** Exports that only tests use (test hooks), "file: name", left for a reason. */
  testHooksAllowed: Record<string, string>;
  /** Folders of tools for the tests and the demo, whose use by tests alone is their purpose. */
  testTools: string[];
}

export interface Finding {
  rule: "cycle" | "up" | "skip" | "start" | "imports" | "tests only" | "gone";
  text: string;
}

const SPEC = String.raw`["']([^"'\n]+)["']`;
const IMPORT = new RegExp(
  String.raw`(?:^|\n|;)[ \t]*(?:import|export)\s([^"';]*?)from\s*${SPEC}|(?:^|\n|;)[ \t]*import\s*${SPEC}|import\(\s*${SPEC}\s*\)|new URL\(\s*${SPEC},\s*import\.meta\.url\s*\)`,
  "g",
);

/** The names an import's clause takes: `{ a, b as c }` → a, b; a namespace or a default → "*". */
function namesOf(clause: string): string[] | "*" {
  const braces = clause.match(/^\s*(?:type\s+)?\{([^}]*)\}\s*$/);
  if (!braces) return "*";
  return braces[1]!
    .split(",")
    .map((part) =>
      part
        .trim()
        .replace(/^type\s+/, "")
        .split(/\s+as\s+/)[0]!
        .trim(),
    )
    .filter(Boolean);
}

const EXPORTED = /(?:^|\n)export\s+(?:async\s+)?(?:function\*?|const|let|class|enum|abstract\s+class)\s+([A-Za-z_$][\w$]*)/g;

/** The values `text` exports and uses nowhere else in itself (comments aside), UPPER_CASE limits left out. */
export function unusedInFile(text: string): string[] {
  const code = text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`\\])\/\/.*$/gm, "$1");
  const names = [...code.matchAll(EXPORTED)].map((match) => match[1]!).filter((name) => !/^[A-Z][A-Z0-9_]*$/.test(name));
  return names.filter((name) => code.split(new RegExp(`(?<![\\w$])(?<![^.]\\.)${name.replaceAll("$", "\\$")}(?![\\w$])`)).length <= 2);
}

/** True when an import's clause names types only: `type { A }`, `{ type A, type B }`. */
export function typeOnlyClause(clause: string): boolean {
  const text = clause.trim();
  if (/^type\s/.test(text)) return true;
  const names = text.match(/^\{([^}]*)\}$/);
  if (!names) return false;
  const parts = names[1]!
    .split(",")
    .map((part) => part.trim())
    .filter(Boolean);
  return parts.length > 0 && parts.every((part) => part.startsWith("type "));
}

function resolveSpec(root: string, from: string, spec: string): string | null {
  const base = normalize(join(dirname(from), spec));
  for (const candidate of [base, base.replace(/\.js$/, ".ts"), `${base}.ts`, join(base, "index.ts")]) {
    const path = join(root, candidate);
    if (existsSync(path) && statSync(path).isFile()) return candidate;
  }
  return null;
}

function walk(root: string, dir: string, out: string[]): void {
  const path = join(root, dir);
  if (!existsSync(path)) return;
  for (const entry of readdirSync(path, { withFileTypes: true })) {
    if (entry.name === "node_modules" || entry.name.startsWith(".")) continue;
    const child = join(dir, entry.name);
    if (entry.isDirectory()) walk(root, child, out);
    else if (entry.name.endsWith(".ts") && !entry.name.endsWith(".d.ts")) out.push(child);
  }
}

/**
 * Every relative import of the `.ts` files under `dirs` (type-only, dynamic and URL loads
 * included). An import that names no file fails: the graph is never silently short.
 */
export function scan(root: string, dirs: string[], skip: (file: string) => boolean = () => false): Graph {
  const files: string[] = [];
  for (const dir of dirs) walk(root, dir, files);
  const kept = files.filter((file) => !skip(file)).sort();
  const edges: Edge[] = [];
  const packages: Record<string, string[]> = {};
  const exports: Record<string, string[]> = {};
  const unresolved: string[] = [];
  for (const from of kept) {
    const text = readFileSync(join(root, from), "utf8");
    exports[from] = unusedInFile(text);
    for (const match of text.matchAll(IMPORT)) {
      const spec = (match[2] ?? match[3] ?? match[4] ?? match[5])!;
      if (!spec.startsWith("./") && !spec.startsWith("../")) {
        if (match[5] === undefined) packages[from] = [...(packages[from] ?? []), spec];
        continue;
      }
      const to = resolveSpec(root, from, spec);
      if (to === null && match[5] !== undefined && existsSync(join(root, dirname(from), spec))) continue; // a folder of assets
      if (to === null) {
        unresolved.push(`${from}: ${spec}`);
        continue;
      }
      const names = match[1] !== undefined ? namesOf(match[1]) : match[3] !== undefined ? [] : "*";
      edges.push({ from, to, typeOnly: match[1] !== undefined && typeOnlyClause(match[1]), loaded: match[5] !== undefined, names });
    }
  }
  if (unresolved.length > 0) throw new Error(`imports that name no file:\n  ${unresolved.join("\n  ")}`);
  return { files: kept, edges, packages, exports };
}

/** The repository's files: what git tracks or would track (ignored files left out). */
export function gitFiles(root: string): Set<string> {
  const listed = Bun.spawnSync(["git", "ls-files", "--cached", "--others", "--exclude-standard"], { cwd: root }).stdout.toString();
  return new Set(listed.split("\n").filter((file) => existsSync(join(root, file))));
}

/**
 * The layers table of docs/layout.md: the rows under its `## Layers` heading, `| name | paths |
 * not from |`, paths and layer names in backticks or comma-separated.
 */
export function readLayers(markdown: string): Layer[] {
  const section = markdown.split(/\n## Layers\n/)[1]?.split(/\n## /)[0];
  if (section === undefined) throw new Error("no `## Layers` section");
  const rows = section
    .split("\n")
    .filter((line) => line.startsWith("|"))
    .map((line) =>
      line
        .slice(1, -1)
        .split("|")
        .map((cell) => cell.trim()),
    );
  const layers: Layer[] = [];
  for (const [name, paths, notFrom] of rows.slice(2)) {
    const listed = (cell: string | undefined) => [...(cell ?? "").matchAll(/`([^`]+)`/g)].map((m) => m[1]!);
    layers.push({ name: name!.replaceAll("*", ""), paths: listed(paths), notFrom: listed(notFrom) });
  }
  if (layers.length === 0) throw new Error("the `## Layers` table has no rows");
  for (const layer of layers)
    for (const name of layer.notFrom)
      if (!layers.some((other) => other.name === name)) throw new Error(`layer ${layer.name}: no layer named ${name}`);
  return layers;
}

function isProduction(rules: Rules, file: string): boolean {
  return rules.production.some((dir) => file.startsWith(dir)) && !file.endsWith(".test.ts");
}

/** A file's layer: its index from the top, or null for a file of no layer (tests, benchmarks, scripts). */
function layerOf(rules: Rules, file: string): number | null {
  if (!isProduction(rules, file)) return null;
  const { layers } = rules;
  const index = layers.findIndex((layer) => layer.paths.some((path) => file === path || (path.endsWith("/") && file.startsWith(path))));
  if (index !== -1) return index;
  const basics = layers.findIndex((layer) => layer.paths.length === 0);
  return basics === -1 ? null : basics;
}

/** Strongly connected components of two files or more (Tarjan), each from its smallest file in import order. */
export function cyclesOf(graph: Graph): string[] {
  const next = new Map<string, string[]>();
  for (const edge of graph.edges) if (!edge.loaded) next.set(edge.from, [...(next.get(edge.from) ?? []), edge.to]);
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[] = [];
  const visit = (file: string): void => {
    index.set(file, index.size);
    low.set(file, index.get(file)!);
    stack.push(file);
    onStack.add(file);
    for (const to of next.get(file) ?? []) {
      if (!index.has(to)) {
        visit(to);
        low.set(file, Math.min(low.get(file)!, low.get(to)!));
      } else if (onStack.has(to)) low.set(file, Math.min(low.get(file)!, index.get(to)!));
    }
    if (low.get(file) !== index.get(file)) return;
    const component: string[] = [];
    for (let top = stack.pop()!; ; top = stack.pop()!) {
      onStack.delete(top);
      component.push(top);
      if (top === file) break;
    }
    if (component.length > 1) found.push(cycleText(component, next));
  };
  for (const file of [...graph.files].sort()) if (!index.has(file)) visit(file);
  return found.sort();
}

/** A component as one loop of imports from its smallest file, so the text is the same run after run. */
function cycleText(component: string[], next: Map<string, string[]>): string {
  const members = new Set(component);
  const start = [...component].sort()[0]!;
  const path = [start];
  const seen = new Set(path);
  for (let at = start; ; ) {
    const to = (next.get(at) ?? []).find((file) => members.has(file) && (!seen.has(file) || file === start));
    if (to === undefined || to === start) break;
    path.push(to);
    seen.add(to);
    at = to;
  }
  return [...path, start].join(" -> ");
}

/** Each forbidden file `entry` reaches, with the chain of imports that leads to it. */
function forbiddenFrom(graph: Graph, entry: string, forbidden: string[]): string[] {
  const via = new Map<string, string | null>([[entry, null]]);
  const queue = [entry];
  const found: string[] = [];
  for (let file = queue.shift(); file !== undefined; file = queue.shift()) {
    if (forbidden.some((folder) => file.startsWith(folder))) {
      const chain = [file];
      for (let step = via.get(file); step; step = via.get(step)) chain.unshift(step);
      found.push(chain.join(" -> "));
      continue;
    }
    for (const edge of graph.edges) {
      if (edge.from !== file || via.has(edge.to)) continue;
      via.set(edge.to, file);
      queue.push(edge.to);
    }
  }
  return found;
}

function layerFindings(graph: Graph, rules: Rules): Finding[] {
  const { layers } = rules;
  const found: Finding[] = [];
  const upward = new Set<string>();
  const skipping = new Set<string>();
  const doors = new Set<string>();
  for (const edge of graph.edges) {
    if (edge.loaded) continue;
    const from = layerOf(rules, edge.from);
    const to = layerOf(rules, edge.to);
    if (from === null || to === null || from === to) continue;
    const key = `${edge.from} -> ${edge.to}`;
    if (to < from) {
      upward.add(key);
      if (!(key in rules.upwardAllowed))
        found.push({ rule: "up", text: `${key} (${layers[from]!.name} imports ${layers[to]!.name}, a layer above it)` });
      continue;
    }
    if (edge.typeOnly || !layers[to]!.notFrom.includes(layers[from]!.name)) continue;
    if (edge.to in rules.entryPoints) {
      doors.add(edge.to);
      continue;
    }
    skipping.add(key);
    if (!(key in rules.skipAllowed))
      found.push({
        rule: "skip",
        text: `${key} (${layers[from]!.name} reaches ${layers[to]!.name} only through a layer between, or a file of ENTRY_POINTS)`,
      });
  }
  for (const key of Object.keys(rules.upwardAllowed)) if (!upward.has(key)) found.push({ rule: "gone", text: `${key} (UPWARD_ALLOWED)` });
  for (const key of Object.keys(rules.skipAllowed)) if (!skipping.has(key)) found.push({ rule: "gone", text: `${key} (SKIP_ALLOWED)` });
  for (const file of Object.keys(rules.entryPoints)) if (!doors.has(file)) found.push({ rule: "gone", text: `${file} (ENTRY_POINTS)` });
  return found;
}

/**
 * Production files that no production file imports and that are no root (only tests, or nothing,
 * use them), and production files that import test support.
 */
function testsOnly(graph: Graph, rules: Rules): Finding[] {
  const checked = (file: string) => isProduction(rules, file) && !rules.testTools.some((dir) => file.startsWith(dir));
  const usedByProduction = new Set(graph.edges.filter((edge) => isProduction(rules, edge.from)).map((edge) => edge.to));
  const usedByAny = new Set(graph.edges.map((edge) => edge.to));
  const found: Finding[] = [];
  const allowed = new Set<string>();
  for (const file of graph.files) {
    if (!checked(file) || usedByProduction.has(file) || rules.roots.includes(file)) continue;
    if (file in rules.testsOnlyAllowed) allowed.add(file);
    else
      found.push({
        rule: "tests only",
        text: `${file} (${usedByAny.has(file) ? "imported by tests only: move it under test/" : "imported by nothing: remove it"})`,
      });
  }
  for (const edge of graph.edges)
    if (checked(edge.from) && !isProduction(rules, edge.to) && !(edge.from in rules.testsOnlyAllowed) && edge.to.startsWith("test/"))
      found.push({ rule: "tests only", text: `${edge.from} -> ${edge.to} (production code imports test support)` });
  for (const file of Object.keys(rules.testsOnlyAllowed))
    if (!allowed.has(file)) found.push({ rule: "gone", text: `${file} (TESTS_ONLY_ALLOWED)` });
  return [...found, ...testHooks(graph, rules, checked)];
}

/** Exports of production files that no production file imports nor the file itself uses: test hooks, or dead code. */
function testHooks(graph: Graph, rules: Rules, checked: (file: string) => boolean): Finding[] {
  const found: Finding[] = [];
  const kept = new Set<string>();
  for (const file of graph.files) {
    if (!checked(file) || rules.roots.includes(file) || file in rules.testsOnlyAllowed) continue;
    const into = graph.edges.filter((edge) => edge.to === file);
    const byProduction = into.filter((edge) => isProduction(rules, edge.from));
    if (byProduction.length === 0) continue; // the whole file is only tests' (or nobody's): named as such above
    for (const name of graph.exports[file] ?? []) {
      const imports = (edges: Edge[]) => edges.some((edge) => edge.names === "*" || edge.names.includes(name));
      if (imports(byProduction)) continue;
      const key = `${file}: ${name}`;
      if (key in rules.testHooksAllowed) kept.add(key);
      else
        found.push({
          rule: "tests only",
          text: `${key} (${imports(into) ? "a test hook: only tests use it" : "used by nothing: remove it"})`,
        });
    }
  }
  for (const key of Object.keys(rules.testHooksAllowed))
    if (!kept.has(key)) found.push({ rule: "gone", text: `${key} (TEST_HOOKS_ALLOWED)` });
  return found;
}

/** Every rule broken, each named; empty when the tree keeps them all. */
export function check(graph: Graph, rules: Rules): Finding[] {
  const found: Finding[] = [];
  const cycles = cyclesOf(graph);
  for (const cycle of cycles) if (!(cycle in rules.knownCycles)) found.push({ rule: "cycle", text: cycle });
  for (const cycle of Object.keys(rules.knownCycles))
    if (!cycles.includes(cycle)) found.push({ rule: "gone", text: `${cycle} (KNOWN_CYCLES)` });
  if (!graph.files.includes(rules.start.entry)) found.push({ rule: "start", text: `${rules.start.entry} is not in the import graph` });
  else for (const chain of forbiddenFrom(graph, rules.start.entry, rules.start.forbidden)) found.push({ rule: "start", text: chain });
  for (const [file, why] of Object.entries(rules.noImports)) {
    const imported = [...graph.edges.filter((edge) => edge.from === file).map((edge) => edge.to), ...(graph.packages[file] ?? [])];
    for (const target of imported) found.push({ rule: "imports", text: `${file} -> ${target} (${why})` });
  }
  found.push(...layerFindings(graph, rules), ...testsOnly(graph, rules));
  return found;
}
