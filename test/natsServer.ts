/**
 * A private nats-server for tests of the shipped configuration (docs/nats/darvaze.conf), on free
 * ports, with a throwaway CA and certificates made by `openssl` in a temporary folder. The
 * configuration is the shipped file with only its ports and paths replaced.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { nkeys } from "nats";

export const NATS_SERVER_BIN = process.env.NATS_SERVER_BIN ?? "/usr/sbin/nats-server";
export const SHIPPED_CONFIG = join(import.meta.dir, "..", "docs", "nats", "darvaze.conf");
const READY_MS_MAX = 10_000;

export interface Tls {
  dir: string;
  caFile: string;
  /** A client certificate and key signed by the CA (mutual TLS). */
  clientCertFile: string;
  clientKeyFile: string;
}

/** Passwords the shipped file reads from the server's environment. */
export const PASSWORDS = {
  gateway: "gateway-secret-0123456789",
  billing: "billing-secret-0123456789",
  support: "support-secret-0123456789",
};

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
  writeFileSync(join(dir, "server.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n");
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

async function freePort(): Promise<number> {
  const server = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = server.port;
  server.stop(true);
  return port;
}

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
  const port = await freePort();
  const httpPort = await freePort();
  const shipped = readFileSync(SHIPPED_CONFIG, "utf8");
  const replaced = shipped
    .replace(/^port: 4222$/m, `port: ${port}`)
    .replace(/^http_port: 8222$/m, `http_port: ${httpPort}`)
    .replaceAll("/etc/nats/tls/", `${dir}/`)
    .replace("/var/lib/nats/jetstream", join(dir, "jetstream"))
    .replace(/verify: false/, `verify: ${options.verifyClients ? "true" : "false"}`);
  for (const expected of [`port: ${port}`, `http_port: ${httpPort}`, `${dir}/ca.pem`, join(dir, "jetstream")]) {
    if (!replaced.includes(expected)) throw new Error(`the shipped NATS configuration changed shape: no ${expected}`);
  }
  const config = join(dir, "nats.conf");
  writeFileSync(config, replaced);
  const stop = await runNatsServer(config, httpPort, {
    DARVAZE_NATS_GATEWAY_PASSWORD: PASSWORDS.gateway,
    DARVAZE_NATS_BILLING_PASSWORD: PASSWORDS.billing,
    DARVAZE_NATS_SUPPORT_PASSWORD: PASSWORDS.support,
  });
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

/** Runs nats-server on a configuration file until its monitoring port says healthy; resolves to its stop. */
async function runNatsServer(config: string, httpPort: number, env: Record<string, string>): Promise<() => Promise<void>> {
  const proc: Subprocess = Bun.spawn([NATS_SERVER_BIN, "-c", config], {
    env: { PATH: process.env.PATH ?? "", ...env },
    stdout: "ignore",
    stderr: "pipe",
  });
  const deadline = performance.now() + READY_MS_MAX;
  for (;;) {
    const health = await fetch(`http://127.0.0.1:${httpPort}/healthz`).catch(() => null);
    if (health?.ok) break;
    if (proc.exitCode !== null || performance.now() > deadline) {
      proc.kill();
      throw new Error(`nats-server did not start: ${await new Response(proc.stderr as ReadableStream).text()}`);
    }
    await Bun.sleep(50);
  }
  return async () => {
    proc.kill();
    await proc.exited;
  };
}

/**
 * A plain nats-server (no TLS, JetStream on) with the given `authorization { … }` block, for the
 * other credential kinds; `restart()` kills it and starts it again on the same port and store.
 */
export async function startNatsWithAuthorization(
  authorization: string,
): Promise<{ url: string; stop(): Promise<void>; kill(): Promise<void>; restart(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), "darvaze-nats-auth-"));
  const port = await freePort();
  const httpPort = await freePort();
  const config = join(dir, "nats.conf");
  writeFileSync(
    config,
    `port: ${port}\nhttp_port: ${httpPort}\njetstream { store_dir: "${join(dir, "jetstream")}" }\nauthorization ${authorization}\n`,
  );
  let stop: (() => Promise<void>) | null = await runNatsServer(config, httpPort, {});
  const kill = async () => {
    await stop?.();
    stop = null;
  };
  return {
    url: `nats://127.0.0.1:${port}`,
    kill,
    async restart() {
      await kill();
      stop = await runNatsServer(config, httpPort, {});
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
  const port = await freePort();
  const httpPort = await freePort();
  const operator = nkeys.createOperator();
  const account = nkeys.createAccount();
  const operatorJwt = natsJwt(operator, { name: "darvaze-test", sub: operator.getPublicKey(), nats: { type: "operator", version: 2 } });
  const limits = { subs: -1, data: -1, payload: -1, imports: -1, exports: -1, wildcards: true, conn: -1, leaf: -1 };
  const accountJwt = natsJwt(operator, { name: "GATEWAY", sub: account.getPublicKey(), nats: { limits, type: "account", version: 2 } });
  const config = join(dir, "nats.conf");
  writeFileSync(
    config,
    `port: ${port}\nhttp_port: ${httpPort}\noperator: ${operatorJwt}\nresolver: MEMORY\nresolver_preload: { ${account.getPublicKey()}: ${accountJwt} }\n`,
  );
  const stop = await runNatsServer(config, httpPort, {});
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
