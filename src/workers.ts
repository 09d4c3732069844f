/**
 * Every core of a host: with WORKERS=N, `bun run start` is a supervisor of N gateway processes
 * on one port (SO_REUSEPORT on purpose: the kernel spreads new connections over them), each a
 * node of the cluster on NATS and PostgreSQL (docs/cluster.md, "Every core of a host").
 *
 *   start:    the port checked free of any other process, N × the database pool checked against
 *             PostgreSQL's max_connections, then the workers, each told its index
 *             (DARVAZE_WORKER_INDEX); ready once every worker says it listens (over IPC).
 *   a death:  a worker that exits while the host runs is started again after WORKER_RESTART_MS;
 *             more than WORKER_RESTARTS_MAX deaths within WORKER_RESTART_WINDOW_MS stop the host
 *             (a crash loop is a fault to see, not to hide). The requests in flight on a worker
 *             that dies fail with its connections; new connections go to the others at once.
 *   stop:     SIGTERM or SIGINT is passed to every worker, which drains (SHUTDOWN_DRAIN_MS);
 *             a worker still up WORKER_STOP_MARGIN_MS after that is killed.
 */
import type { Subprocess } from "bun";
import postgres from "postgres";
import { type Config, ConfigError } from "./config.ts";
import { POSTGRES_POOL_MAX } from "./db/client.ts";
import { ensurePortFree } from "./http/listen.ts";
import type { Logger } from "./log.ts";

export const WORKER_RESTART_MS = 1_000;
export const WORKER_RESTARTS_MAX = 10;
export const WORKER_RESTART_WINDOW_MS = 60_000;
/** Past the drain, how long a stopping worker may take before it is killed. */
export const WORKER_STOP_MARGIN_MS = 10_000;
/** How long a worker may take to start listening. */
export const WORKER_READY_MS_MAX = 60_000;

/** What a worker tells its supervisor once it listens. */
export interface WorkerListening {
  event: "listening";
  url: string;
  /** Its own port's address (WORKER_PORT_BASE + index): its `/metrics` and `/ready` alone. */
  ownUrl: string;
}

/** A worker's own port: WORKER_PORT_BASE + its index, or PORT + 1 + its index. */
export function workerPort(env: Config["env"], index: number): number {
  return (env.WORKER_PORT_BASE === 0 ? env.PORT + 1 : env.WORKER_PORT_BASE) + index;
}

/**
 * Refuses a host whose workers' database pools would not fit PostgreSQL's connections (each
 * worker holds up to POSTGRES_POOL_MAX; the server keeps superuser_reserved_connections back).
 */
export async function checkConnections(databaseUrl: string, workers: number): Promise<void> {
  const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
  try {
    const [row] = await sql<{ max: string; reserved: string }[]>`
      SELECT current_setting('max_connections') AS max, current_setting('superuser_reserved_connections') AS reserved`;
    const room = Number(row!.max) - Number(row!.reserved);
    const needed = workers * POSTGRES_POOL_MAX;
    if (needed > room) {
      throw new ConfigError([
        `WORKERS: ${workers} workers hold up to ${needed} database connections (${POSTGRES_POOL_MAX} each), more than PostgreSQL's max_connections leaves (${room}): lower WORKERS or raise max_connections`,
      ]);
    }
  } finally {
    await sql.end();
  }
}

interface Worker {
  index: number;
  child: Subprocess<"ignore", "inherit", "inherit">;
  ready: boolean;
}

/** Runs the host's workers until SIGTERM or SIGINT; resolves once they have all stopped. */
export class Supervisor {
  private readonly workers = new Map<number, Worker>();
  private readonly deaths: number[] = [];
  private stopping = false;
  private readonly stopped: Promise<number>;
  private resolveStopped!: (code: number) => void;
  private readonly readyWaiters = new Set<() => void>();

  constructor(
    private readonly config: Config,
    private readonly log: Logger,
    private readonly command: string[] = [process.execPath, "run", `${import.meta.dir}/main.ts`],
  ) {
    this.stopped = new Promise((resolve) => (this.resolveStopped = resolve));
  }

  /** Starts every worker and waits until each listens; the host's exit code once it stops. */
  async run(): Promise<number> {
    const env = this.config.env;
    ensurePortFree(env.HOST, env.PORT);
    await checkConnections(env.DATABASE_URL!, env.WORKERS);
    for (let index = 0; index < env.WORKERS; index++) this.start(index);
    process.once("SIGTERM", () => void this.stop(0));
    process.once("SIGINT", () => void this.stop(0));
    await this.allReady();
    this.log("info", "workers_listening", { url: `http://${env.HOST}:${env.PORT}`, workers: env.WORKERS });
    return this.stopped;
  }

  private start(index: number): void {
    const env = this.config.env;
    const child = Bun.spawn(this.command, {
      env: { ...process.env, DARVAZE_WORKER_INDEX: String(index) },
      stdin: "ignore",
      stdout: "inherit",
      stderr: "inherit",
      ipc: (message) => this.told(index, message),
      serialization: "json",
    });
    const worker: Worker = { index, child, ready: false };
    this.workers.set(index, worker);
    this.log("info", "worker_started", { worker: index, pid: child.pid, own_url: `http://${env.HOST}:${workerPort(env, index)}` });
    void child.exited.then((code) => this.exited(worker, code));
  }

  private told(index: number, message: unknown): void {
    const worker = this.workers.get(index);
    if (!worker || (message as Partial<WorkerListening> | null)?.event !== "listening") return;
    worker.ready = true;
    this.log("info", "worker_listening", { worker: index, pid: worker.child.pid, own_url: (message as WorkerListening).ownUrl });
    for (const wake of this.readyWaiters) wake();
  }

  private allReady(): Promise<void> {
    const deadline = performance.now() + WORKER_READY_MS_MAX;
    return new Promise((resolve, reject) => {
      const check = () => {
        if (this.stopping) return reject(new Error("the host stopped before its workers listened"));
        if ([...this.workers.values()].every((w) => w.ready)) {
          this.readyWaiters.delete(check);
          clearTimeout(timer);
          resolve();
        }
      };
      const timer = setTimeout(
        () => {
          this.readyWaiters.delete(check);
          reject(new Error(`the workers did not all listen within ${WORKER_READY_MS_MAX} ms`));
        },
        Math.max(0, deadline - performance.now()),
      );
      this.readyWaiters.add(check);
      check();
    });
  }

  private exited(worker: Worker, code: number | null): void {
    if (this.workers.get(worker.index) === worker) this.workers.delete(worker.index);
    if (this.stopping) {
      if (this.workers.size === 0) this.resolveStopped(0);
      return;
    }
    const now = performance.now();
    this.deaths.push(now);
    while (this.deaths.length > 0 && now - this.deaths[0]! > WORKER_RESTART_WINDOW_MS) this.deaths.shift();
    this.log("error", "worker_died", { worker: worker.index, pid: worker.child.pid, code, deaths_in_window: this.deaths.length });
    if (this.deaths.length > WORKER_RESTARTS_MAX) {
      this.log("error", "workers_crash_loop", { deaths: this.deaths.length, window_ms: WORKER_RESTART_WINDOW_MS });
      void this.stop(1);
      return;
    }
    setTimeout(() => {
      if (!this.stopping) this.start(worker.index);
    }, WORKER_RESTART_MS);
  }

  /** Drains every worker (SIGTERM), kills those still up past the drain, then resolves `run`. */
  async stop(code: number): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    for (const wake of this.readyWaiters) wake();
    this.log("info", "workers_stopping", { workers: this.workers.size });
    const running = [...this.workers.values()];
    for (const worker of running) worker.child.kill("SIGTERM");
    const killAt = setTimeout(() => {
      for (const worker of running) worker.child.kill("SIGKILL");
    }, this.config.env.SHUTDOWN_DRAIN_MS + WORKER_STOP_MARGIN_MS);
    await Promise.all(running.map((worker) => worker.child.exited));
    clearTimeout(killAt);
    this.resolveStopped(code);
  }
}
