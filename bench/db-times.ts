/**
 * What the benchmarks that time the product's database code in this process share
 * (bench/batches.ts, bench/batch-claim.ts): a fresh database (PGlite in memory, or PostgreSQL when
 * DATABASE_URL is set) with one account to work on, and the table of times they print and append
 * to bench/RESULTS.md under the engine's name.
 */
import { appendFileSync } from "node:fs";
import { join } from "node:path";
import { accounts } from "../src/db/schema.ts";
import { newId } from "../src/ids.ts";
import { openTestDb } from "../test/helpers.ts";

/**
 * A fresh, migrated database and the id of its one account, "bench".
 * @example const { db, close, accountId } = await openBenchAccount();
 */
export async function openBenchAccount(): Promise<Awaited<ReturnType<typeof openTestDb>> & { accountId: string }> {
  const { db, close } = await openTestDb();
  const accountId = newId("acc");
  await db.orm.insert(accounts).values({ id: accountId, name: "bench" });
  return { db, close, accountId };
}

/**
 * Prints `rows` (what, time) as a dated table headed `title on <engine>`, under the command and
 * its note, and appends it to bench/RESULTS.md.
 * @example reportTimes({ title: "batch files", command: "bun run bench/batches.ts", rows });
 */
export function reportTimes(report: { title: string; command: string; note?: string; engine?: string; rows: [string, string][] }): void {
  const engine = report.engine ?? (process.env.DATABASE_URL ? "PostgreSQL" : "PGlite in memory");
  const table = [
    `\n## ${new Date().toISOString().slice(0, 16).replace("T", " ")} UTC · ${report.title} on ${engine}\n`,
    `${[`\`${report.command}\``, report.note].filter(Boolean).join("\n")}\n`,
    "| What | Time |",
    "|---|---|",
    ...report.rows.map(([what, time]) => `| ${what} | ${time} |`),
    "",
  ].join("\n");
  appendFileSync(join(import.meta.dir, "RESULTS.md"), table);
  console.log(table);
}
