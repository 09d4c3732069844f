/**
 * `bun run bench/batches.ts`: what a batch file of the largest size costs the database and the
 * event loop: storing FILE_BYTES_MAX in the `files` table, reading it back in slices, and checking
 * FILE_LINES_MAX chat lines (lines.ts `checkLines`), reading their models at upload (pricing.ts
 * `lineModels`), and what create does to price the batch (api.ts `inputLineModels`, then the
 * catalog's models): on a file uploaded with its models, and on one kept without them (counted
 * again), the worker's validation of the file as stored, and a download of it
 * (`GET /v1/files/{id}/content`), on PGlite in memory, or on PostgreSQL when DATABASE_URL is set.
 * Each stage's longest event-loop wait beside its time. Appends a table to bench/RESULTS.md.
 */
import { loadCatalog } from "../src/catalog/catalog.ts";
import { loadConfig } from "../src/config.ts";
import { accounts } from "../src/db/schema.ts";
import { newId } from "../src/ids.ts";
import type { KeyRecord } from "../src/keys/store.ts";
import { checkLines, inOnePiece } from "../src/batches/lines.ts";
import { inputLineModels } from "../src/batches/api.ts";
import { byCatalogModel, lineModels, toStoredLineModels } from "../src/batches/pricing.ts";
import {
  FILE_BYTES_MAX,
  FILE_LINES_MAX,
  FILE_READ_SLICE_BYTES,
  type FileRecord,
  fileSlices,
  fileStream,
  storeFile,
} from "../src/files/files.ts";
import { openTestDb } from "../test/helpers.ts";
import { reportTimes } from "./db-times.ts";
import { loopWaitDuring } from "./measurement.ts";
import { openDb } from "../src/db/client.ts";
import { migrate } from "../src/db/migrate.ts";

// PGlite as the embedded gateway runs it (PGLITE_THREAD, default worker); PostgreSQL when DATABASE_URL is set.
const pgliteThread = process.env.PGLITE_THREAD === "inline" ? "inline" : "worker";
const { db, close } = process.env.DATABASE_URL ? await openTestDb() : await openWithoutServices();
async function openWithoutServices() {
  const opened = await openDb({ dataFolder: null, pglite: { thread: pgliteThread } });
  await migrate(opened);
  return { db: opened, close: () => opened.close() };
}
const catalog = await loadCatalog(db);
const env = loadConfig({ ADMIN_TOKEN: "bench-admin-token-0123456789", KEY_PEPPER: "p".repeat(40) }).env;
const accountId = newId("acc");
await db.orm.insert(accounts).values({ id: accountId, name: "bench" });
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
/** A stored file read to its end, a slice at a time (as the validation, create's pricing and a download read it). */
async function readBack(id: string, sliceBytes = FILE_READ_SLICE_BYTES) {
  let read = 0;
  for await (const slice of (await fileSlices(db, accountId, id, { sliceBytes }))!.slices) read += slice.length;
  return read;
}
/** Slice sizes compared, FILE_READ_SLICE_BYTES among them: a larger slice takes fewer queries and holds the loop longer. */
const SLICE_SIZES_BYTES = [FILE_READ_SLICE_BYTES, 1024 * 1024, 4 * 1024 * 1024];
/** Runs of each loop-wait reading: the machine is shared, so one reading is the median of these and their largest. */
const LOOP_WAIT_RUNS = 5;
/** LOOP_WAIT_RUNS readings of the event loop's longest wait while `work` runs: "median (max)". */
async function loopWaits(work: () => Promise<unknown>): Promise<string> {
  const gaps: number[] = [];
  for (let i = 0; i < LOOP_WAIT_RUNS; i++) gaps.push(await loopWaitDuring(work));
  gaps.sort((a, b) => a - b);
  return `${gaps[Math.floor(LOOP_WAIT_RUNS / 2)]!.toFixed(0)} ms (max ${gaps.at(-1)!.toFixed(0)} ms)`;
}
for (const sliceBytes of SLICE_SIZES_BYTES) {
  const slices = `${sliceBytes / 1024} KiB slices`;
  await time(`read it back in ${slices}`, () => readBack(big.id, sliceBytes));
  rows.push([`the event loop's longest wait while it is read back in ${slices}`, await loopWaits(() => readBack(big.id, sliceBytes))]);
}
const models = await time(`read the models of ${FILE_LINES_MAX} lines at upload (in slices)`, () => lineModels(inOnePiece(content)));
rows.push(["the event loop's longest wait while they are read", await loopWaits(() => lineModels(inOnePiece(content)))]);
const file = await time(`store ${FILE_LINES_MAX} chat lines (${(content.length / 1048576).toFixed(1)} MiB) with their models`, () =>
  storeFile(db, { accountId, purpose: "batch", filename: "lines", content, lineModels: toStoredLineModels(models) }),
);
if ("code" in file) throw new Error(file.message);
const checked = await time(`check ${FILE_LINES_MAX} chat lines (in slices of CHECK_TURN_MS)`, () =>
  checkLines({ catalog, env }, "/v1/chat/completions", inOnePiece(content), key),
);
if ("errors" in checked) throw new Error(JSON.stringify(checked.errors[0]));
rows.push([
  "the event loop's longest wait during a check",
  await loopWaits(() => checkLines({ catalog, env }, "/v1/chat/completions", inOnePiece(content), key)),
]);
/** What create does to price a batch of the file: its models read, then the catalog's. */
async function createPricing(of: FileRecord) {
  const models = await inputLineModels(db, of);
  if (!(models instanceof Map)) throw new Error(models.message);
  const byModel = await byCatalogModel(catalog, models);
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
const input: FileRecord = file;
/** What the worker's validation does with a batch's input file: read from the table, its lines checked. */
async function validation() {
  const stored = await fileSlices(db, accountId, input.id);
  const result = await checkLines({ catalog, env }, "/v1/chat/completions", stored!.slices, key);
  if ("errors" in result) throw new Error(JSON.stringify(result.errors[0]));
}
rows.push([
  "the event loop's longest wait during validation (the file read from the table, its lines checked)",
  await loopWaits(validation),
]);
/** A download as `GET /v1/files/{id}/content` answers it, its body read to its end as the server writes it. */
async function download() {
  const sent = await fileStream(db, accountId, input.id);
  const response = new Response(sent!.body, { headers: { "content-type": "application/octet-stream" } });
  let read = 0;
  for await (const chunk of response.body!) read += chunk.length;
  if (read !== content.length) throw new Error(`read ${read} of ${content.length} bytes`);
}
rows.push([
  `the event loop's longest wait during a download of the ${(content.length / 1048576).toFixed(1)} MiB file`,
  await loopWaits(download),
]);
await close();

reportTimes({
  title: "batch files",
  engine: process.env.DATABASE_URL ? "PostgreSQL" : `PGlite in memory (PGLITE_THREAD=${pgliteThread})`,
  command: `${process.env.DATABASE_URL ? "DATABASE_URL=… " : `PGLITE_THREAD=${pgliteThread} `}bun run bench/batches.ts`,
  note: `(loop waits: the median of ${LOOP_WAIT_RUNS} runs, and their largest)`,
  rows,
});
