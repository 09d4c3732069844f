/**
 * Three nats-servers as one cluster, from the shipped docs/nats/darvaze-cluster.conf with only
 * its addresses, names and paths replaced: TLS for clients and routes (mutual, certificates naming
 * the route hosts), the shipped accounts, on ports of 127.0.0.1. Each member can be killed and started
 * again on its own client port and store.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { connect, type NatsConnection } from "nats";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { until } from "./until.ts";
import {
  accountPasswordsEnv,
  freePort,
  makeTls,
  NATS_PORT_TAKEN,
  PASSWORDS,
  replaceShipped,
  runNatsServer,
  type Tls,
  writeShippedConfig,
} from "./natsServer.ts";

export const SHIPPED_CLUSTER_CONFIG = join(import.meta.dir, "..", "docs", "nats", "darvaze-cluster.conf");
export const CLUSTER_SIZE = 3;
/** A restarted server catches up on what it missed (a few seconds of usage batches and KV renewals). */
export const REPLICAS_CURRENT_MS_MAX = 30_000;

export interface ClusterMember {
  name: string;
  port: number;
  httpPort: number;
  running: boolean;
  /** kill -9 (or `signal`); the store stays. */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** Starts it again on the same ports and store; resolves once its monitoring port says healthy. */
  start(): Promise<void>;
}

export interface NatsCluster {
  members: ClusterMember[];
  tls: Tls;
  /** Every member's client URL, comma-separated, as NATS_URL takes them. */
  url: string;
  stop(): Promise<void>;
}

/** One member's configuration: the shipped file with nats-1's lines made this member's. */
function memberConfig(shipped: string, index: number, ports: { client: number; routes: number[] }, dirs: { tls: string; store: string }) {
  return replaceShipped(shipped, [
    ['server_name: "nats-1"', `server_name: "nats-${index + 1}"`],
    ['listen: "nats-1.internal:4222"', `listen: "127.0.0.1:${ports.client}"`],
    ['http: "127.0.0.1:8222"', `http: "127.0.0.1:-1"`],
    ['listen: "nats-1.internal:6222"', `listen: "127.0.0.1:${ports.routes[index]}"`],
    ...ports.routes.map((port, j): [string, string] => [`nats-route://nats-${j + 1}.internal:6222`, `nats-route://localhost:${port}`]),
    ["/etc/nats/tls/", `${dirs.tls}/`],
    ['store_dir: "/var/lib/nats"', `store_dir: "${dirs.store}"`],
  ]);
}

/** How many times the cluster is started on new route ports when one was taken meanwhile. */
const ROUTE_PORTS_ATTEMPTS_MAX = 3;

/**
 * Starts the three members at once (the first alone would wait for a JetStream quorum). Client
 * ports are the OS's choice (port -1); route ports must be in every member's file before any
 * starts, so they are picked free, and the start is tried again on new ones if one was taken.
 */
export async function startShippedNatsCluster(): Promise<NatsCluster> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startClusterOnce();
    } catch (error) {
      if (!(error as Error).message.includes(NATS_PORT_TAKEN) || attempt >= ROUTE_PORTS_ATTEMPTS_MAX) throw error;
    }
  }
}

async function startClusterOnce(): Promise<NatsCluster> {
  const dir = mkdtempSync(join(tmpdir(), "darvaze-nats-cluster-"));
  const tls = makeTls(dir);
  const shipped = readFileSync(SHIPPED_CLUSTER_CONFIG, "utf8");
  const env = await accountPasswordsEnv();
  const routePorts: number[] = [];
  for (let i = 0; i < CLUSTER_SIZE; i++) routePorts.push(await freePort());
  const members = routePorts.map((_, i): ClusterMember => {
    const memberDir = join(dir, `nats-${i + 1}`);
    mkdirSync(memberDir);
    const write = (client: number) =>
      writeShippedConfig(memberDir, memberConfig(shipped, i, { client, routes: routePorts }, { tls: dir, store: memberDir }));
    const config = write(-1);
    let stop: ((signal?: NodeJS.Signals) => Promise<void>) | null = null;
    return {
      name: `nats-${i + 1}`,
      port: 0,
      httpPort: 0,
      get running() {
        return stop !== null;
      },
      async kill(signal = "SIGKILL") {
        await stop?.(signal);
        stop = null;
      },
      async start() {
        // DARVAZE_TEST_LOGS=<folder> keeps each member's log there, as the gateways' are.
        const logs = process.env.DARVAZE_TEST_LOGS;
        const running = await runNatsServer(config, env, { logFile: logs ? join(logs, `nats-${i + 1}.log`) : undefined });
        stop = running.stop;
        this.httpPort = running.httpPort;
        if (this.port === 0) {
          // Started again, it takes the same client port: the gateways' NATS_URL names it.
          this.port = running.port;
          write(running.port);
        }
      },
    };
  });
  try {
    await Promise.all(members.map((m) => m.start()));
  } catch (error) {
    await Promise.all(members.map((m) => m.kill()));
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    members,
    tls,
    url: members.map((m) => `tls://127.0.0.1:${m.port}`).join(","),
    async stop() {
      await Promise.all(members.map((m) => m.kill("SIGTERM")));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface Replicas {
  stream: string;
  leader: string | undefined;
  copies: { name: string; current: boolean; offline?: boolean }[];
}

/** Every stream of the gateway's account (usage, dead letters, KV buckets) with its leader and copies, from stream info. */
export async function streamsReplicas(nc: NatsConnection): Promise<Replicas[]> {
  const jsm = await nc.jetstreamManager({ timeout: 2_000 });
  const streams: Replicas[] = [];
  for await (const info of jsm.streams.list()) {
    streams.push({ stream: info.config.name, leader: info.cluster?.leader, copies: info.cluster?.replicas ?? [] });
  }
  return streams;
}

/** True when every stream has a leader and its other copies are online and current. */
export async function allReplicasCurrent(nc: NatsConnection): Promise<boolean> {
  const streams = await streamsReplicas(nc).catch(() => null);
  if (!streams || streams.length === 0) return false;
  return streams.every((s) => s.leader && s.copies.length === CLUSTER_SIZE - 1 && s.copies.every((c) => c.current && !c.offline));
}

/** Waits until every stream's copies are current; a timeout names the streams and copies that were not. */
export async function untilReplicasCurrent(nc: NatsConnection): Promise<void> {
  await until(() => allReplicasCurrent(nc), REPLICAS_CURRENT_MS_MAX).catch(async (error: Error) => {
    const state = await streamsReplicas(nc).catch((e: Error) => e.message);
    throw new Error(`${error.message}: streams' copies ${JSON.stringify(state)}`);
  });
}

/** The usage stream's leader (the hardest loss), unless it was killed before: then another server not yet killed. */
export async function pickVictim(nc: NatsConnection, members: ClusterMember[], killed: string[]): Promise<ClusterMember> {
  const usage = (await streamsReplicas(nc)).find((s) => s.stream.endsWith("_USAGE"));
  const leader = members.find((m) => m.name === usage?.leader && !killed.includes(m.name));
  return leader ?? members.find((m) => !killed.includes(m.name))!;
}

/** A gateway node's NATS settings on the cluster: the gateway account over TLS, every stream and bucket on all three servers. */
export function gatewayNatsEnv(cluster: NatsCluster): Record<string, string> {
  return {
    NATS_URL: cluster.url,
    NATS_USER: "gateway",
    NATS_PASSWORD: PASSWORDS.gateway,
    NATS_TLS_CA_FILE: cluster.tls.caFile,
    USAGE_STREAM_REPLICAS: String(CLUSTER_SIZE),
    NATS_KV_REPLICAS: String(CLUSTER_SIZE),
  };
}

/** A connection of the test's own to the cluster as the gateway account, reconnecting for ever. */
export function connectAsGateway(cluster: NatsCluster): Promise<NatsConnection> {
  return connect({
    servers: cluster.url.split(","),
    user: "gateway",
    pass: PASSWORDS.gateway,
    tls: { caFile: cluster.tls.caFile },
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
  });
}
