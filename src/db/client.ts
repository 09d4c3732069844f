/**
 * One database handle over two engines: PostgreSQL through postgres.js (DATABASE_URL set) or
 * PGlite in a local data folder (the embedded default). Both run the same drizzle schema and the
 * same SQL migrations. A PGlite folder is held by one process at a time: two processes opening
 * one folder corrupt it silently, so an exclusive lock file refuses the second.
 */
import { closeSync, mkdirSync, openSync, readFileSync, unlinkSync, writeSync } from "node:fs";
import { join } from "node:path";
import type { SQL } from "drizzle-orm";
import type { PgDatabase, PgQueryResultHKT } from "drizzle-orm/pg-core";
import { PgliteOnWorker } from "./pglite-remote.ts";
import { withoutQueryParams, type Logger } from "../log.ts";
import * as schema from "./schema.ts";

export type Drizzle = PgDatabase<PgQueryResultHKT, typeof schema>;

export interface Db {
  orm: Drizzle;
  engine: "postgres" | "pglite";
  /** Runs raw SQL and returns its rows, whichever the engine. */
  rows<T = Record<string, unknown>>(query: SQL): Promise<T[]>;
  close(): Promise<void>;
  /**
   * Opens every connection of the pool and has each read the request path's tables once, so that
   * no request waits for a connection to be made or for a server process's first look at a table
   * (PostgreSQL; the embedded database has one connection, which the start-up rehearsal uses).
   */
  warmConnections?(): Promise<void>;
  /** The embedded database's worker thread, when PGlite runs in one (its death is drilled by tests; its heap is not the request thread's to collect). */
  worker?: Pick<PgliteOnWorker, "crashWorker" | "heapBytes">;
}

/** Connections per process: the ledger serialises on wallet rows, so more does not help. */
export const POSTGRES_POOL_MAX = 10;
/**
 * Longest wait for a connection to PostgreSQL, in seconds (the driver's default is 30). Queries
 * queue behind a connection being made, so while the database restarts or is unreachable every
 * request waiting on it (a key lookup, a lease) fails after this and is answered 503 rather than
 * outwaiting its client: two such waits of 10 s in one request exceeded the chaos suite's 20 s bound.
 */
const POSTGRES_CONNECT_TIMEOUT_S = 3;
/**
 * Longest pause, in seconds, before a pool connection that lost the database tries again. The
 * driver's own pause grows to 20 s after a few refused attempts (3^n / 100) and no timeout covers
 * it, so a query handed to that connection waited out a restart by up to 20 s more; this one
 * grows from 50 ms and stops at 1 s.
 */
const POSTGRES_RECONNECT_PAUSE_S_MAX = 1;
const POSTGRES_RECONNECT_PAUSE_S_FIRST = 0.05;

/** The pause before reconnect attempt `retries`, with jitter so the pool's connections do not retry in step. */
export function reconnectPauseS(retries: number): number {
  const pause = Math.min(POSTGRES_RECONNECT_PAUSE_S_FIRST * 2 ** retries, POSTGRES_RECONNECT_PAUSE_S_MAX);
  return pause * (0.5 + Math.random() / 2);
}

/** A transaction handle of either engine. */
export type Tx = Parameters<Parameters<Drizzle["transaction"]>[0]>[0];

/** How deep an error's `cause` chain is searched for the database's error. */
export const CAUSE_DEPTH_MAX = 5;

/** The SQLSTATE of a database error, whichever the engine (drizzle wraps both drivers' errors in `cause`). */
export function sqlStateOf(error: unknown): string | null {
  let e = error as { code?: unknown; cause?: unknown } | undefined;
  for (let depth = 0; e && depth < CAUSE_DEPTH_MAX; depth++, e = e.cause as typeof e) {
    if (typeof e.code === "string" && /^[0-9A-Z]{5}$/.test(e.code)) return e.code;
  }
  return null;
}

/**
 * The code of a database error: its SQLSTATE, else the first code in its `cause` chain (a
 * connection's `ECONNREFUSED`, the embedded worker's `PGLITE_WORKER_RESTARTING`); null without one.
 */
export function errorCodeOf(error: unknown): string | null {
  const state = sqlStateOf(error);
  if (state) return state;
  let e = error as { code?: unknown; cause?: unknown } | undefined;
  for (let depth = 0; e && depth < CAUSE_DEPTH_MAX; depth++, e = e.cause as typeof e) {
    if (typeof e.code === "string") return e.code;
  }
  return null;
}

/** Characters of a database error kept as a reason (a dead letter's, a log line's). */
export const SQL_REASON_CHARS_MAX = 500;

/**
 * The database's own words for an error, without drizzle's "Failed query … params: …" (which
 * would repeat the whole batch).
 */
export function sqlReason(error: unknown): string {
  let e = error as { code?: unknown; cause?: unknown; message?: unknown } | undefined;
  for (let depth = 0; e && depth < CAUSE_DEPTH_MAX; depth++, e = e.cause as typeof e) {
    if (typeof e.code === "string" && /^[0-9A-Z]{5}$/.test(e.code)) return `${e.code}: ${String(e.message)}`.slice(0, SQL_REASON_CHARS_MAX);
  }
  return withoutQueryParams(String((error as Error)?.message ?? error)).slice(0, SQL_REASON_CHARS_MAX);
}

/** postgres.js returns rows as an array, PGlite as `{ rows }`: one shape for both. */
export function normaliseRows<T>(result: unknown): T[] {
  if (Array.isArray(result)) return result as T[];
  return ((result as { rows?: T[] }).rows ?? []) as T[];
}

/** Runs raw SQL inside a transaction and returns its rows, whichever the engine. */
export async function txRows<T = Record<string, unknown>>(tx: Tx, query: SQL): Promise<T[]> {
  return normaliseRows<T>(await tx.execute(query));
}

export async function openPostgres(url: string): Promise<Db> {
  const { default: postgres } = await import("postgres");
  const { drizzle } = await import("drizzle-orm/postgres-js");
  const client = postgres(url, {
    max: POSTGRES_POOL_MAX,
    onnotice: () => {},
    connect_timeout: POSTGRES_CONNECT_TIMEOUT_S,
    backoff: reconnectPauseS,
  });
  const orm = drizzle(client, { schema }) as unknown as Drizzle;
  return {
    orm,
    engine: "postgres",
    rows: async (query) => normaliseRows(await orm.execute(query)),
    close: () => client.end({ timeout: 5 }),
    async warmConnections() {
      // Settled one by one: a connection that could not be made must not keep the others reserved.
      const asked = await Promise.allSettled(Array.from({ length: POSTGRES_POOL_MAX }, () => client.reserve()));
      const reserved = asked.flatMap((a) => (a.status === "fulfilled" ? [a.value] : []));
      try {
        await Promise.all(reserved.map((connection) => connection.unsafe(HOT_TABLES_READ)));
      } finally {
        for (const connection of reserved) connection.release();
      }
      const refused = asked.find((a) => a.status === "rejected");
      if (refused) throw refused.reason;
    },
  };
}

/** A statement that reads nothing but plans over every table a paid request touches (their indexes included). */
const HOT_TABLES_READ =
  "SELECT 1 FROM api_keys k JOIN accounts a ON a.id = k.account_id JOIN wallets w ON w.account_id = a.id " +
  "JOIN holds h ON h.account_id = a.id JOIN usage_records u ON u.hold_id = h.id WHERE k.hash = '' LIMIT 0";

export class DataFolderLockedError extends Error {}

/** Takes `<folder>/lock` exclusively; a lock left by a dead process is taken over. */
export function lockDataFolder(folder: string): () => void {
  mkdirSync(folder, { recursive: true });
  const path = join(folder, "lock");
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(path, "wx");
      writeSync(fd, String(process.pid));
      closeSync(fd);
      return () => {
        try {
          if (readFileSync(path, "utf8") === String(process.pid)) unlinkSync(path);
        } catch {}
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      const holder = Number(readFileSync(path, "utf8"));
      if (Number.isInteger(holder) && holder > 0 && isAlive(holder)) {
        throw new DataFolderLockedError(
          `the data folder ${folder} is in use by process ${holder}: one process at a time may open it ` +
            `(stop that process, set DARVAZE_DATA to another folder, or set DATABASE_URL to share PostgreSQL)`,
        );
      }
      unlinkSync(path);
    }
  }
  throw new DataFolderLockedError(`could not lock the data folder ${folder}`);
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Where PGlite runs: on the request thread, or in a worker of its own (pglite-remote.ts). */
export type PgliteThread = "inline" | "worker";

/** How PGlite runs: `thread`, and the worker's nice value (thread-priority.ts). */
export interface PgliteRunning {
  thread: PgliteThread;
  workerNice?: number;
  /** Where a worker's death and restart are told. */
  log?: Logger;
}

/**
 * PGlite in `<folder>/pgdata`, or in memory when folder is null (tests). PGlite runs on the thread
 * that calls it. On the request thread a usage batch's commit stops every request in flight for
 * its whole length (143–216 ms, bench/db-stall.ts). In a worker it does not, but on a shared core
 * the request thread would wait out the worker's time slices (one connection's p99 6 ms): so the
 * worker runs at a lower priority, `workerNice` (PGLITE_WORKER_NICE).
 */
export async function openPglite(folder: string | null, running: PgliteRunning = { thread: "inline" }): Promise<Db> {
  const unlock = folder ? lockDataFolder(folder) : () => {};
  const dataDir = folder ? join(folder, "pgdata") : undefined;
  let client: { waitReady: Promise<unknown>; close(): Promise<void> } | null = null;
  let worker: PgliteOnWorker | undefined;
  try {
    const { drizzle } = await import("drizzle-orm/pglite");
    if (running.thread === "worker") client = worker = new PgliteOnWorker(dataDir ?? null, running.workerNice ?? null, running.log);
    else {
      const { PGlite } = await import("@electric-sql/pglite");
      client = new PGlite(dataDir);
    }
    await client.waitReady;
    // drizzle calls only query, exec and transaction of its client, which the worker's proxy provides.
    const orm = drizzle({ client: client as never, schema }) as unknown as Drizzle;
    const opened = client;
    return {
      orm,
      engine: "pglite",
      worker,
      rows: async (query) => normaliseRows(await orm.execute(query)),
      close: async () => {
        try {
          await opened.close();
        } finally {
          unlock();
        }
      },
    };
  } catch (error) {
    await client?.close().catch(() => {});
    unlock();
    throw error;
  }
}

export function openDb(options: { databaseUrl?: string; dataFolder: string | null; pglite?: PgliteRunning }): Promise<Db> {
  return options.databaseUrl ? openPostgres(options.databaseUrl) : openPglite(options.dataFolder, options.pglite);
}
