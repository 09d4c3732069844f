/**
 * The embedded default (PGlite in its worker thread, in the data folder) when that worker dies:
 * the node neither dies nor hangs. Requests that need the database get 503 at once, /ready names
 * the cause, the worker is started again on the same folder, and afterwards every request the node
 * answered 200 has its usage record (the writer kept and retried what the dead worker never took).
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sql } from "drizzle-orm";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { until } from "./until.ts";

/** A request the dead worker cannot serve is answered well within this (a hang would outlast it). */
const REPLY_MS_MAX = 5_000;
/** The worker's restart opens the folder again (PGlite's start, a few seconds on a busy machine). */
const RESTART_MS_MAX = 30_000;

let folder: string;
let t: TestGateway;

beforeAll(async () => {
  folder = mkdtempSync(join(tmpdir(), "darvaze-pglite-node-"));
  t = await startTestGateway({ PGLITE_THREAD: "worker" }, { dataFolder: folder });
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  rmSync(folder, { recursive: true, force: true });
}, SETUP_MS_MAX);

async function chat(key: string): Promise<number> {
  const response = await fetch(`${t.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }], max_tokens: 2 }),
    signal: AbortSignal.timeout(REPLY_MS_MAX),
  });
  await response.arrayBuffer();
  return response.status;
}

async function readiness(): Promise<{ status: number; reasons: string[] }> {
  const response = await fetch(`${t.url}/ready`, { signal: AbortSignal.timeout(REPLY_MS_MAX) });
  const body = (await response.json()) as { reasons?: string[] };
  return { status: response.status, reasons: body.reasons ?? [] };
}

test(
  "the database's worker killed: 503 and /ready's reason meanwhile, never a hang; restarted on its folder, and every answered request billed",
  async () => {
    const { key } = await t.fundedKey(100);
    const uncached = await t.fundedKey(100);
    expect(await chat(key)).toBe(200);
    const statuses: number[] = [200];

    t.gw.deps.db.worker!.crashWorker();
    // A key never looked up needs the database: refused at once, not left waiting.
    const started = performance.now();
    expect(await chat(uncached.key)).toBe(503);
    expect(performance.now() - started).toBeLessThan(REPLY_MS_MAX);
    await until(async () => {
      const ready = await readiness();
      return ready.status === 503 && ready.reasons.includes("database: query failed (PGLITE_WORKER_RESTARTING)");
    }, RESTART_MS_MAX);
    expect((await fetch(`${t.url}/health`)).status).toBe(200);

    // Restarted: ready again, and both keys served.
    await until(async () => {
      const status = await chat(key);
      statuses.push(status);
      return (await readiness()).status === 200 && status === 200;
    }, RESTART_MS_MAX);
    expect(await chat(uncached.key)).toBe(200);
    statuses.push(200);
    expect(statuses.filter((s) => s !== 200 && s !== 503)).toEqual([]);

    const served = statuses.filter((s) => s === 200).length;
    await t.gw.deps.writer.posted();
    const [row] = await t.gw.deps.db.rows<{ n: unknown }>(sql`SELECT count(*) AS n FROM usage_records`);
    expect(Number(row!.n)).toBe(served);
  },
  RESTART_MS_MAX * 2,
);
