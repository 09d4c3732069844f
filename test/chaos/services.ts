/**
 * Services that a fault test owns and may kill: a nats-server with JetStream on its own port and
 * store folder, a PostgreSQL cluster made by initdb in a temporary folder (run as the `postgres`
 * user when this process is root: PostgreSQL refuses to run as root), both restartable on the same
 * port and data, never the shared services of the other tests.
 */
import { chmodSync, chownSync, closeSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import type { Subprocess } from "bun";
import { readPortsFile } from "../natsServer.ts";
import { untilValue } from "../until.ts";

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

/** Waits until `ready` says so; fails at once when the process exits while starting. */
function startedWhen<T>(what: string, ready: () => Promise<T | undefined>, exited: () => boolean): Promise<T> {
  const read = async () => {
    if (exited()) throw new Error(`${what} exited while starting`);
    return ready().catch(() => undefined);
  };
  return untilValue(read, { msMax: READY_MS_MAX, what: `${what} ready`, pollMs: READY_POLL_MS });
}

/**
 * Makes a server on ports picked free and starts it, for a program that cannot take port 0 and
 * say which it got (PostgreSQL). A port is only free when it is picked: another process may bind
 * it before the server does, so when `portTaken` says so (after cleaning up the failed server) a
 * new one is made, up to START_ATTEMPTS_MAX times.
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

/**
 * A nats-server with JetStream on the port the OS gives it (-1, read back from its ports file);
 * `kill` and `start` again keep that port and its store.
 */
export class OwnNats {
  private proc: Subprocess | null = null;
  readonly dir = mkdtempSync(join(tmpdir(), "darvaze-own-nats-"));
  /** -1 until the first start has its port from the OS. */
  port = -1;

  private constructor() {}

  static async start(): Promise<OwnNats> {
    const nats = new OwnNats();
    try {
      await nats.start();
    } catch (error) {
      rmSync(nats.dir, { recursive: true, force: true });
      throw error;
    }
    return nats;
  }

  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    const portsDir = join(this.dir, "ports");
    mkdirSync(portsDir, { recursive: true });
    const args = [NATS_SERVER_BIN, "-js", "-sd", join(this.dir, "store"), "-a", "127.0.0.1", "-p", String(this.port), "-m", "-1"];
    const proc = Bun.spawn([...args, "--ports_file_dir", portsDir], { stdout: "ignore", stderr: "ignore" });
    this.proc = proc;
    const healthy = async () => {
      const ports = readPortsFile(join(portsDir, `${basename(NATS_SERVER_BIN)}_${proc.pid}.ports`));
      if (!ports) return undefined;
      const health = await fetch(`http://127.0.0.1:${ports.httpPort}/healthz?js-enabled-only=true`, {
        signal: AbortSignal.timeout(READY_POLL_MS * 20),
      });
      return health.ok ? ports : undefined;
    };
    // Started again, it takes its first port: the nodes' NATS_URL names it.
    this.port = (await startedWhen("nats-server", healthy, () => proc.exitCode !== null)).port;
  }

  get pid(): number | undefined {
    return this.proc?.pid;
  }

  async kill(signal: NodeJS.Signals = "SIGKILL"): Promise<void> {
    await ended(this.proc, signal);
    this.proc = null;
  }

  /** SIGSTOP: the server hangs, its sockets open (no disconnect, no acknowledgement); `resume` continues it. */
  pause(): void {
    this.proc?.kill("SIGSTOP");
  }

  resume(): void {
    this.proc?.kill("SIGCONT");
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
      await startedWhen(
        "postgres",
        async () =>
          (await Bun.spawn([postgresBin("pg_isready"), "-q", "-h", "127.0.0.1", "-p", String(this.port)]).exited) === 0 || undefined,
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
