/**
 * `bun run bench/batches.ts`: what a batch file of the largest size costs the database and the
 * event loop: storing FILE_BYTES_MAX in the `files` table, reading it back whole, and checking
 * FILE_LINES_MAX chat lines (lines.ts `checkLines`), and reading their models at create to price the
 * batch (pricing.ts `linesByModel`), on PGlite in memory, or on PostgreSQL when
 * DATABASE_URL is set. Appends a table to bench/RESULTS.md.
 */
import { loadCatalog } from "../src/catalog/catalog.ts";
import { loadConfig } from "../src/config.ts";
import { newId } from "../src/ids.ts";
import type { KeyRecord } from "../src/keys/store.ts";
import { checkLines } from "../src/batches/lines.ts";
import { linesByModel } from "../src/batches/pricing.ts";
import { FILE_BYTES_MAX, FILE_LINES_MAX, fileContent, storeFile } from "../src/files/files.ts";
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
const text = `${lines.join("\n")}\n`;
const content = new TextEncoder().encode(text);
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
const file = await time(`store ${FILE_LINES_MAX} chat lines (${(content.length / 1048576).toFixed(1)} MiB)`, () =>
  storeFile(db, { accountId, purpose: "batch", filename: "lines", content }),
);
if ("code" in file) throw new Error(file.message);
const checked = await time(`check ${FILE_LINES_MAX} chat lines (in slices of CHECK_TURN_MS)`, () =>
  checkLines({ catalog, env }, "/v1/chat/completions", text, key),
);
if ("errors" in checked) throw new Error(JSON.stringify(checked.errors[0]));
/** The event loop's longest wait while `work` ran, as a row shows it. */
const loopWait = async (work: () => Promise<unknown>) => `${(await loopWaitDuring(work)).toFixed(0)} ms`;
rows.push([
  "the event loop's longest wait during a check",
  await loopWait(() => checkLines({ catalog, env }, "/v1/chat/completions", text, key)),
]);
const byModel = await time(`read the models of ${FILE_LINES_MAX} lines at create, to price the batch (in slices)`, () =>
  linesByModel(catalog, text),
);
if (byModel.get("gpt-4o-mini")?.length !== FILE_LINES_MAX) throw new Error("every line names gpt-4o-mini");
rows.push(["the event loop's longest wait while they are read", await loopWait(() => linesByModel(catalog, text))]);
await close();

reportTimes({ title: "batch files", command: "bun run bench/batches.ts", rows });
