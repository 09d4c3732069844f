/**
 * Gateways as separate processes (`bun run src/main.ts`), for tests that need several nodes or
 * a kill -9. Each is started with the given environment and is ready once it logs `listening`.
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { randomBase62 } from "../src/ids.ts";
import type { SimOptions } from "../src/sim/options.ts";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { afterAll, beforeAll } from "bun:test";
import { ADMIN_TOKEN, dropUsageStream, freshDatabase, SETUP_MS_MAX, WITHOUT_REHEARSAL } from "./helpers.ts";

export const NODE_READY_MS_MAX = 30_000;
const ROOT = join(import.meta.dir, "..");

export interface GatewayProcess {
  url: string;
  process: Subprocess<"ignore", "pipe", "pipe">;
  /** What the process wrote to stderr until it listened. */
  startLog: string;
  kill(signal?: NodeJS.Signals | number): Promise<void>;
}

/** A pools file that sends every model to one simulator. */
export function poolsFileFor(sim: Simulator): string {
  const path = join(mkdtempSync(join(tmpdir(), "darvaze-pools-")), "pools.json");
  writeFileSync(
    path,
    JSON.stringify({
      default_backends: [{ name: "sim", kind: "openai", url: `${sim.url}/v1`, region: "in-country", concurrency_max: 100_000 }],
    }),
  );
  return path;
}

/** One admin API call to a node, as an operator's script makes it. */
export async function nodeAdmin(url: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const response = await fetch(url + path, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, body: await response.json() };
}

/** The environment shared by the nodes of one test cluster: one database, one NATS prefix, one simulator. */
export function clusterEnv(databaseUrl: string, sim: Simulator, extra: Record<string, string> = {}): Record<string, string | undefined> {
  return {
    DATABASE_URL: databaseUrl,
    NATS_URL: process.env.NATS_URL,
    DARVAZE_SUBJECT_PREFIX: `t${randomBase62(8)}`,
    ADMIN_TOKEN,
    KEY_PEPPER: randomBase62(40),
    DARVAZE_CONFIG: poolsFileFor(sim),
    ...extra,
  };
}

/**
 * `bun run src/main.ts` in `cwd` (this checkout unless named) with this process's environment
 * and `env` over it; a variable set to undefined in `env` is left out. PORT is 0 unless `env`
 * says otherwise; the upstreams are the pools file `env` names (DARVAZE_CONFIG, e.g. poolsFileFor).
 */
function spawnMain(env: Record<string, string | undefined>, cwd = ROOT): Subprocess<"ignore", "pipe", "pipe"> {
  const merged: Record<string, string | undefined> = {
    ...process.env,
    PORT: "0",
    ...WITHOUT_REHEARSAL,
    ...env,
    LOG_LEVEL: "info",
    BUN_CONFIG_MAX_HTTP_REQUESTS: "16384",
  };
  const childEnv = Object.fromEntries(Object.entries(merged).filter((entry): entry is [string, string] => entry[1] !== undefined));
  return Bun.spawn(["bun", "run", "src/main.ts"], { cwd, env: childEnv, stdin: "ignore", stdout: "pipe", stderr: "pipe" });
}

/** A gateway that must fail to start: its exit code and what it wrote, or a throw if it is still up after NODE_READY_MS_MAX. */
export async function gatewayStartFailure(
  env: Record<string, string | undefined>,
): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  const child = spawnMain(env);
  const exited = await Promise.race([child.exited, Bun.sleep(NODE_READY_MS_MAX).then(() => null)]);
  if (exited === null) {
    child.kill("SIGKILL");
    throw new Error(`gateway still running after ${NODE_READY_MS_MAX} ms`);
  }
  return { exitCode: exited, stdout: await new Response(child.stdout).text(), stderr: await new Response(child.stderr).text() };
}

/** A gateway process, ready once it logs `listening`; `cwd` runs another checkout's (a bench's before and after). */
export async function spawnGateway(env: Record<string, string | undefined>, cwd?: string): Promise<GatewayProcess> {
  const child = spawnMain(env, cwd);
  const reader = child.stderr.getReader();
  const decoder = new TextDecoder();
  let text = "";
  const deadline = Date.now() + NODE_READY_MS_MAX;
  for (;;) {
    const match = /"event":"listening","url":"([^"]+)"/.exec(text);
    if (match) {
      reader.releaseLock();
      // Keep draining so the child never blocks; DARVAZE_TEST_LOGS=<folder> keeps each node's log there.
      const folder = process.env.DARVAZE_TEST_LOGS;
      const sink = folder ? Bun.file(join(folder, `node-${child.pid}.log`)).writer() : null;
      sink?.write(text);
      void child.stderr.pipeTo(new WritableStream({ write: (chunk) => void sink?.write(chunk), close: () => void sink?.end() }));
      return {
        url: match[1]!,
        process: child,
        startLog: text,
        async kill(signal = "SIGTERM") {
          child.kill(signal);
          await child.exited;
        },
      };
    }
    const remaining = deadline - Date.now();
    const next = remaining > 0 ? await Promise.race([reader.read(), Bun.sleep(remaining).then(() => null)]) : null;
    if (!next || next.done) {
      child.kill("SIGKILL");
      throw new Error(`gateway did not start within ${NODE_READY_MS_MAX} ms:\n${text}`);
    }
    text += decoder.decode(next.value, { stream: true });
  }
}

/** The admin API of a node, as JSON (the test's own ADMIN_TOKEN). */
export function adminOf(node: { url: string }): (method: string, path: string, body?: unknown) => Promise<any> {
  return async (method, path, body) =>
    (
      await fetch(node.url + path, {
        method,
        headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
        body: body ? JSON.stringify(body) : undefined,
      })
    ).json();
}

/** An account with `amountToman` topped up and one key of it (concurrency_max 1,000), made through `node`. */
export async function fundedKey(node: { url: string }, name: string, amountToman = 1_000_000): Promise<{ accountId: string; key: string }> {
  const admin = adminOf(node);
  const account = await admin("POST", "/admin/accounts", { name });
  await admin("POST", `/admin/accounts/${account.id}/topups`, { amount_toman: amountToman, reference: `seed-${account.id}` });
  const { key } = await admin("POST", `/admin/accounts/${account.id}/keys`, { name: "k", concurrency_max: 1000 });
  return { accountId: account.id, key };
}

/**
 * Two gateway processes on a fresh database and the run's NATS, in front of a simulator of their
 * own; `stop` ends the processes and the simulator and drops the database and usage stream.
 */
export async function startTwoNodes(
  simOptions: Partial<SimOptions> = {},
  extraEnv: Record<string, string> = {},
): Promise<{
  sim: Simulator;
  nodes: GatewayProcess[];
  /** Their database, for a test that reads the ledger itself. */
  databaseUrl: string;
  stop: () => Promise<void>;
}> {
  const sim = await startSimulator(simOptions);
  const database = (await freshDatabase())!;
  const env = clusterEnv(database.url, sim, extraEnv);
  const nodes = [await spawnGateway(env), await spawnGateway(env)];
  const stop = async () => {
    for (const node of nodes) await node.kill("SIGKILL");
    await sim.stop();
    await database.drop();
    await dropUsageStream(env.DARVAZE_SUBJECT_PREFIX!);
  };
  return { sim, nodes, databaseUrl: database.url, stop };
}

/** Two nodes for the tests of one describe block: started before them, stopped after; their URLs once started. */
export function useTwoNodes(simOptions: Partial<SimOptions> = {}): { urls: () => [string, string] } {
  let started: Awaited<ReturnType<typeof startTwoNodes>> | undefined;
  beforeAll(async () => {
    started = await startTwoNodes(simOptions);
  }, SETUP_MS_MAX);
  afterAll(async () => {
    await started?.stop();
  }, SETUP_MS_MAX);
  return { urls: () => started!.nodes.map((n) => n.url) as [string, string] };
}
