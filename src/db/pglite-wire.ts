/**
 * The messages between the request thread and the PGlite worker (pglite-worker.ts). PGlite runs
 * its WASM Postgres on the thread that calls it; in the worker, a usage batch or a hold no longer
 * stops every request for the time of its commit. Values cross by structured clone (bigint, Date
 * and bytes keep their types); functions cannot, so result parsers cross as the type ids whose
 * text is kept raw (the only parsers drizzle's PGlite driver sets).
 */

export interface QueryOptionsOnWire {
  rowMode?: "array" | "object";
  /** Postgres type ids returned as their text, unparsed. */
  rawTypes: number[];
}

export type WorkerRequest =
  /** `nice`: the worker thread's scheduling priority (thread-priority.ts), null to leave it. */
  | { id: number; op: "open"; dataDir: string | null; nice: number | null }
  | { id: number; op: "query"; sql: string; params: unknown[]; options: QueryOptionsOnWire; tx: number | null }
  | { id: number; op: "exec"; sql: string; tx: number | null }
  /** Replies once BEGIN ran; the transaction's id is the request's id. */
  | { id: number; op: "begin" }
  /** Commits (or rolls back) transaction `tx`; replies once it is over. */
  | { id: number; op: "end"; tx: number; commit: boolean }
  | { id: number; op: "close" };

/** An error as it crosses: its message and the database's fields (code is the SQLSTATE). */
export interface ErrorOnWire {
  message: string;
  fields: Record<string, string | number | undefined>;
}

export type WorkerReply = { id: number; ok: true; value: unknown } | { id: number; ok: false; error: ErrorOnWire };

/** What the worker says of itself unasked, every WORKER_MEMORY_REPORT_MS: its JavaScript heap. */
export interface WorkerMemory {
  memory: { heapBytes: number };
}

/** How often the worker reports its heap and collects its own garbage when it grew. */
export const WORKER_MEMORY_REPORT_MS = 1_000;
/**
 * Growth of the worker's heap since its last collection past which it runs a light one, in its
 * own thread: PGlite's JavaScript side allocates a little per query, and the request thread's
 * collections cannot free another thread's heap.
 */
export const WORKER_GC_GROWTH_BYTES = 64 * 2 ** 20;

/**
 * The Postgres fields an error keeps across (code is the SQLSTATE). Not `line`, `file`, `name`:
 * on a JavaScript error those name its own source position and kind, and the runtime reads them.
 */
const ERROR_FIELDS = ["code", "severity", "detail", "hint", "position", "schema", "table", "constraint", "dataType", "where"] as const;

export function errorToWire(error: unknown): ErrorOnWire {
  const fields: ErrorOnWire["fields"] = {};
  const source = (error ?? {}) as Record<string, unknown>;
  for (const key of ERROR_FIELDS) {
    const value = source[key];
    if (typeof value === "string" || typeof value === "number") fields[key] = value;
  }
  return { message: error instanceof Error ? error.message : String(error), fields };
}

/** The database's error as the request thread sees it: sqlStateOf and isPoison read its code. */
export class DatabaseError extends Error {
  override name = "DatabaseError";
  constructor(wire: ErrorOnWire) {
    super(wire.message);
    Object.assign(this, wire.fields);
  }
}

export function errorFromWire(wire: ErrorOnWire): Error {
  return new DatabaseError(wire);
}
