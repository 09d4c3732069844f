/**
 * `bun run bench/batches.ts`: what a batch file of the largest size costs the database and the
 * event loop: storing FILE_BYTES_MAX in the `files` table, reading it back whole, and checking
 * FILE_LINES_MAX chat lines (lines.ts `checkLines`), reading their models at upload (pricing.ts
 * `lineModels`), and what create does to price the batch (api.ts `inputLineModels`, then the
 * catalog's models): on a file uploaded with its models, and on one kept without them (counted
 * again), on PGlite in memory, or on PostgreSQL when DATABASE_URL is set. Each stage's longest
 * event-loop wait beside its time. Appends a table to bench/RESULTS.md.
 */
import { loadCatalog } from "../src/catalog/catalog.ts";
import { loadConfig } from "../src/config.ts";
import { newId } from "../src/ids.ts";
import type { KeyRecord } from "../src/keys/store.ts";
import { checkLines } from "../src/batches/lines.ts";
import { inputLineModels } from "../src/batches/api.ts";
import { byCatalogModel, lineModels, toStoredLineModels } from "../src/batches/pricing.ts";
import { FILE_BYTES_MAX, FILE_LINES_MAX, type FileRecord, fileContent, storeFile } from "../src/files/files.ts";
import { openBenchAccount, reportTimes } from "./db-times.ts";
import { loopWaitDuring } from "./measurement.ts";

const { db, close, accountId } = await openBenchAccount();
const catalog = await loadCatalog(db);
const env = loadConfig({ ADMIN_TOKEN: "bench-admin-token-0123456789", KEY_PEPPER: "p".repeat(40) }).env;
const key = { id: newId("key"), accountId, allowedModels: null } as unknown as KeyRecord;

const line = (i: number) =>
  JSON.stringify({
    custom_id: `line-${i}`,
    method: "POST",
    url: "/v1/chat/completions",
    body: { model: "gpt-4o-mini", max_tokens: 64, messages: [{ role: "user", content: `Summarise item ${i}. `.padEnd(300, "x") }] },
  });
const lines = Array.from({ length: FILE_LINES_MAX }, (_, i) => line(i));
const content = new TextEncoder().encode(`${lines.join("\n")}\n`);
const rows: [string, string][] = [];
const time = async <T>(what: string, work: () => Promise<T> | T): Promise<T> => {
  const started = performance.now();
  const value = await work();
  rows.push([what, `${(performance.now() - started).toFixed(0)} ms`]);
  return value;
};

const full = new Uint8Array(FILE_BYTES_MAX).fill(0x61);
const big = await time(`store a ${FILE_BYTES_MAX / 1048576} MiB file`, () =>
  storeFile(db, { accountId, purpose: "batch", filename: "big", content: full }),
);
if ("code" in big) throw new Error(big.message);
await time(`read it back whole`, () => fileContent(db, accountId, big.id));
/** Runs of each loop-wait reading: the machine is shared, so one reading is the median of these and their largest. */
const LOOP_WAIT_RUNS = 5;
/** LOOP_WAIT_RUNS readings of the event loop's longest wait while `work` runs: "median (max)". */
async function loopWaits(work: () => Promise<unknown>): Promise<string> {
  const gaps: number[] = [];
  for (let i = 0; i < LOOP_WAIT_RUNS; i++) gaps.push(await loopWaitDuring(work));
  gaps.sort((a, b) => a - b);
  return `${gaps[Math.floor(LOOP_WAIT_RUNS / 2)]!.toFixed(0)} ms (max ${gaps.at(-1)!.toFixed(0)} ms)`;
}
const models = await time(`read the models of ${FILE_LINES_MAX} lines at upload (in slices)`, () => lineModels(content));
rows.push(["the event loop's longest wait while they are read", await loopWaits(() => lineModels(content))]);
const file = await time(`store ${FILE_LINES_MAX} chat lines (${(content.length / 1048576).toFixed(1)} MiB) with their models`, () =>
  storeFile(db, { accountId, purpose: "batch", filename: "lines", content, lineModels: toStoredLineModels(models) }),
);
if ("code" in file) throw new Error(file.message);
const checked = await time(`check ${FILE_LINES_MAX} chat lines (in slices of CHECK_TURN_MS)`, () =>
  checkLines({ catalog, env }, "/v1/chat/completions", content, key),
);
if ("errors" in checked) throw new Error(JSON.stringify(checked.errors[0]));
rows.push([
  "the event loop's longest wait during a check",
  await loopWaits(() => checkLines({ catalog, env }, "/v1/chat/completions", content, key)),
]);
/** What create does to price a batch of the file: its models read, then the catalog's. */
async function createPricing(of: FileRecord) {
  const byModel = await byCatalogModel(catalog, await inputLineModels(db, of));
  if (byModel.get("gpt-4o-mini")?.lines !== FILE_LINES_MAX) throw new Error("every line names gpt-4o-mini");
}
await time("create's pricing, the file's models kept at upload", () => createPricing(file));
rows.push(["the event loop's longest wait during create's pricing", await loopWaits(() => createPricing(file))]);
// A file uploaded before its models were kept: create reads it whole and counts them (once: it keeps them).
const older = async () => {
  const kept = await storeFile(db, { accountId, purpose: "batch", filename: "older", content });
  if ("code" in kept) throw new Error(kept.message);
  return kept;
};
const olderFiles = await Promise.all(Array.from({ length: LOOP_WAIT_RUNS }, older));
let olderRun = 0;
rows.push([
  "the event loop's longest wait during create's pricing of a file kept without its models (read whole, counted)",
  await loopWaits(() => createPricing(olderFiles[olderRun++]!)),
]);
await close();

reportTimes({
  title: "batch files",
  command: "bun run bench/batches.ts",
  note: `(loop waits: the median of ${LOOP_WAIT_RUNS} runs, and their largest)`,
  rows,
});
