/**
 * Services that a fault test owns and may kill: a nats-server with JetStream on its own port and
 * store folder, a PostgreSQL cluster made by initdb in a temporary folder (run as the `postgres`
 * user when this process is root: PostgreSQL refuses to run as root), both restartable on the same
 * port and data, never the shared services of the other tests.
 */
import { chmodSync, chownSync, closeSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";

export const NATS_SERVER_BIN = process.env.NATS_SERVER_BIN ?? "/usr/sbin/nats-server";
const READY_MS_MAX = 20_000;
const READY_POLL_MS = 50;
const START_ATTEMPTS_MAX = 3;

export async function freePort(): Promise<number> {
  const server = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = server.port;
  server.stop(true);
  return port;
}

async function waitUntil(what: string, ready: () => Promise<boolean>, exited: () => boolean): Promise<void> {
  const deadline = performance.now() + READY_MS_MAX;
  while (!(await ready().catch(() => false))) {
    if (exited()) throw new Error(`${what} exited while starting`);
    if (performance.now() > deadline) throw new Error(`${what} not ready within ${READY_MS_MAX} ms`);
    await Bun.sleep(READY_POLL_MS);
  }
}

/**
 * Makes a server on ports picked free and starts it. A port is only free when it is picked:
 * another process may bind it before the server does, so when `portTaken` says so (after cleaning
 * up the failed server) a new one is made, up to START_ATTEMPTS_MAX times.
 */
async function onFreePorts<T extends { start(): Promise<void> }>(
  make: () => Promise<T>,
  portTaken: (server: T, error: Error) => boolean,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const server = await make();
    try {
      await server.start();
      return server;
    } catch (error) {
      if (!portTaken(server, error as Error) || attempt >= START_ATTEMPTS_MAX) throw error;
    }
  }
}

async function ended(proc: Subprocess | null, signal: NodeJS.Signals): Promise<void> {
  proc?.kill(signal);
  await proc?.exited;
}

/** A nats-server with JetStream; `kill` and `start` again keep its port and store. */
export class OwnNats {
  private proc: Subprocess | null = null;
  readonly dir = mkdtempSync(join(tmpdir(), "darvaze-own-nats-"));

  private constructor(
    readonly port: number,
    private readonly httpPort: number,
  ) {}

  static async start(): Promise<OwnNats> {
    // Its standard error is not kept: any exit while starting may be a port taken meanwhile.
    return onFreePorts(
      async () => new OwnNats(await freePort(), await freePort()),
      (nats, error) => {
        rmSync(nats.dir, { recursive: true, force: true });
        return error.message.includes("exited while starting");
      },
    );
  }

  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    const args = [
      NATS_SERVER_BIN,
      "-js",
      "-sd",
      join(this.dir, "store"),
      "-a",
      "127.0.0.1",
      "-p",
      String(this.port),
      "-m",
      String(this.httpPort),
    ];
    const proc = Bun.spawn(args, { stdout: "ignore", stderr: "ignore" });
    this.proc = proc;
    await waitUntil(
      "nats-server",
      async () =>
        (await fetch(`http://127.0.0.1:${this.httpPort}/healthz?js-enabled-only=true`, { signal: AbortSignal.timeout(READY_POLL_MS * 20) }))
          .ok,
      () => proc.exitCode !== null,
    );
  }

  get pid(): number | undefined {
    return this.proc?.pid;
  }

  async kill(signal: NodeJS.Signals = "SIGKILL"): Promise<void> {
    await ended(this.proc, signal);
    this.proc = null;
  }

  async stop(): Promise<void> {
    await this.kill("SIGTERM");
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function postgresBin(name: string): string {
  const root = "/usr/lib/postgresql";
  const versions = readdirSync(root).sort((a, b) => Number(b) - Number(a));
  if (versions.length === 0) throw new Error(`no PostgreSQL under ${root}`);
  return join(root, versions[0]!, "bin", name);
}

/** The command as the `postgres` user when this process is root. */
function asPostgresUser(command: string[]): string[] {
  return process.getuid?.() === 0 ? ["runuser", "-u", "postgres", "--", ...command] : command;
}

/** A PostgreSQL cluster of its own (initdb in a temporary folder, trust auth on 127.0.0.1). */
export class OwnPostgres {
  private proc: Subprocess | null = null;

  private constructor(
    readonly port: number,
    readonly dir: string,
  ) {}

  static async start(): Promise<OwnPostgres> {
    const dir = mkdtempSync(join(tmpdir(), "darvaze-own-pg-"));
    chmodSync(dir, 0o700);
    if (process.getuid?.() === 0) {
      const uid = Number(Bun.spawnSync(["id", "-u", "postgres"]).stdout.toString().trim());
      const gid = Number(Bun.spawnSync(["id", "-g", "postgres"]).stdout.toString().trim());
      chownSync(dir, uid, gid);
    }
    const init = Bun.spawnSync(
      asPostgresUser([postgresBin("initdb"), "-D", join(dir, "data"), "-U", "postgres", "-A", "trust", "--no-sync"]),
      { stderr: "pipe", stdout: "pipe" },
    );
    if (init.exitCode !== 0) throw new Error(`initdb failed: ${init.stderr.toString()}`);
    // A restart keeps its port; only this first start may move to a new one.
    return onFreePorts(
      async () => new OwnPostgres(await freePort(), dir),
      (pg) => pg.log().includes("could not bind"),
    );
  }

  /** What PostgreSQL wrote to its standard error: why it stopped, when it did. */
  log(): string {
    try {
      return readFileSync(join(this.dir, "postgres.log"), "utf8");
    } catch {
      return "";
    }
  }

  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  async start(): Promise<void> {
    const command = [
      postgresBin("postgres"),
      "-D",
      join(this.dir, "data"),
      "-p",
      String(this.port),
      "-k",
      this.dir,
      "-c",
      "listen_addresses=127.0.0.1",
      "-c",
      "fsync=off",
      "-c",
      "max_connections=200",
      "-c",
      "shared_buffers=32MB",
    ];
    const log = openSync(join(this.dir, "postgres.log"), "w");
    const proc = Bun.spawn(asPostgresUser(command), { stdout: "ignore", stderr: log });
    closeSync(log);
    this.proc = proc;
    try {
      await waitUntil(
        "postgres",
        async () => (await Bun.spawn([postgresBin("pg_isready"), "-q", "-h", "127.0.0.1", "-p", String(this.port)]).exited) === 0,
        () => proc.exitCode !== null,
      );
    } catch (err) {
      if (proc.exitCode === null) await this.kill("SIGKILL").catch(() => proc.kill("SIGKILL"));
      this.proc = null;
      await proc.exited;
      throw new Error(`${(err as Error).message} on port ${this.port}; its log ends:\n${this.log().split("\n").slice(-20).join("\n")}`);
    }
  }

  /**
   * SIGINT: PostgreSQL's fast shutdown (open connections are cut, as in a restart). Sent to the
   * postmaster itself (its pid file names it): runuser, its parent here, does not pass SIGINT on.
   */
  async kill(signal: NodeJS.Signals = "SIGINT"): Promise<void> {
    const proc = this.proc;
    this.proc = null;
    if (!proc) return;
    const pid = Number(readFileSync(join(this.dir, "data", "postmaster.pid"), "utf8").split("\n")[0]);
    process.kill(pid, signal);
    await proc.exited;
  }

  async stop(): Promise<void> {
    await this.kill("SIGINT");
    rmSync(this.dir, { recursive: true, force: true });
  }
}
