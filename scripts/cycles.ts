/**
 * The import rules of docs/layout.md, checked over src/, actors/, bench/, test/ and scripts/
 * (type-only, dynamic and URL-loaded imports included; scripts/imports.ts reads them):
 * - no cycle: a file pair that imports each other is one module cut in two.
 * - layers, read from docs/layout.md's `## Layers` table: an import never points up a layer;
 *   a layer's "not from" column names the layers above that reach it only through a layer
 *   between (a transport reaches the ledger through an operation), unless the file imported is
 *   one of ENTRY_POINTS. Type-only imports may skip: a type names a value a layer between hands over.
 * - the gateway's start path: nothing `src/main.ts` imports, directly or through other files,
 *   is under START_PATH_FORBIDDEN (a node that could reach the simulators could serve simulated
 *   output to paying customers).
 * - NO_IMPORTS files import nothing; a production file is imported by production code or is a
 *   root, and so is each of its exports (UPPER_CASE limits aside): no test hook in production.
 * Every allowance says why, and one that matches nothing fails too, so the lists only shrink.
 *
 *   bun run check:cycles
 */
import { readFileSync } from "node:fs";
import { check, gitFiles, readLayers, scan, type Rules } from "./imports.ts";

/** Cycles left for a reason, each from its smallest file (files joined by " -> "). */
const KNOWN_CYCLES: Record<string, string> = {};

/** Imports that point up a layer for a reason, each written "importer -> imported". */
const UPWARD_ALLOWED: Record<string, string> = {
  "src/config.ts -> src/accountArea/sms.ts": "the SMS alert template's default is validated where the environment is read",
  "src/config.ts -> src/tokens/count.ts": "TOKENIZER_MS_PER_KEY's default and window are the tokenizer's own constants, defined once",
  "src/providers/anthropic/request.ts -> src/operations/chat/schema.ts":
    "type only: the Anthropic adapter reads chat's `anthropic` field, whose type is the chat request schema's",
};

/** Files of a closed layer that the layers above it import directly, each with its reason. */
const ENTRY_POINTS: Record<string, string> = {
  "actors/protocol.ts":
    "the messages between actors and their watchers (zod): a transport announces a change (KEY_EVENTS, PRICE_EVENTS, POOL_EVENTS) or gathers a figure (PURSE_FIGURES) in the protocol's words",
  "actors/subjects.ts": "every NATS subject, built in one place: the internal client addresses the service by them",
  "actors/pool/savedPools.ts": "the pools changed at run time: the admin API saves one here, every node's pool actor reloads it",
  "src/ledger/wallets.ts":
    "an account and its wallet: the admin API creates, tops up and adjusts; the console and /v1/credits read the balance",
  "src/ledger/audit.ts": "the ledger's audit (read only), which the admin API runs on demand",
  "src/ledger/deadletter.ts": "usage records the database refused: the admin API lists and replays them",
  "src/keys/restrictions.ts": "a key's restrictions: the fields the admin API and the console take, the checks admission runs",
  "src/keys/accountLimits.ts": "an account's and a key's limits: their defaults and bounds, the body the admin API and the console take",
};

/** Imports that skip past a layer, left for a reason, each written "importer -> imported". */
const SKIP_ALLOWED: Record<string, string> = {
  "src/http/health.ts -> src/db/client.ts": "the readiness probe asks the database itself (SELECT 1) and names the error code it meets",
};

/** Production files that no production file imports, and why they are no test support. */
const LIBRARIES: Record<string, string> = {
  "src/internal/client.ts":
    "the client that internal services import to call the gateway over NATS (docs/internal-api.md); the gateway never calls itself",
};

/** Production files that only tests use, left for a reason. */
const TESTS_ONLY_ALLOWED: Record<string, string> = {};

/** Exports of production modules that only tests use, each "file: name", left for a reason. */
const TEST_HOOKS_ALLOWED: Record<string, string> = {};

/** Folders of tools for the demo and the tests, by design: tests-only use is their purpose. */
const TEST_TOOLS = ["src/sim/"];

/** The gateway's entry point, and the folders its import graph must never reach. */
const START_ENTRY = "src/main.ts";
const START_PATH_FORBIDDEN = ["src/sim/"];

/** Files that import nothing, not even a package. */
const NO_IMPORTS: Record<string, string> = {
  "src/providers/sse.ts": "the dashboard page loads it as is, its types stripped (src/http/live/route.ts)",
};

const root = `${import.meta.dir}/..`;
const tracked = gitFiles(root);
const packageScripts = Object.values((await Bun.file(`${root}/package.json`).json()).scripts as Record<string, string>).join("\n");
const graph = scan(root, ["src", "actors", "bench", "test", "scripts"], (file) => !tracked.has(file) || file.startsWith("bench/peers/"));
const roots = graph.files.filter(
  (file) => packageScripts.includes(file) || /\bimport\.meta\.main\b/.test(readFileSync(`${root}/${file}`, "utf8")),
);
const rules: Rules = {
  layers: readLayers(readFileSync(`${root}/docs/layout.md`, "utf8")),
  upwardAllowed: UPWARD_ALLOWED,
  entryPoints: ENTRY_POINTS,
  skipAllowed: SKIP_ALLOWED,
  knownCycles: KNOWN_CYCLES,
  start: { entry: START_ENTRY, forbidden: START_PATH_FORBIDDEN },
  noImports: NO_IMPORTS,
  production: ["src/", "actors/"],
  roots: [...roots, ...Object.keys(LIBRARIES)],
  testsOnlyAllowed: TESTS_ONLY_ALLOWED,
  testHooksAllowed: TEST_HOOKS_ALLOWED,
  testTools: TEST_TOOLS,
};
const found = check(graph, rules);
for (const finding of found) console.log(`${finding.rule.toUpperCase().padEnd(10)} ${finding.text}`);
console.log(`imports: ${graph.edges.length} across ${graph.files.length} files, ${rules.layers.length} layers; ${found.length} broken`);
process.exit(found.length > 0 ? 1 : 0);
