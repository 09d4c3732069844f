/**
 * Import checks over src/ and actors/, tests excluded, type-only imports included:
 * - cycles (dpdm): a file pair that imports each other is one module cut in two, whatever it
 *   imports. Fails on any cycle not in KNOWN_CYCLES, and on a known cycle that is gone.
 * - the gateway's start path: nothing `src/main.ts` imports, directly or through other files
 *   (type-only and dynamic imports included), may be under a folder of START_PATH_FORBIDDEN. The
 *   simulators are tools for the demo and the tests; a node that could reach them could serve
 *   simulated output to paying customers.
 * - layers: transports → operations → admission and actors → ledger, providers, catalog, keys,
 *   tokens → basics; an import that points up a layer fails, named, unless UPWARD_ALLOWED says
 *   why it stays (an allowance that matches no import fails too, so the list only shrinks).
 *
 *   bun run check:cycles
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, normalize } from "node:path";
import { z } from "zod";

/** Cycles left for a reason, each written as dpdm prints it (files joined by " -> "). */
const KNOWN_CYCLES: Record<string, string> = {};

/** The gateway's entry point, and the folders its import graph must never reach. */
const START_ENTRY = "src/main.ts";
const START_PATH_FORBIDDEN = ["src/sim/"];
/**
 * Layers, highest first: a file imports only from its own layer or below. A request's path reads
 * down this list (docs/layout.md); a file not named here is a basic (errors, config, log, db, bus…).
 */
const LAYERS: { name: string; paths: string[] }[] = [
  { name: "entry points", paths: ["src/main.ts", "src/workers.ts", "src/cli/", "src/sim/", "src/docs/"] },
  { name: "transports", paths: ["src/http/", "src/internal/"] },
  { name: "operations", paths: ["src/operations/", "src/wires/"] },
  {
    name: "admission and actors",
    paths: ["src/admission/", "actors/", "src/cluster.ts", "src/metrics/", "src/accountArea/", "src/payments/", "src/operators/"],
  },
  {
    name: "ledger, providers, catalog, keys, tokens",
    paths: ["src/ledger/", "src/providers/", "src/catalog/", "src/keys/", "src/tokens/"],
  },
];

/** Imports that point up a layer for a reason, each written "importer -> imported". */
const UPWARD_ALLOWED: Record<string, string> = {
  "src/config.ts -> src/accountArea/sms.ts": "the SMS alert template's default is validated where the environment is read",
  "src/providers/anthropic/request.ts -> src/operations/chat/schema.ts":
    "type only: the Anthropic adapter reads chat's `anthropic` field, whose type is the chat request schema's",
};

/** A file's layer: its index from the bottom (0: basics). */
function layerOf(file: string): number {
  const index = LAYERS.findIndex((layer) => layer.paths.some((path) => file === path || file.startsWith(path)));
  return index === -1 ? 0 : LAYERS.length - index;
}

function layerName(layer: number): string {
  return layer === 0 ? "basics" : LAYERS[LAYERS.length - layer]!.name;
}

const IMPORT_SPEC = /(?:^|\n)\s*(?:import|export)\s[^"';]*?from\s*["'](\.{1,2}\/[^"']+)["']|import\(\s*["'](\.{1,2}\/[^"']+)["']\s*\)/g;

/** Every relative import (type-only included) that points up a layer, as "importer -> imported". */
function upwardImports(): Map<string, string> {
  const listed = Bun.spawnSync(["git", "ls-files", "--cached", "--others", "--exclude-standard", "src", "actors"]).stdout.toString();
  const files = listed.split("\n").filter((file) => file.endsWith(".ts") && !file.endsWith(".test.ts"));
  const found = new Map<string, string>();
  for (const file of files) {
    if (!existsSync(file)) continue;
    for (const match of readFileSync(file, "utf8").matchAll(IMPORT_SPEC)) {
      const target = normalize(join(dirname(file), (match[1] ?? match[2])!));
      const from = layerOf(file);
      const to = layerOf(target);
      if (to > from) found.set(`${file} -> ${target}`, `${layerName(from)} imports ${layerName(to)}`);
    }
  }
  return found;
}

const dpdmOutput = z.object({
  circulars: z.array(z.array(z.string())),
  /** Each file's imports; `id` is null for a package or a file dpdm could not resolve. */
  tree: z.record(z.string(), z.array(z.object({ id: z.string().nullable() })).nullable()),
});
type ImportTree = z.infer<typeof dpdmOutput>["tree"];

function readGraph(): z.infer<typeof dpdmOutput> {
  const dir = mkdtempSync(join(tmpdir(), "cycles-"));
  try {
    const out = join(dir, "dpdm.json");
    const args = ["--no-warning", "--no-tree", "--no-circular", "--no-progress", "--exclude", "(node_modules|\\.test\\.ts$)", "-o", out];
    const run = Bun.spawnSync(["bun", "x", "dpdm", ...args, "src/**/*.ts", "actors/**/*.ts"], { stdout: "ignore", stderr: "pipe" });
    if (run.exitCode !== 0) throw new Error(`dpdm failed: ${run.stderr.toString()}`);
    return dpdmOutput.parse(JSON.parse(readFileSync(out, "utf8")));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Each forbidden file `entry` reaches, with the chain of imports that leads to it.
 * @example forbiddenFrom({ "a.ts": [{ id: "src/sim/x.ts" }] }, "a.ts", ["src/sim/"]) // ["a.ts -> src/sim/x.ts"]
 */
function forbiddenFrom(tree: ImportTree, entry: string, forbidden: string[]): string[] {
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
    for (const { id } of tree[file] ?? []) {
      if (id === null || via.has(id)) continue;
      via.set(id, file);
      queue.push(id);
    }
  }
  return found;
}

const graph = readGraph();
if (!(START_ENTRY in graph.tree)) throw new Error(`${START_ENTRY} is not in the import graph`);
const reached = forbiddenFrom(graph.tree, START_ENTRY, START_PATH_FORBIDDEN);
for (const chain of reached) console.log(`START  ${chain} (the gateway's start path must not reach ${START_PATH_FORBIDDEN.join(", ")})`);
const cycles = graph.circulars.map((cycle) => cycle.join(" -> "));
const unknown = cycles.filter((cycle) => !(cycle in KNOWN_CYCLES));
const gone = Object.keys(KNOWN_CYCLES).filter((cycle) => !cycles.includes(cycle));
for (const cycle of cycles) console.log(`${cycle in KNOWN_CYCLES ? "known" : "NEW  "}  ${cycle}`);
for (const cycle of gone) console.log(`gone   ${cycle} (remove it from KNOWN_CYCLES in scripts/cycles.ts)`);
console.log(`cycles: ${cycles.length} found, ${unknown.length} new, ${gone.length} known and gone`);
console.log(`start path: ${reached.length} file(s) of ${START_PATH_FORBIDDEN.join(", ")} reached from ${START_ENTRY}`);

const upward = upwardImports();
const broken = [...upward].filter(([edge]) => !(edge in UPWARD_ALLOWED));
const unused = Object.keys(UPWARD_ALLOWED).filter((edge) => !upward.has(edge));
for (const [edge, why] of broken) console.log(`UP     ${edge} (${why})`);
for (const edge of unused) console.log(`gone   ${edge} (remove it from UPWARD_ALLOWED in scripts/cycles.ts)`);
console.log(`layers: ${upward.size} upward imports, ${broken.length} not allowed, ${unused.length} allowed and gone`);
process.exit(unknown.length > 0 || gone.length > 0 || reached.length > 0 || broken.length > 0 || unused.length > 0 ? 1 : 0);
