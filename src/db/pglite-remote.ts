/**
 * The request thread's side of the PGlite worker: the part of PGlite's interface drizzle's PGlite
 * driver calls (query, exec, transaction), each call a message to the worker. Nothing here waits
 * synchronously: a commit costs the request thread one message out and one back.
 *
 * A worker that dies (a crash in the engine, an exit) takes nobody with it: its calls in flight
 * are refused, and so is every call until a new worker has opened the same data folder (the
 * engine recovers it as after a power cut): requests that need the database get 503 meanwhile,
 * and /ready names the cause by the error's code, PGLITE_WORKER_RESTARTING. After
 * PGLITE_WORKER_RESTARTS_MAX deaths in a row (a worker that served PGLITE_WORKER_STABLE_MS
 * since its start ends the row) the database is given up, PGLITE_WORKER_DEAD, until the node is
 * restarted. An in-memory database is never restarted: a new worker would start empty.
 */
import type { Logger } from "../log.ts";
import { errorFromWire, type QueryOptionsOnWire, type WorkerMemory, type WorkerReply, type WorkerRequest } from "./pglite-wire.ts";

/** Deaths in a row after which the worker is not started again. */
export const PGLITE_WORKER_RESTARTS_MAX = 5;
/** A worker that has served this long since its start ends a row of deaths. */
export const PGLITE_WORKER_STABLE_MS = 60_000;
/** The pause before the first restart; it doubles with each death in a row. */
export const PGLITE_WORKER_RESTART_PAUSE_MS = 100;
/** Characters of a dead worker's error kept in the log line. */
const WORKER_ERROR_CHARS_MAX = 300;

/** The code of the error every call gets while the worker is down, /ready's reason. */
export type WorkerDownCode = "PGLITE_WORKER_RESTARTING" | "PGLITE_WORKER_DEAD";

class WorkerDownError extends Error {
  constructor(
    readonly code: WorkerDownCode,
    message: string,
  ) {
    super(message);
  }
}

/** Requests without an id: the id is the client's to give. */
type Request = WorkerRequest extends infer R ? (R extends { id: number } ? Omit<R, "id"> : never) : never;

interface QueryOptions {
  rowMode?: "array" | "object";
  parsers?: Record<number, unknown>;
}

interface Results {
  rows: unknown[];
  fields: { name: string; dataTypeID: number }[];
  affectedRows?: number;
}

/** What a transaction's callback gets: queries inside it, in PGlite's shape. */
export interface RemoteTransaction {
  query(sql: string, params?: unknown[], options?: QueryOptions): Promise<Results>;
  exec(sql: string): Promise<Results[]>;
  rollback(): Promise<void>;
  readonly closed: boolean;
}

function optionsOnWire(options: QueryOptions | undefined): QueryOptionsOnWire {
  // drizzle's parsers keep each listed type's text as it is; the worker rebuilds them from the ids.
  return { rowMode: options?.rowMode, rawTypes: Object.keys(options?.parsers ?? {}).map(Number) };
}

export class PgliteOnWorker {
  #worker: Worker | null = null;
  /** The database was opened once: only then is a dead worker started again. */
  #served = false;
  readonly #pending = new Map<number, { resolve: (value: unknown) => void; reject: (error: Error) => void }>();
  #nextId = 1;
  /** Set while no worker serves: every call is refused with it. */
  #failure: Error | null = null;
  #closed = false;
  /** Deaths in a row, and when the current worker started. */
  #deaths = 0;
  #startedAtMs = 0;
  readonly waitReady: Promise<void>;

  /** `nice`: the worker thread's nice value (0–19), null to leave it as the process's. */
  constructor(
    private readonly dataDir: string | null,
    private readonly nice: number | null = null,
    private readonly log?: Logger,
  ) {
    // The first open's failure is the caller's (a bad folder fails the start); only a worker that served is restarted.
    this.waitReady = this.#start();
  }

  /** A new worker on the data folder; resolves once it has opened the database. */
  #start(): Promise<void> {
    const worker = new Worker(new URL("./pglite-worker.ts", import.meta.url).href);
    this.#worker = worker;
    this.#startedAtMs = performance.now();
    worker.onmessage = (event: MessageEvent<WorkerReply | WorkerMemory>) => {
      if ("memory" in event.data) this.heapBytes = event.data.memory.heapBytes;
      else this.#receive(event.data);
    };
    worker.onerror = (event) => this.#died(worker, `failed: ${event.message.slice(0, WORKER_ERROR_CHARS_MAX)}`);
    // Every way a worker ends (an uncaught error, an exit, a termination) ends in "close".
    worker.addEventListener("close", (event) => this.#died(worker, `exited (code ${(event as CloseEvent).code})`));
    return this.#send({ op: "open", dataDir: this.dataDir, nice: this.nice }).then(
      () => {
        this.#served = true;
        if (!this.#closed) this.#failure = null; // a close while it opened stays a close
      },
      (error: unknown) => {
        worker.terminate(); // a worker that cannot open the database is as good as dead
        throw error;
      },
    );
  }

  /** The worker is gone: its calls are refused, and a new one is started unless the row of deaths is too long. */
  #died(worker: Worker, how: string): void {
    if (worker !== this.#worker || this.#closed) return;
    worker.onmessage = null;
    worker.terminate();
    if (performance.now() - this.#startedAtMs >= PGLITE_WORKER_STABLE_MS) this.#deaths = 0;
    this.#deaths++;
    const giveUp = !this.#served || this.dataDir === null || this.#deaths > PGLITE_WORKER_RESTARTS_MAX;
    const code: WorkerDownCode = giveUp ? "PGLITE_WORKER_DEAD" : "PGLITE_WORKER_RESTARTING";
    this.#fail(new WorkerDownError(code, `the embedded database's worker ${how}; ${giveUp ? "given up: restart the node" : "restarting"}`));
    this.log?.("error", "pglite_worker_died", { how, deaths: this.#deaths, restarting: !giveUp });
    this.#worker = null; // no call reaches the dead one; #start sets the next
    if (giveUp) return;
    const pauseMs = PGLITE_WORKER_RESTART_PAUSE_MS * 2 ** (this.#deaths - 1);
    setTimeout(() => {
      if (this.#closed) return;
      this.#start().then(
        () => this.log?.("info", "pglite_worker_restarted", { deaths: this.#deaths }),
        () => {}, // a new worker that failed to open has died too (#died, from its close)
      );
    }, pauseMs).unref?.();
  }

  query(sql: string, params: unknown[] = [], options?: QueryOptions, tx: number | null = null): Promise<Results> {
    return this.#call({ op: "query", sql, params, options: optionsOnWire(options), tx }) as Promise<Results>;
  }

  exec(sql: string, tx: number | null = null): Promise<Results[]> {
    return this.#call({ op: "exec", sql, tx }) as Promise<Results[]>;
  }

  /** Runs fn inside BEGIN … COMMIT in the worker; ROLLBACK when fn throws. */
  async transaction<T>(fn: (tx: RemoteTransaction) => Promise<T>): Promise<T> {
    const id = (await this.#call({ op: "begin" })) as number;
    let closed = false;
    const end = (commit: boolean) => {
      closed = true;
      return this.#call({ op: "end", tx: id, commit });
    };
    const tx: RemoteTransaction = {
      query: (sql, params, options) => this.query(sql, params, options, id),
      exec: (sql) => this.exec(sql, id),
      rollback: async () => void (await end(false)),
      get closed() {
        return closed;
      },
    };
    let result: T;
    try {
      result = await fn(tx);
    } catch (error) {
      if (!closed) await end(false).catch(() => {});
      throw error;
    }
    if (!closed) await end(true);
    return result;
  }

  async close(): Promise<void> {
    try {
      if (!this.#failure) await this.#call({ op: "close" });
    } finally {
      this.#closed = true;
      this.#worker?.terminate();
      this.#fail(new Error("the embedded database is closed"));
    }
  }

  /** The worker's JavaScript heap as it last reported it (every WORKER_MEMORY_REPORT_MS); 0 before its first report. */
  heapBytes = 0;

  /** Ends the worker thread as a crash would (tests, drills): what follows is what follows a real death. */
  crashWorker(): void {
    this.#worker?.terminate();
  }

  #call(request: Request): Promise<unknown> {
    if (this.#failure) return Promise.reject(this.#failure);
    return this.#send(request);
  }

  /** To the current worker, whether or not it has opened the database yet. */
  #send(request: Request): Promise<unknown> {
    const worker = this.#worker;
    if (!worker) return Promise.reject(this.#failure ?? new Error("the embedded database has no worker"));
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      worker.postMessage({ ...request, id } as WorkerRequest);
    });
  }

  /**
   * Replies are settled from a task of their own, not from the message's: bun test's
   * `expect(p).rejects/resolves` never sees a promise settled by a worker's message when the test
   * reached it from an earlier message's continuation (oven-sh/bun#37189, #43819).
   */
  #receive(reply: WorkerReply): void {
    this.#replies.push(reply);
    if (this.#replies.length === 1) setImmediate(this.#settleAll);
  }

  readonly #replies: WorkerReply[] = [];
  readonly #settleAll = () => {
    const replies = this.#replies.splice(0);
    for (const reply of replies) this.#settle(reply);
  };

  #settle(reply: WorkerReply): void {
    const waiter = this.#pending.get(reply.id);
    if (!waiter) return;
    this.#pending.delete(reply.id);
    if (reply.ok) waiter.resolve(reply.value);
    else waiter.reject(errorFromWire(reply.error));
  }

  #fail(error: Error): void {
    this.#failure = this.#closed ? (this.#failure ?? error) : error;
    for (const waiter of this.#pending.values()) waiter.reject(error);
    this.#pending.clear();
  }
}
