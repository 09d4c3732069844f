/**
 * The request thread's side of the PGlite worker: the part of PGlite's interface drizzle's PGlite
 * driver calls (query, exec, transaction), each call a message to the worker. Nothing here waits
 * synchronously: a commit costs the request thread one message out and one back.
 */
import { errorFromWire, type QueryOptionsOnWire, type WorkerReply, type WorkerRequest } from "./pglite-wire.ts";

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
  readonly #worker: Worker;
  readonly #pending = new Map<number, { resolve: (value: unknown) => void; reject: (error: Error) => void }>();
  #nextId = 1;
  #failure: Error | null = null;
  readonly waitReady: Promise<void>;

  /** `nice`: the worker thread's nice value (0–19), null to leave it as the process's. */
  constructor(dataDir: string | null, nice: number | null = null) {
    this.#worker = new Worker(new URL("./pglite-worker.ts", import.meta.url).href);
    this.#worker.onmessage = (event: MessageEvent<WorkerReply>) => this.#receive(event.data);
    this.#worker.onerror = (event) => this.#fail(new Error(`the embedded database's worker failed: ${event.message}`));
    this.waitReady = this.#call({ op: "open", dataDir, nice }).then(() => undefined);
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
      this.#worker.terminate();
      this.#fail(new Error("the embedded database is closed"));
    }
  }

  #call(request: Request): Promise<unknown> {
    if (this.#failure) return Promise.reject(this.#failure);
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#worker.postMessage({ ...request, id } as WorkerRequest);
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
    this.#failure ??= error;
    for (const waiter of this.#pending.values()) waiter.reject(error);
    this.#pending.clear();
  }
}
