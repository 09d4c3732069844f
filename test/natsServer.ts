/**
 * A private nats-server for tests of the shipped configuration (docs/nats/darvaze.conf and the
 * accounts.conf it includes), on ports the OS gives, with a throwaway CA and certificates made by
 * `openssl` in a temporary folder. The configuration is the shipped file with only its addresses
 * and paths replaced; the passwords reach the server as the docs say, as bcrypt hashes in
 * double quotes in its environment, and start with digits as `openssl rand -hex` ones may.
 */
import { copyFileSync, createWriteStream, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { nkeys } from "nats";
import { untilValue } from "./until.ts";

export const NATS_SERVER_BIN = process.env.NATS_SERVER_BIN ?? "/usr/sbin/nats-server";
const SHIPPED_DIR = join(import.meta.dir, "..", "docs", "nats");
export const SHIPPED_CONFIG = join(SHIPPED_DIR, "darvaze.conf");
/** The accounts both shipped configurations include, by a path relative to themselves. */
const SHIPPED_ACCOUNTS = join(SHIPPED_DIR, "accounts.conf");
const READY_MS_MAX = 20_000;

export interface Tls {
  dir: string;
  caFile: string;
  /** A client certificate and key signed by the CA (mutual TLS). */
  clientCertFile: string;
  clientKeyFile: string;
}

/**
 * Passwords the shipped files read from the server's environment. Hex starting with digits and an
 * exponent-like `4e1`: unquoted, nats-server would read such a value as a number and not start.
 */
export const PASSWORDS = {
  gateway: "4e1f0c2a9b8d7e6f5a4b3c2d1e0f9a8b",
  billing: "0123456789abcdef0123456789abcdef",
  support: "12345678901234567890123456789012",
};

const BCRYPT_COST = 10;

/** The server's environment for the shipped accounts: each password as its bcrypt hash, quoted. */
export async function accountPasswordsEnv(): Promise<Record<string, string>> {
  const hashed = async (password: string) => `"${await Bun.password.hash(password, { algorithm: "bcrypt", cost: BCRYPT_COST })}"`;
  return {
    DARVAZE_NATS_GATEWAY_PASSWORD: await hashed(PASSWORDS.gateway),
    DARVAZE_NATS_BILLING_PASSWORD: await hashed(PASSWORDS.billing),
    DARVAZE_NATS_SUPPORT_PASSWORD: await hashed(PASSWORDS.support),
  };
}

/**
 * `shipped` with each [from, to] replaced; throws when a `from` is missing, so that a test
 * never runs a configuration that silently kept a production address or path.
 */
export function replaceShipped(shipped: string, replacements: [from: string | RegExp, to: string][]): string {
  let text = shipped;
  for (const [from, to] of replacements) {
    const found = typeof from === "string" ? text.includes(from) : from.test(text);
    if (!found) throw new Error(`the shipped NATS configuration changed shape: no ${from}`);
    text = typeof from === "string" ? text.replaceAll(from, to) : text.replace(from, to);
  }
  return text;
}

/** Writes a server's configuration into `dir`, with the shipped accounts beside it for its `include`. */
export function writeShippedConfig(dir: string, text: string): string {
  copyFileSync(SHIPPED_ACCOUNTS, join(dir, "accounts.conf"));
  const config = join(dir, "nats.conf");
  writeFileSync(config, text);
  return config;
}

function openssl(dir: string, args: string[]): void {
  const run = Bun.spawnSync(["openssl", ...args], { cwd: dir, stderr: "pipe" });
  if (run.exitCode !== 0) throw new Error(`openssl ${args[0]} failed: ${run.stderr.toString()}`);
}

/** A CA, a server certificate for localhost/127.0.0.1 and a client certificate, all valid for a day. */
export function makeTls(dir: string): Tls {
  openssl(dir, [
    "req",
    "-x509",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-keyout",
    "ca-key.pem",
    "-out",
    "ca.pem",
    "-days",
    "1",
    "-subj",
    "/CN=darvaze-test-ca",
  ]);
  writeFileSync(join(dir, "server.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n");
  openssl(dir, ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server-key.pem", "-out", "server.csr", "-subj", "/CN=localhost"]);
  openssl(dir, [
    "x509",
    "-req",
    "-in",
    "server.csr",
    "-CA",
    "ca.pem",
    "-CAkey",
    "ca-key.pem",
    "-CAcreateserial",
    "-out",
    "server-cert.pem",
    "-days",
    "1",
    "-extfile",
    "server.ext",
  ]);
  openssl(dir, ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "client-key.pem", "-out", "client.csr", "-subj", "/CN=darvaze-node"]);
  openssl(dir, [
    "x509",
    "-req",
    "-in",
    "client.csr",
    "-CA",
    "ca.pem",
    "-CAkey",
    "ca-key.pem",
    "-CAcreateserial",
    "-out",
    "client-cert.pem",
    "-days",
    "1",
  ]);
  return { dir, caFile: join(dir, "ca.pem"), clientCertFile: join(dir, "client-cert.pem"), clientKeyFile: join(dir, "client-key.pem") };
}

/**
 * A port that was free a moment ago, for a port other programs must know before its server starts
 * (a cluster's routes): another process may bind it first, so a start that finds it taken is tried
 * again on new ones (`NATS_PORT_TAKEN`). A server that can report its own port listens on port -1.
 */
export async function freePort(): Promise<number> {
  const server = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = server.port;
  server.stop(true);
  return port;
}

/** What nats-server logs when a port it was given is taken. */
export const NATS_PORT_TAKEN = "address already in use";

export interface NatsServer {
  port: number;
  tls: Tls;
  /** `tls://127.0.0.1:<port>` */
  url: string;
  stop(): Promise<void>;
}

/**
 * Starts nats-server on the shipped configuration. `verifyClients` turns on the file's
 * `verify` (mutual TLS), the one switch the file documents.
 */
export async function startShippedNats(options: { verifyClients?: boolean } = {}): Promise<NatsServer> {
  const dir = mkdtempSync(join(tmpdir(), "darvaze-nats-"));
  const tls = makeTls(dir);
  const config = writeShippedConfig(
    dir,
    replaceShipped(readFileSync(SHIPPED_CONFIG, "utf8"), [
      ['listen: "127.0.0.1:4222"', `listen: "127.0.0.1:-1"`],
      ['http: "127.0.0.1:8222"', `http: "127.0.0.1:-1"`],
      ["/etc/nats/tls/", `${dir}/`],
      ['store_dir: "/var/lib/nats"', `store_dir: "${dir}"`],
      [/verify: false/, `verify: ${options.verifyClients ? "true" : "false"}`],
    ]),
  );
  const { port, stop } = await runNatsServer(config, await accountPasswordsEnv());
  return {
    port,
    tls,
    url: `tls://127.0.0.1:${port}`,
    async stop() {
      await stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The end of a server's log kept for a failed start's message. */
const LOG_TAIL_CHARS_MAX = 16_384;

export interface RunningNats {
  /** The client port it listens on: the one its configuration names, or the one the OS gave for -1. */
  port: number;
  httpPort: number;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

/**
 * Runs nats-server on a configuration file until its monitoring port says healthy, and reports the
 * ports it listens on (from its ports file, so a configuration may give port -1 and let the OS
 * choose). Its log is read as it comes (a server that logs into a full pipe stops) and only its
 * end is kept.
 */
export async function runNatsServer(config: string, env: Record<string, string>, options: { logFile?: string } = {}): Promise<RunningNats> {
  const portsDir = join(dirname(config), "ports");
  mkdirSync(portsDir, { recursive: true });
  const proc = Bun.spawn([NATS_SERVER_BIN, "-c", config, "--ports_file_dir", portsDir], {
    env: { PATH: process.env.PATH ?? "", ...env },
    stdout: "ignore",
    stderr: "pipe",
  });
  let log = "";
  const decoder = new TextDecoder();
  const file = options.logFile ? createWriteStream(options.logFile, { flags: "a" }) : null;
  const drained = proc.stderr.pipeTo(
    new WritableStream({
      write(chunk) {
        file?.write(chunk);
        log = (log + decoder.decode(chunk, { stream: true })).slice(-LOG_TAIL_CHARS_MAX);
      },
      close: () => void file?.end(),
    }),
  );
  const healthy = async (): Promise<{ port: number; httpPort: number } | undefined> => {
    if (proc.exitCode !== null) throw new Error("exited");
    const ports = readPortsFile(join(portsDir, `${basename(NATS_SERVER_BIN)}_${proc.pid}.ports`));
    if (!ports) return undefined;
    const health = await fetch(`http://127.0.0.1:${ports.httpPort}/healthz`).catch(() => null);
    return health?.ok ? ports : undefined;
  };
  try {
    const ports = await untilValue(healthy, { msMax: READY_MS_MAX, what: "nats-server healthy", pollMs: 50 });
    return {
      ...ports,
      async stop(signal = "SIGTERM") {
        proc.kill(signal);
        await proc.exited;
      },
    };
  } catch {
    proc.kill("SIGKILL");
    await proc.exited;
    await drained.catch(() => {});
    throw new Error(`nats-server did not start: ${log}`);
  }
}

/** The client and monitoring ports in a nats-server ports file; undefined until it is written whole. */
export function readPortsFile(path: string): { port: number; httpPort: number } | undefined {
  try {
    const ports = JSON.parse(readFileSync(path, "utf8")) as { nats?: string[]; monitoring?: string[] };
    const port = Number(new URL(ports.nats![0]!).port);
    const httpPort = Number(new URL(ports.monitoring![0]!).port);
    return port > 0 && httpPort > 0 ? { port, httpPort } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A plain nats-server (no TLS, JetStream on) with the given `authorization { … }` block, for the
 * other credential kinds; `restart()` kills it and starts it again on the same port and store.
 */
export async function startNatsWithAuthorization(
  authorization: string,
): Promise<{ url: string; stop(): Promise<void>; kill(): Promise<void>; restart(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), "darvaze-nats-auth-"));
  const config = join(dir, "nats.conf");
  const write = (port: number) =>
    writeFileSync(
      config,
      `port: ${port}\nhttp_port: -1\njetstream { store_dir: "${join(dir, "jetstream")}" }\nauthorization ${authorization}\n`,
    );
  write(-1);
  const first = await runNatsServer(config, {});
  // A restart takes the same port again, so that clients reconnect to their URL (another process
  // could bind it while the server is down: the restart then fails saying so).
  write(first.port);
  let stop: (() => Promise<void>) | null = first.stop;
  const kill = async () => {
    await stop?.();
    stop = null;
  };
  return {
    url: `nats://127.0.0.1:${first.port}`,
    kill,
    async restart() {
      await kill();
      stop = (await runNatsServer(config, {})).stop;
    },
    async stop() {
      await kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

type Signer = ReturnType<typeof nkeys.createOperator>;

/** A NATS JWT (header.claims.signature, ed25519 by an NKey), as `nsc` writes them. */
function natsJwt(signer: Signer, claims: Record<string, unknown>): string {
  const b64 = (data: Uint8Array | string) => Buffer.from(data).toString("base64url");
  const header = b64(JSON.stringify({ typ: "JWT", alg: "ed25519-nkey" }));
  const body = b64(
    JSON.stringify({
      jti: crypto.randomUUID().replaceAll("-", "").toUpperCase(),
      iat: Math.floor(Date.now() / 1000),
      iss: signer.getPublicKey(),
      ...claims,
    }),
  );
  return `${header}.${body}.${b64(signer.sign(new TextEncoder().encode(`${header}.${body}`)))}`;
}

/** A `.creds` file: a user's JWT signed by `account`, and the user's seed. */
function credsFile(path: string, account: Signer): string {
  const user = nkeys.createUser();
  const userJwt = natsJwt(account, {
    name: "node",
    sub: user.getPublicKey(),
    nats: { pub: {}, sub: {}, subs: -1, data: -1, payload: -1, type: "user", version: 2 },
  });
  const seed = new TextDecoder().decode(user.getSeed());
  writeFileSync(
    path,
    `-----BEGIN NATS USER JWT-----\n${userJwt}\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n${seed}\n------END USER NKEY SEED------\n`,
  );
  return path;
}

/**
 * nats-server in operator mode (JWTs, a memory resolver): one account, a `.creds` file of a user
 * of it, and one of a user signed by an account the server does not know.
 */
export async function startNatsWithOperator(): Promise<{
  url: string;
  credsFile: string;
  strangerCredsFile: string;
  stop(): Promise<void>;
}> {
  const dir = mkdtempSync(join(tmpdir(), "darvaze-nats-jwt-"));
  const operator = nkeys.createOperator();
  const account = nkeys.createAccount();
  const operatorJwt = natsJwt(operator, { name: "darvaze-test", sub: operator.getPublicKey(), nats: { type: "operator", version: 2 } });
  const limits = { subs: -1, data: -1, payload: -1, imports: -1, exports: -1, wildcards: true, conn: -1, leaf: -1 };
  const accountJwt = natsJwt(operator, { name: "GATEWAY", sub: account.getPublicKey(), nats: { limits, type: "account", version: 2 } });
  const config = join(dir, "nats.conf");
  writeFileSync(
    config,
    `port: -1\nhttp_port: -1\noperator: ${operatorJwt}\nresolver: MEMORY\nresolver_preload: { ${account.getPublicKey()}: ${accountJwt} }\n`,
  );
  const { port, stop } = await runNatsServer(config, {});
  return {
    url: `nats://127.0.0.1:${port}`,
    credsFile: credsFile(join(dir, "node.creds"), account),
    strangerCredsFile: credsFile(join(dir, "stranger.creds"), nkeys.createAccount()),
    async stop() {
      await stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
