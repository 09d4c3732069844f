/**
 * The worker that owns the embedded database: one PGlite, driven by messages from the request
 * thread (pglite-wire.ts). A transaction stays open across messages: its callback waits for the
 * "end" message, and PGlite's own lock keeps every other query out until then.
 */
import { PGlite, type Transaction } from "@electric-sql/pglite";
import { heapSize } from "bun:jsc";
import {
  errorToWire,
  WORKER_GC_GROWTH_BYTES,
  WORKER_MEMORY_REPORT_MS,
  type QueryOptionsOnWire,
  type WorkerMemory,
  type WorkerReply,
  type WorkerRequest,
} from "./pglite-wire.ts";
import { setThreadNice } from "./thread-priority.ts";

declare const self: Worker;

let pg: PGlite | null = null;
const open = new Map<number, { tx: Transaction; end: (commit: boolean) => void }>();

function reply(message: WorkerReply | WorkerMemory): void {
  self.postMessage(message);
}

/**
 * Every WORKER_MEMORY_REPORT_MS: a light collection of this thread's heap when it grew by
 * WORKER_GC_GROWTH_BYTES since the last (it pauses this thread only), then the heap's size to the
 * request thread, whose memory guard reads the process's resident set less this heap.
 */
let collectedAtBytes = heapSize();
setInterval(() => {
  if (heapSize() - collectedAtBytes >= WORKER_GC_GROWTH_BYTES) {
    Bun.gc(false);
    collectedAtBytes = heapSize();
  } else if (heapSize() < collectedAtBytes) collectedAtBytes = heapSize();
  reply({ memory: { heapBytes: heapSize() } });
}, WORKER_MEMORY_REPORT_MS);

function database(): PGlite {
  if (!pg) throw new Error("the embedded database is not open");
  return pg;
}

function queryOptions(options: QueryOptionsOnWire) {
  const keep = (value: string) => value;
  return { rowMode: options.rowMode, parsers: Object.fromEntries(options.rawTypes.map((type) => [type, keep])) };
}

/** The transaction a message names, or the database itself outside one. */
function target(tx: number | null): PGlite | Transaction {
  if (tx === null) return database();
  const entry = open.get(tx);
  if (!entry) throw new Error(`transaction ${tx} is not open`);
  return entry.tx;
}

function begin(id: number): void {
  let begun = false;
  database()
    .transaction(async (tx) => {
      const commit = await new Promise<boolean>((end) => {
        open.set(id, { tx, end });
        begun = true;
        reply({ id, ok: true, value: id });
      });
      open.delete(id);
      if (!commit) await tx.rollback();
    })
    .then(
      () => pendingEnds.get(id)?.({ ok: true }),
      (error) => (begun ? pendingEnds.get(id)?.({ ok: false, error }) : reply({ id, ok: false, error: errorToWire(error) })),
    );
}

/** The "end" request waiting for each transaction's commit to finish. */
const pendingEnds = new Map<number, (outcome: { ok: true } | { ok: false; error: unknown }) => void>();

function end(id: number, tx: number, commit: boolean): void {
  const entry = open.get(tx);
  if (!entry) {
    reply({ id, ok: false, error: errorToWire(new Error(`transaction ${tx} is not open`)) });
    return;
  }
  pendingEnds.set(tx, (outcome) => {
    pendingEnds.delete(tx);
    reply(outcome.ok ? { id, ok: true, value: null } : { id, ok: false, error: errorToWire(outcome.error) });
  });
  entry.end(commit);
}

async function handle(request: WorkerRequest): Promise<unknown> {
  switch (request.op) {
    case "open": {
      if (request.nice !== null) setThreadNice(request.nice);
      pg = request.dataDir ? new PGlite(request.dataDir) : new PGlite();
      await pg.waitReady;
      return null;
    }
    case "query": {
      const result = await target(request.tx).query(request.sql, request.params, queryOptions(request.options));
      return { rows: result.rows, fields: result.fields, affectedRows: result.affectedRows };
    }
    case "exec":
      return (await target(request.tx).exec(request.sql)).map((r) => ({ rows: r.rows, fields: r.fields, affectedRows: r.affectedRows }));
    case "close":
      await pg?.close();
      pg = null;
      return null;
    default:
      throw new Error(`unknown request ${(request as { op: string }).op}`);
  }
}

self.onmessage = (event: MessageEvent<WorkerRequest>) => {
  const request = event.data;
  if (request.op === "begin") return begin(request.id);
  if (request.op === "end") return end(request.id, request.tx, request.commit);
  handle(request).then(
    (value) => reply({ id: request.id, ok: true, value }),
    (error) => reply({ id: request.id, ok: false, error: errorToWire(error) }),
  );
};
