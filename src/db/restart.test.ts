/**
 * A PostgreSQL restart under load, on a cluster of the test's own: the pool must come back whole
 * and promptly. Two faults of the driver made a restart cost far more than its second of downtime:
 * a connection closed with a write pending never sent its next startup message (every connect
 * then timed out, forever), and the pause before reconnecting grew to 20 s with no timeout over it.
 */
import { expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import { OwnPostgres } from "../../test/chaos/services.ts";
import { describeWith } from "../../test/services.ts";
import { openPostgres, reconnectPauseS } from "./client.ts";

const LOOPS = 24;
const DOWN_MS = 1_000;
/** Load after the restart: four connect timeouts (3 s) of a poisoned connection would fail in it. */
const AFTER_MS = 12_000;
/** A query sent while the database was away settles within a connect timeout and a pause, plus slack. */
const OUTAGE_QUERY_MS_MAX = 6_000;
/** The database is answering again this long after its start returned. */
const RECOVERY_MS = 1_000;
const QUERY_MS_MAX_AFTER = 2_000;

interface Sample {
  startedMs: number;
  tookMs: number;
  error: string | null;
}

describeWith(["postgres"], "a PostgreSQL restart under load", (it) => {
  it("queries sent while it was away settle within the connect timeout; once it is back, every query succeeds promptly", async () => {
    const pg = await OwnPostgres.start();
    const db = await openPostgres(pg.url);
    const samples: Sample[] = [];
    let stop = false;
    const loop = async () => {
      while (!stop) {
        const startedMs = performance.now();
        let error: string | null = null;
        try {
          await db.rows(sql`SELECT pg_sleep(0.005)`);
        } catch (e) {
          error = (e as { code?: string }).code ?? (e as Error).message;
        }
        samples.push({ startedMs, tookMs: performance.now() - startedMs, error });
        await Bun.sleep(5 + Math.random() * 20);
      }
    };
    try {
      await db.rows(sql`SELECT 1`);
      const loops = Array.from({ length: LOOPS }, loop);
      await Bun.sleep(1_000);
      const downMs = performance.now();
      await pg.kill("SIGINT");
      await Bun.sleep(DOWN_MS);
      await pg.start();
      const upMs = performance.now();
      await Bun.sleep(AFTER_MS);
      stop = true;
      await Promise.all(loops);

      const outage = samples.filter((s) => s.startedMs >= downMs && s.startedMs < upMs);
      expect(outage.length).toBeGreaterThan(0);
      expect(Math.max(...outage.map((s) => s.tookMs))).toBeLessThan(OUTAGE_QUERY_MS_MAX);
      const after = samples.filter((s) => s.startedMs >= upMs + RECOVERY_MS);
      expect(after.length).toBeGreaterThan(LOOPS * 10);
      expect(after.filter((s) => s.error !== null).map((s) => s.error)).toEqual([]);
      expect(Math.max(...after.map((s) => s.tookMs))).toBeLessThan(QUERY_MS_MAX_AFTER);
    } finally {
      stop = true;
      await db.close();
      await pg.stop();
    }
  }, 60_000);
});

test("the pause before reconnecting to PostgreSQL grows from 50 ms and never passes 1 s, with jitter below it", () => {
  for (let retries = 0; retries < 40; retries++) {
    const pause = reconnectPauseS(retries);
    expect(pause).toBeLessThanOrEqual(Math.min(0.05 * 2 ** retries, 1));
    expect(pause).toBeGreaterThanOrEqual(Math.min(0.05 * 2 ** retries, 1) / 2);
  }
});
