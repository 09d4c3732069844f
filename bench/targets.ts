/**
 * The servers a run measures, each a process of its own: the simulator (ceiling, on the load
 * CPU), the bare Bun proxy, the peer gateway (Portkey, on Node) and Darvaze (on the server CPU;
 * a two-node Darvaze puts its second node on the load CPU). Darvaze targets come with a funded key.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "nats";
import postgres from "postgres";
import { partitionBucket } from "../actors/cluster/partitions.ts";
import { quotaBucket } from "../actors/pool/quota.ts";
import { usageStreamName } from "../src/ledger/stream.ts";
import { freePort, LOAD_CPU, onInterrupt, runLoad, SERVER_CPU, spawnPinned, waitReady, type Child } from "./procs.ts";

/** The peer gateway measured beside Darvaze (bench/peers). */
export const PEER = "Portkey gateway 1.15.2 (Node)";

export const ROOT = join(import.meta.dir, "..");
const HOST = "127.0.0.1";

/** What the load generators need to know about a server. */
export interface Target {
  name: string;
  /** Base URL, e.g. `http://127.0.0.1:9100`. */
  url: string;
  /** Bearer key; the simulator and bare proxy accept any. */
  key: string;
  /** Every node of a multi-node target (`url` is the first); the load is split between them. */
  urls?: string[];
  /** Extra headers on every request (the peer gateway is told its upstream this way). */
  headers?: Record<string, string>;
  /** The server's process id (Darvaze: its first node), for memory readings. */
  pid?: number;
  /** Every node's process id (Darvaze), for CPU readings. */
  pids?: number[];
  /** Where the longest event-loop stall since the last reading is read (the bare proxy; Darvaze has /metrics). */
  stallUrl?: string;
  /** The admin token (Darvaze only), for /metrics. */
  adminToken?: string;
  /** `count` more keys on the same funded account (Darvaze only). */
  createKeys?(count: number): Promise<string[]>;
  stop(): Promise<void>;
}

export type DarvazeMode = "embedded" | "nats-pg";

export interface Services {
  databaseUrl: string;
  natsUrl: string;
}

export const servicesDefaults: Services = {
  databaseUrl: process.env.BENCH_DATABASE_URL ?? process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres",
  natsUrl: process.env.NATS_URL ?? "nats://127.0.0.1:4222",
};

/** `length` random hex digits. */
const randomId = (length: number) =>
  Buffer.from(crypto.getRandomValues(new Uint8Array(Math.ceil(length / 2))))
    .toString("hex")
    .slice(0, length);

/**
 * The simulator, on the load CPU, answering at once; `max_tokens` cuts replies shorter than
 * `outputTokens`. `itlMs` paces a stream's tokens (a slow backend: streams that stay open).
 * @example const slow = await startSimulator({ outputTokens: 3600, itlMs: 1000, label: "slow simulator" });
 */
export async function startSimulator(options: { outputTokens: number; itlMs?: number; label?: string }): Promise<Target> {
  const port = freePort();
  const child = spawnPinned({
    label: options.label ?? "simulator",
    cpu: LOAD_CPU,
    cmd: [
      "bun",
      "run",
      join(ROOT, "src/sim/main.ts"),
      "--port",
      String(port),
      "--ttft-ms",
      "0",
      "--itl-ms",
      String(options.itlMs ?? 0),
      "--output-tokens",
      String(options.outputTokens),
    ],
  });
  const url = `http://${HOST}:${port}`;
  await waitReady(child, `${url}/v1/models`);
  return { name: "simulator (ceiling)", url, key: "bench", stop: () => child.stop() };
}

export async function startBareProxy(upstreamUrl: string): Promise<Target> {
  const port = freePort();
  const child = spawnPinned({
    label: "bare proxy",
    cpu: SERVER_CPU,
    cmd: ["bun", "run", join(ROOT, "bench/bare-proxy.ts")],
    env: { ...process.env, PORT: String(port), UPSTREAM_URL: upstreamUrl, BUN_CONFIG_MAX_HTTP_REQUESTS: "16384" },
  });
  const url = `http://${HOST}:${port}`;
  // The proxy has no health route; a GET fails to parse as JSON and answers 500, so poll the port.
  await waitForPort(child, port);
  return { name: "bare Bun proxy", url, key: "bench", pid: child.proc.pid, stallUrl: `${url}/stall`, stop: () => child.stop() };
}

/** The limits of the shape (bench/limit-proxy.ts), each a metering proxy: in Bun.serve, in Elysia, with two NATS hops. */
export type LimitMode = "bun" | "elysia" | "nats2";
export const LIMIT_NAMES: Record<LimitMode, string> = {
  bun: "limit: metering Bun proxy",
  elysia: "limit: metering Elysia proxy",
  nats2: "limit: metering proxy + 2 NATS hops",
};

export async function startLimitProxy(mode: LimitMode, upstreamUrl: string, natsUrl: string): Promise<Target> {
  const port = freePort();
  const child = spawnPinned({
    label: LIMIT_NAMES[mode],
    cpu: SERVER_CPU,
    cmd: ["bun", "run", join(ROOT, "bench/limit-proxy.ts")],
    env: {
      ...process.env,
      MODE: mode,
      PORT: String(port),
      UPSTREAM_URL: upstreamUrl,
      NATS_URL: natsUrl,
      BUN_CONFIG_MAX_HTTP_REQUESTS: "16384",
    },
  });
  const url = `http://${HOST}:${port}`;
  await waitReady(child, `${url}/stall`);
  return { name: LIMIT_NAMES[mode], url, key: "bench", pid: child.proc.pid, stallUrl: `${url}/stall`, stop: () => child.stop() };
}

const peersDir = join(ROOT, "bench/peers");
const portkeyStart = join(peersDir, "node_modules/@portkey-ai/gateway/build/start-server.js");
const peerInstallMsMax = 180_000;

/** Installs bench/peers when its node_modules is missing; the reason it could not, or null. */
async function peerInstalled(): Promise<string | null> {
  if (Bun.which("node") === null) return "node is not installed";
  if (existsSync(portkeyStart)) return null;
  const npm = Bun.which("npm");
  if (npm === null) return "npm is not installed (needed once to install bench/peers)";
  const verb = existsSync(join(peersDir, "package-lock.json")) ? "ci" : "install";
  console.error(`bench: installing the peer gateway: npm ${verb} in bench/peers`);
  try {
    await runLoad(`npm ${verb}`, [npm, verb, "--prefix", peersDir, "--no-audit", "--no-fund"], peerInstallMsMax);
  } catch (error) {
    return `npm ${verb} in bench/peers failed: ${(error as Error).message.split("\n").slice(0, 3).join(" ")}`;
  }
  return existsSync(portkeyStart) ? null : `npm ${verb} in bench/peers did not install ${portkeyStart}`;
}

/**
 * Portkey's open-source gateway on Node (as its README starts it, headless), on the server CPU,
 * told per request to use the simulator as an OpenAI-compatible upstream; or why it is skipped.
 */
export async function startPortkey(upstreamUrl: string): Promise<Target | string> {
  const reason = await peerInstalled();
  if (reason !== null) return reason;
  const port = freePort();
  const child = spawnPinned({
    label: "portkey",
    cpu: SERVER_CPU,
    cmd: ["node", portkeyStart, `--port=${port}`, "--headless"],
    env: { ...process.env, NODE_ENV: "production" },
  });
  const url = `http://${HOST}:${port}`;
  try {
    await waitReady(child, `${url}/`);
  } catch (error) {
    await child.stop();
    throw error;
  }
  return {
    name: PEER,
    url,
    key: "bench",
    headers: { "x-portkey-provider": "openai", "x-portkey-custom-host": `${upstreamUrl}/v1` },
    stop: () => child.stop(),
  };
}

async function waitForPort(child: Child, port: number, timeoutMs = 20_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    if (child.proc.exitCode !== null) throw new Error(`${child.label} exited early:\n${child.output()}`);
    const open = await Bun.connect({ hostname: HOST, port, socket: { data() {} } }).then(
      (socket) => (socket.end(), true),
      () => false,
    );
    if (open) return;
    await Bun.sleep(50);
  }
  throw new Error(`${child.label} did not open port ${port} in ${timeoutMs} ms:\n${child.output()}`);
}

/** Why NATS or PostgreSQL cannot be used, or null when both answer. */
export async function servicesUnavailable(services: Services): Promise<string | null> {
  const nats = new URL(services.natsUrl);
  const natsUp = await Promise.race([
    Bun.connect({ hostname: nats.hostname, port: Number(nats.port || 4222), socket: { data() {} } }).then(
      (socket) => (socket.end(), true),
      () => false,
    ),
    Bun.sleep(2_000).then(() => false),
  ]);
  if (!natsUp) return `NATS not reachable at ${services.natsUrl}`;
  const sql = postgres(services.databaseUrl, { max: 1, connect_timeout: 2, onnotice: () => {} });
  try {
    await sql`select 1`;
    return null;
  } catch (error) {
    return `PostgreSQL not reachable at ${services.databaseUrl}: ${(error as Error).message}`;
  } finally {
    await sql.end({ timeout: 2 });
  }
}

/**
 * The gateway mode a bench's `--nats-pg` flag asks for, with what startDarvaze needs for it;
 * throws when NATS + PostgreSQL were asked for and do not answer.
 * @example const gateway = await startDarvaze({ ...(await askedMode(flags["nats-pg"])), upstreamUrl: sim.url });
 */
export async function askedMode(natsPg: boolean | undefined): Promise<{ mode: DarvazeMode; services?: Services }> {
  if (!natsPg) return { mode: "embedded" };
  const reason = await servicesUnavailable(servicesDefaults);
  if (reason) throw new Error(`NATS + PostgreSQL unavailable: ${reason}`);
  return { mode: "nats-pg", services: servicesDefaults };
}

/** A fresh database on the server of `adminUrl`, and how to drop it. */
async function freshDatabase(adminUrl: string): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `darvaze_bench_${randomId(12).toLowerCase()}`;
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  try {
    await admin.unsafe(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end({ timeout: 2 });
  }
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const again = postgres(adminUrl, { max: 1, onnotice: () => {} });
      try {
        await again.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await again.end({ timeout: 2 });
      }
    },
  };
}

export interface DarvazeOptions {
  mode: DarvazeMode;
  /** nats-pg only: 2 or 3 start more gateways on the same database, NATS subjects and secrets (a cluster). */
  nodes?: 1 | 2 | 3;
  upstreamUrl: string;
  services?: Services;
  /** Run under `bun --cpu-prof` and write the profile (and its markdown summary) here. */
  cpuProfile?: { dir: string; name: string };
  /** More `bun run` flags for the gateway's process (a `--preload` that samples its heap, say). */
  bunFlags?: string[];
  /** More environment for the gateway's process. */
  env?: Record<string, string>;
  /** How long each node may take to answer /health (default 20 s; a busy machine needs more). */
  readyTimeoutMs?: number;
  /** The checkout whose `src/main.ts` runs (default this one): an older release measured by this harness. */
  root?: string;
}

/** `src/main.ts` as a process routing every model to `upstreamUrl`, with a funded key. */
export async function startDarvaze(options: DarvazeOptions): Promise<Target> {
  const cleanups: (() => Promise<void> | void)[] = [];
  const unregister: (() => void)[] = [];
  const stop = async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
    for (const remove of unregister) remove();
  };
  /** Runs on stop, or on an interrupted run (the child itself is killed by procs.ts). */
  const cleanUpLater = (cleanup: () => Promise<void> | void) => {
    cleanups.push(cleanup);
    unregister.push(onInterrupt(cleanup));
  };
  try {
    const folder = mkdtempSync(join(tmpdir(), "darvaze-bench-"));
    cleanUpLater(() => rmSync(folder, { recursive: true, force: true }));
    const configPath = join(folder, "pools.json");
    const backend = {
      name: "sim",
      kind: "openai",
      url: `${options.upstreamUrl}/v1`,
      region: "in-country",
      weight: 1,
      concurrency_max: 100_000,
    };
    writeFileSync(configPath, JSON.stringify({ default_backends: [backend], pools: {} }));

    const nodes = options.nodes ?? 1;
    if (nodes > 1 && options.mode !== "nats-pg") throw new Error("only nats-pg runs on several nodes");
    const adminToken = `bench-admin-${randomId(24)}`;
    const env: Record<string, string | undefined> = {
      ...process.env,
      HOST,
      ADMIN_TOKEN: adminToken,
      KEY_PEPPER: randomId(48),
      DARVAZE_CONFIG: configPath,
      DARVAZE_SUBJECT_PREFIX: `bench${randomId(10)}`,
      LOG_LEVEL: "error",
      // As `bun run start` sets it: Bun allows only 256 fetches in flight otherwise.
      BUN_CONFIG_MAX_HTTP_REQUESTS: "16384",
      DATABASE_URL: undefined,
      NATS_URL: undefined,
    };
    if (options.mode === "nats-pg") {
      if (!options.services) throw new Error("nats-pg needs services");
      const db = await freshDatabase(options.services.databaseUrl);
      cleanUpLater(() => db.drop());
      const natsUrl = options.services.natsUrl;
      const prefix = env.DARVAZE_SUBJECT_PREFIX!;
      cleanUpLater(() => dropUsageStream(natsUrl, prefix));
      env.DATABASE_URL = db.url;
      env.NATS_URL = natsUrl;
    }

    const profileFlags = options.cpuProfile
      ? ["--cpu-prof", "--cpu-prof-md", `--cpu-prof-dir=${options.cpuProfile.dir}`, `--cpu-prof-name=${options.cpuProfile.name}`]
      : [];
    Object.assign(env, options.env);
    // One after the other, so the second node finds the database migrated.
    const urls: string[] = [];
    let pid: number | undefined;
    const pids: number[] = [];
    // Node 3, if any, shares node 1's CPU: there is no third.
    const nodeCpus = Array.from({ length: nodes }, (_, i) => DARVAZE_NODE_CPUS[i % DARVAZE_NODE_CPUS.length]!);
    for (const [i, cpu] of nodeCpus.entries()) {
      const port = freePort();
      const child = spawnPinned({
        label: `darvaze (${options.mode}, node ${i + 1})`,
        cpu,
        cmd: ["bun", ...profileFlags, "run", ...(options.bunFlags ?? []), join(options.root ?? ROOT, "src/main.ts")],
        env: { ...env, PORT: String(port), DARVAZE_DATA: join(folder, `data-${i + 1}`) },
      });
      cleanups.push(() => child.stop());
      pid ??= child.proc.pid;
      pids.push(child.proc.pid);
      const url = `http://${HOST}:${port}`;
      await waitReady(child, `${url}/health`, options.readyTimeoutMs);
      urls.push(url);
    }
    const url = urls[0]!;
    const funded = await fundedKey(url, adminToken);
    const name =
      options.mode === "embedded"
        ? "Darvaze embedded (PGlite, in-process bus)"
        : `Darvaze NATS + PostgreSQL, ${nodes} node${nodes > 1 ? "s" : ""}`;
    return { name, url, key: funded.key, pid, pids, ...(nodes > 1 ? { urls } : {}), adminToken, createKeys: funded.createKeys, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** Node 1 on the server CPU; a second node on the load CPU (2 cores: there is no third). */
export const DARVAZE_NODE_CPUS = [SERVER_CPU, LOAD_CPU] as const;
const keyCreationsInFlight = 16;
/** The bench account's limits: more keys and concurrent requests than any workload here uses. */
const BENCH_KEYS_MAX = 100_000;
const BENCH_CONCURRENCY_MAX = 1_000_000;

export async function fundedKey(url: string, adminToken: string): Promise<{ key: string; createKeys(count: number): Promise<string[]> }> {
  const admin = async (path: string, body: unknown, method = "POST"): Promise<Record<string, unknown>> => {
    const response = await fetch(url + path, {
      method,
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    });
    const reply = (await response.json()) as Record<string, unknown>;
    if (!response.ok) throw new Error(`admin ${path} answered ${response.status}: ${JSON.stringify(reply)}`);
    return reply;
  };
  const account = await admin("/admin/accounts", { name: "bench" });
  const accountId = String(account.id);
  await admin(`/admin/accounts/${accountId}/topups`, { amount_toman: 1e12, reference: `bench-${randomId(8)}` });
  // One account carries the whole load (thousands of keys and streams): above the defaults a customer gets.
  await admin(`/admin/accounts/${accountId}`, { limits: { keys_max: BENCH_KEYS_MAX, concurrency_max: BENCH_CONCURRENCY_MAX } }, "PATCH");
  const createKey = async (name: string): Promise<string> => {
    const created = await admin(`/admin/accounts/${accountId}/keys`, { name, concurrency_max: 10_000 });
    if (typeof created.key !== "string") throw new Error(`key creation returned no key: ${JSON.stringify(created)}`);
    return created.key;
  };
  const createKeys = async (count: number): Promise<string[]> => {
    const keys: string[] = [];
    let next = 0;
    const worker = async () => {
      while (next < count) {
        const index = next++;
        keys[index] = await createKey(`bench-${index + 1}`);
      }
    };
    await Promise.all(Array.from({ length: Math.min(keyCreationsInFlight, count) }, worker));
    return keys;
  };
  return { key: await createKey("bench"), createKeys };
}

/** The run's usage stream (the gateway keeps it for days; a benchmark does not need it). */
async function dropUsageStream(natsUrl: string, prefix: string): Promise<void> {
  try {
    const nc = await connect({ servers: natsUrl });
    try {
      const jsm = await nc.jetstreamManager();
      await jsm.streams.delete(usageStreamName(prefix)).catch(() => false);
      // The cluster's KV buckets (streams KV_<bucket>).
      await jsm.streams.delete(`KV_${partitionBucket(prefix)}`).catch(() => false);
      await jsm.streams.delete(`KV_${quotaBucket(prefix)}`).catch(() => false);
    } finally {
      await nc.close();
    }
  } catch {}
}
