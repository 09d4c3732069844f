import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sql } from "drizzle-orm";
import { SETUP_MS_MAX } from "../../test/helpers.ts";
import { until } from "../../test/until.ts";
import { errorCodeOf, openPglite, sqlStateOf, txRows } from "./client.ts";
import { PGLITE_WORKER_RESTART_PAUSE_MS, PGLITE_WORKER_RESTARTS_MAX } from "./pglite-remote.ts";

const folder = mkdtempSync(join(tmpdir(), "darvaze-pglite-"));
afterAll(() => rmSync(folder, { recursive: true, force: true }));

/** Long enough that a database on the request thread would hold back every timer for all of it. */
const SLEEP_MS = 300;

test(
  "the embedded database works in its worker: the request thread keeps running while a query does",
  async () => {
    const db = await openPglite(null, { thread: "worker" });
    try {
      let ticks = 0;
      const timer = setInterval(() => ticks++, 1);
      await db.rows(sql`SELECT pg_sleep(${SLEEP_MS / 1000})`);
      clearInterval(timer);
      // On the request thread the sleep would let no timer run until it ended.
      expect(ticks).toBeGreaterThan(10);
    } finally {
      await db.close();
    }
  },
  SETUP_MS_MAX,
);

/** Each thread of this process and its nice value, from /proc (field 19 of stat). */
function threadNices(): Map<number, number> {
  const nices = new Map<number, number>();
  for (const tid of readdirSync("/proc/self/task")) {
    const stat = readFileSync(`/proc/self/task/${tid}/stat`, "utf8");
    nices.set(Number(tid), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[16]));
  }
  return nices;
}

test.skipIf(process.platform !== "linux")(
  "the worker runs below the request thread: its own nice value, the request thread's unchanged",
  async () => {
    const before = threadNices();
    const db = await openPglite(null, { thread: "worker", workerNice: 7 });
    try {
      const after = threadNices();
      // The worker, and any thread it starts once lowered (the engine's helpers inherit its nice value).
      const lowered = [...after].filter(([tid, nice]) => nice === 7 && !before.has(tid));
      expect(lowered.length).toBeGreaterThanOrEqual(1);
      expect(after.get(process.pid)).toBe(before.get(process.pid)!); // the request thread: its id is the process's
      // No thread that was already running (the request thread among them) changed.
      for (const [tid, nice] of before) if (after.has(tid)) expect(after.get(tid)).toBe(nice);
    } finally {
      await db.close();
    }
  },
  SETUP_MS_MAX,
);

test(
  "transactions commit, roll back on a throw, keep others out while open; errors keep their SQLSTATE",
  async () => {
    const db = await openPglite(null, { thread: "worker" });
    try {
      await db.rows(sql`CREATE TABLE t (n int PRIMARY KEY, big bigint, at timestamptz)`);
      await db.orm.transaction(async (tx) => {
        await tx.execute(sql`INSERT INTO t VALUES (1, 9007199254740993, '2026-01-02T03:04:05Z')`);
      });
      const failed = await db.orm
        .transaction(async (tx) => {
          await tx.execute(sql`INSERT INTO t VALUES (2, 0, now())`);
          throw new Error("changed my mind");
        })
        .catch((error: Error) => error.message);
      expect(failed).toBe("changed my mind");

      // A query outside waits for the open transaction instead of joining it.
      const order: string[] = [];
      const inside = db.orm.transaction(async (tx) => {
        await tx.execute(sql`INSERT INTO t VALUES (3, 0, now())`);
        await Bun.sleep(50); // holds the transaction open while the query outside is sent: the case under test
        order.push("inside");
        throw new Error("roll back 3");
      });
      const outside = db.rows<{ n: number }>(sql`SELECT n FROM t ORDER BY n`).then((rows) => {
        order.push("outside");
        return rows.map((r) => r.n);
      });
      await inside.catch(() => {});
      expect(await outside).toEqual([1]);
      expect(order).toEqual(["inside", "outside"]);

      const duplicate = await db.rows(sql`INSERT INTO t VALUES (1, 0, now())`).catch((error) => error);
      expect(sqlStateOf(duplicate)).toBe("23505");
      const [row] = await db.orm.transaction((tx) => txRows<{ big: unknown; at: unknown }>(tx, sql`SELECT big::text AS big, at FROM t`));
      expect(row).toEqual({ big: "9007199254740993", at: "2026-01-02 03:04:05+00" });
    } finally {
      await db.close();
    }
  },
  SETUP_MS_MAX,
);

test(
  "a data folder keeps its rows across a close and a reopen, and is held by one opener at a time",
  async () => {
    const first = await openPglite(folder, { thread: "worker" });
    await first.rows(sql`CREATE TABLE kept (n int)`);
    await first.rows(sql`INSERT INTO kept VALUES (7)`);
    await expect(openPglite(folder, { thread: "worker" })).rejects.toThrow("is in use");
    await first.close();
    const again = await openPglite(folder, { thread: "worker" });
    try {
      expect(await again.rows(sql`SELECT n FROM kept`)).toEqual([{ n: 7 }]);
    } finally {
      await again.close();
    }
  },
  SETUP_MS_MAX,
);

/** The code of the error a call failed with (the worker's down codes, or a SQLSTATE). */
async function failureCode(call: Promise<unknown>): Promise<string | null> {
  try {
    await call;
    return null;
  } catch (error) {
    return errorCodeOf(error);
  }
}

test(
  "a dead worker is started again on its folder: calls meanwhile are refused, none hangs, the rows are kept; deaths in a row are bounded",
  async () => {
    const restarted = mkdtempSync(join(tmpdir(), "darvaze-pglite-restart-"));
    const db = await openPglite(restarted, { thread: "worker" });
    try {
      await db.rows(sql`CREATE TABLE kept (n int)`);
      await db.rows(sql`INSERT INTO kept VALUES (7)`);
      const inFlight = db.rows(sql`SELECT pg_sleep(5)`);
      db.worker!.crashWorker();
      // The query in flight is refused at once, not left waiting for a reply that cannot come.
      expect(await failureCode(inFlight)).toBe("PGLITE_WORKER_RESTARTING");
      expect(await failureCode(db.rows(sql`SELECT 1`))).toBe("PGLITE_WORKER_RESTARTING");
      await until(async () => (await failureCode(db.rows(sql`SELECT 1`))) === null, SETUP_MS_MAX / 2);
      expect(await db.rows(sql`SELECT n FROM kept`)).toEqual([{ n: 7 }]);

      // Each death in a row is restarted until PGLITE_WORKER_RESTARTS_MAX; the next is given up.
      for (let death = 2; death <= PGLITE_WORKER_RESTARTS_MAX; death++) {
        db.worker!.crashWorker();
        await until(async () => (await failureCode(db.rows(sql`SELECT 1`))) === null, SETUP_MS_MAX / 2);
      }
      db.worker!.crashWorker();
      await until(async () => (await failureCode(db.rows(sql`SELECT 1`))) === "PGLITE_WORKER_DEAD", 5_000);
      // A negative check: no restart within longer than any restart's pause.
      await Bun.sleep(PGLITE_WORKER_RESTART_PAUSE_MS * 2 ** PGLITE_WORKER_RESTARTS_MAX);
      expect(await failureCode(db.rows(sql`SELECT 1`))).toBe("PGLITE_WORKER_DEAD");
    } finally {
      await db.close().catch(() => {});
      rmSync(restarted, { recursive: true, force: true });
    }
  },
  SETUP_MS_MAX * 2,
);

test(
  "the worker reports its own heap (which the request thread's memory guard leaves to it)",
  async () => {
    const db = await openPglite(null, { thread: "worker" });
    try {
      // Its report arrives every WORKER_MEMORY_REPORT_MS (PGlite's engine lives in that heap).
      // The engine's heap counts memory it has reserved, not only what is resident: it can exceed
      // the process's resident set, so only its being reported, and finite, is checked here.
      await until(() => (db.worker?.heapBytes ?? 0) > 0, { what: "the worker's heap report", msMax: 30_000 });
      expect(Number.isFinite(db.worker!.heapBytes)).toBe(true);
    } finally {
      await db.close();
    }
  },
  SETUP_MS_MAX,
);
