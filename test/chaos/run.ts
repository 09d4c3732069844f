/**
 * The chaos suite (`bun run chaos`, `bun run chaos -- --quick` in CI): three gateway nodes on a
 * three-server NATS cluster (the shipped docs/nats/darvaze-cluster.conf, test/natsCluster.ts; the
 * usage stream and KV buckets on all three) and a PostgreSQL cluster of the suite's own (never
 * the shared services), under a mixed load (load.ts), while the suite in turn restarts NATS (all
 * three servers kill -9: NATS as a whole gone), restarts PostgreSQL,
 * kill -9s a node mid-stream, pauses a node (SIGSTOP) past its partition lease, adds 200 ms of
 * latency, then a stall and connection resets, between node 0 and the database (proxy.ts),
 * fills the usage stream past its limit while the database is away, crash-loops NATS (kill -9,
 * down 5 s, killed again 3 s after it returns; all three servers), kills one NATS server of the
 * three (the usage stream's leader) and starts it again, and cuts node 0 from the database for 10 s with
 * an idle key's lease open (the nodes' KEY_IDLE_MS is short: the fault checks in node 0's log that
 * the idle sweep failed to give the lease back during the cut, and in the ledger that it did after
 * it). After each fault (load stopped, the cluster given time to settle)
 * and at the end it checks:
 *
 *   the ledger audit passes; no hold is pending past its deadline (beyond the sweep);
 *   every request the simulator served is in usage_records (once: request ids are unique) or
 *   dead-lettered, except those a node's kill -9 lost within its bound (USAGE_FLUSH_MS), counted;
 *   none of their usage was written off (metered above billed), whatever the fault;
 *   the key's concurrency_max was never exceeded at the upstream; clients saw only documented
 *   errors; and at the end, each wallet's spend equals what its usage records billed.
 *
 * Exits 1 on any failed check. `--record` appends the figures to bench/RESULTS.md; `--only=0,2`
 * runs only those faults (by their place in FAULTS).
 */
import { appendFileSync, mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sql } from "drizzle-orm";
import { subjects } from "../../actors/subjects.ts";
import { PARTITION_LEASE_TTL_MS } from "../../actors/cluster/partitions.ts";
import { runGw } from "../../src/cli/gw.ts";
import { fencedOut } from "../../src/ledger/fence.ts";
import { HOLD_EXPIRY_GRACE_MS } from "../../src/ledger/holds.ts";
import { openPostgres, type Db } from "../../src/db/client.ts";
import { startSimulator, type Simulator } from "../../src/sim/server.ts";
import { ADMIN_TOKEN } from "../helpers.ts";
import { until, untilValue } from "../until.ts";
import {
  connectAsGateway,
  gatewayNatsEnv,
  type NatsCluster,
  pickVictim,
  startShippedNatsCluster,
  untilReplicasCurrent,
} from "../natsCluster.ts";
import { clusterEnv, spawnGateway, type GatewayProcess } from "../processes.ts";
import { Load, type LoadTarget } from "./load.ts";
import { FaultProxy } from "./proxy.ts";
import { OwnPostgres } from "./services.ts";

const QUICK = process.argv.includes("--quick");
const RECORD = process.argv.includes("--record");
const NODES = 3;
const WORKERS = QUICK ? 12 : 24;
/** Load around each fault: half before it, half after it healed. */
const PHASE_LOAD_MS = QUICK ? 3_000 : 10_000;
const CONCURRENCY_MAX = 8;
const USAGE_FLUSH_MS = 100;
/** Short, so that a killed node's leases expire within the run; long enough to outlast each fault. */
const LEASE_TTL_MS = 15_000;
const SWEEP_MS = 250;
/** The usage stream's limit during the run: small, so that the fault can fill it. */
const STREAM_MESSAGES_MAX = 200;
/** A kill -9's loss is bounded by USAGE_FLUSH_MS; this is scheduling slack on a busy 2-core machine. */
const KILL_SLACK_MS = 100;
/** How long the ledger may take to have every served request after a fault (republish waits 5 s). */
const CONVERGE_MS_MAX = 45_000;
/** A pending hold this far past its deadline and its expiry grace (HOLD_EXPIRY_GRACE_MS) was missed by the sweep. */
const HOLD_GRACE_MS = 2_000;
const DOWN_MS = 1_000;
/** Longest a fault may take to be applied and healed before the run fails. */
const FAULT_MS_MAX = 60_000;
const LATENCY_MS = 200;
/** The NATS crash loop: down this long, back this long, down again. */
const NATS_LOOP_DOWN_MS = 5_000;
const NATS_LOOP_UP_MS = 3_000;
/** Node 0 cut off from PostgreSQL (connections reset and refused) this long. */
const DB_CUT_MS = 10_000;
/** One server of the NATS cluster down this long, under load: the two left elect new stream leaders meanwhile. */
const MEMBER_DOWN_MS = 3_000;
/** The nodes' KEY_IDLE_MS: well inside the cut, so that the idle key's sweep meets the dead database. */
const KEY_IDLE_MS = 2_000;
/**
 * After the cut, the idle key's lease must be given back within this: its close waits until the
 * ledger has every record node 0 published (writer.posted()), so it comes once the backlog of the
 * cut has been posted, the bound the suite gives the ledger to converge.
 */
const IDLE_RETURN_MS_MAX = CONVERGE_MS_MAX;
const SEED_TOMAN = 10_000_000;
/** The idle key's account: enough for one lease of the minimum size (1,000 toman) and more. */
const IDLE_SEED_TOMAN = 10_000;

interface Cluster {
  pg: OwnPostgres;
  nats: NatsCluster;
  proxy: FaultProxy;
  sim: Simulator;
  db: Db;
  env: Record<string, string | undefined>;
  nodes: GatewayProcess[];
  targets: LoadTarget[];
  logs: string;
  /** The key of an account of its own that serves a request on node 0 before the database cut, then idles through it. */
  idleKey?: { key: string; id: string; accountId: string };
}

interface FaultResult {
  /** Date.now() at a node's kill -9: usage of requests ending after (bound − slack) may be lost. */
  killedAtMs?: number;
  /**
   * Upstream requests allowed above concurrency_max during the phase: the failover slack that
   * actors/key/capacity.ts names (a node cut off from the new owner keeps what it admitted, at
   * most its last grant, while the owner grants those slots again).
   */
  concurrencySlack?: number;
  /** What the fault itself found wrong (beside the checks every phase makes). */
  failures?: string[];
  /** Upstream requests of other keys the fault made itself: not counted against the load key's concurrency_max. */
  otherKeyRequestIds?: string[];
}

interface PhaseReport {
  fault: string;
  requests: number;
  kinds: Map<string, number>;
  served: number;
  recorded: number;
  lostInBound: number;
  concurrencyMax: number;
  /** What the phase allows: CONCURRENCY_MAX, plus the failover slack where the fault causes one. */
  concurrencyAllowed: number;
  /** Its served requests' usage metered but not charged, by reason. */
  writtenOff: string;
  failures: string[];
}

const log = (message: string) => process.stdout.write(`chaos: ${message}\n`);

async function startCluster(): Promise<Cluster> {
  const logs = mkdtempSync(join(tmpdir(), "darvaze-chaos-logs-"));
  process.env.DARVAZE_TEST_LOGS = logs;
  const [pg, nats, sim] = await Promise.all([OwnPostgres.start(), startShippedNatsCluster(), startSimulator({ itlMs: 2 })]);
  const proxy = FaultProxy.start(pg.port);
  const env = clusterEnv(pg.url, sim, {
    ...gatewayNatsEnv(nats),
    LEASE_TTL_MS: String(LEASE_TTL_MS),
    HOLD_SWEEP_INTERVAL_MS: String(SWEEP_MS),
    USAGE_FLUSH_MS: String(USAGE_FLUSH_MS),
    KEY_IDLE_MS: String(KEY_IDLE_MS),
    USAGE_STREAM_MESSAGES_MAX: String(STREAM_MESSAGES_MAX),
  });
  const cluster: Cluster = { pg, nats, proxy, sim, db: await openPostgres(pg.url), env, nodes: [], targets: [], logs };
  for (let i = 0; i < NODES; i++) await spawnNode(cluster, i);
  return cluster;
}

/** Node 0 reaches the database through the fault proxy; the others directly. */
async function spawnNode(c: Cluster, index: number): Promise<void> {
  const url = new URL(c.pg.url);
  if (index === 0) url.port = String(c.proxy.port);
  const node = await spawnGateway({ ...c.env, DATABASE_URL: url.toString() });
  c.nodes[index] = node;
  c.targets[index] = { url: node.url, faulted: false, out: false, streamsOpen: 0 };
}

async function admin(c: Cluster, method: string, path: string, body?: unknown): Promise<any> {
  const node = c.targets.find((t) => !t.out)!;
  const response = await fetch(node.url + path, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    body: body ? JSON.stringify(body) : undefined,
  });
  return response.json();
}

async function setUpKeys(
  c: Cluster,
): Promise<{ rich: string; poor: string; idle: { key: string; id: string; accountId: string }; accounts: string[] }> {
  const rich = await admin(c, "POST", "/admin/accounts", { name: "chaos-rich" });
  await admin(c, "POST", `/admin/accounts/${rich.id}/topups`, { amount_toman: SEED_TOMAN, reference: "chaos-seed" });
  const poor = await admin(c, "POST", "/admin/accounts", { name: "chaos-poor" });
  await admin(c, "POST", `/admin/accounts/${poor.id}/topups`, { amount_toman: "0.01", reference: "chaos-seed-poor" });
  const richKey = await admin(c, "POST", `/admin/accounts/${rich.id}/keys`, { name: "rich", concurrency_max: CONCURRENCY_MAX });
  const poorKey = await admin(c, "POST", `/admin/accounts/${poor.id}/keys`, { name: "poor" });
  // An account of its own: a node's leases are its account's, and the rich account stays in use through the cut.
  const idle = await admin(c, "POST", "/admin/accounts", { name: "chaos-idle" });
  await admin(c, "POST", `/admin/accounts/${idle.id}/topups`, { amount_toman: IDLE_SEED_TOMAN, reference: "chaos-seed-idle" });
  const idleKey = await admin(c, "POST", `/admin/accounts/${idle.id}/keys`, { name: "idle" });
  return {
    rich: richKey.key,
    poor: poorKey.key,
    idle: { key: idleKey.key as string, id: idleKey.id as string, accountId: idle.id as string },
    accounts: [rich.id, poor.id, idle.id],
  };
}

/** The faults, in turn; each heals itself before it returns. */
const FAULTS: { name: string; apply: (c: Cluster) => Promise<FaultResult> }[] = [
  {
    name: "NATS (all three servers) kill -9 and restart",
    async apply(c) {
      await natsDown(c);
      await Bun.sleep(DOWN_MS);
      await natsUp(c);
      return {};
    },
  },
  {
    name: "PostgreSQL restart",
    async apply(c) {
      await c.pg.kill("SIGINT");
      await Bun.sleep(DOWN_MS);
      await c.pg.start();
      return {};
    },
  },
  {
    name: "node kill -9 mid-stream",
    async apply(c) {
      const victim = 2;
      const target = c.targets[victim]!;
      // With no stream open after 5 s the kill still goes ahead: a node kill under load is the fault.
      await until(() => target.streamsOpen > 0, { msMax: 5_000, what: "a stream open on the victim" }).catch(() => {});
      target.faulted = true;
      target.out = true;
      const killedAtMs = Date.now();
      await c.nodes[victim]!.kill("SIGKILL");
      await Bun.sleep(DOWN_MS);
      await spawnNode(c, victim);
      return { killedAtMs };
    },
  },
  {
    name: "node paused (SIGSTOP) past its partition lease",
    async apply(c) {
      const paused = 1;
      const target = c.targets[paused]!;
      target.faulted = true;
      target.out = true;
      c.nodes[paused]!.process.kill("SIGSTOP");
      await Bun.sleep(PARTITION_LEASE_TTL_MS + 2_000);
      c.nodes[paused]!.process.kill("SIGCONT");
      await Bun.sleep(1_000);
      target.out = false;
      // Stopped, the node could not tell the new owner what it held: its requests in flight
      // upstream count beside the slots the owner granted again (at most its last grant).
      return { concurrencySlack: CONCURRENCY_MAX };
    },
  },
  {
    name: `${LATENCY_MS} ms latency between node 0 and the database`,
    async apply(c) {
      c.proxy.latencyMs = LATENCY_MS;
      await Bun.sleep(PHASE_LOAD_MS);
      c.proxy.latencyMs = 0;
      return {};
    },
  },
  {
    name: "database stall, then connection resets, for node 0",
    async apply(c) {
      c.proxy.stalled = true;
      await Bun.sleep(2_000);
      c.proxy.reset();
      c.proxy.stalled = false;
      await Bun.sleep(500);
      c.proxy.reset();
      return {};
    },
  },
  {
    name: "NATS crash loop (all three servers): kill -9, down 5 s, killed again 3 s after it returns",
    async apply(c) {
      await natsDown(c);
      await Bun.sleep(NATS_LOOP_DOWN_MS);
      await natsUp(c);
      await Bun.sleep(NATS_LOOP_UP_MS);
      await natsDown(c);
      await Bun.sleep(NATS_LOOP_DOWN_MS);
      await natsUp(c);
      return {};
    },
  },
  {
    name: `PostgreSQL cut for node 0 (${DB_CUT_MS / 1000} s) with an idle key's lease open`,
    async apply(c) {
      // A lease on node 0 that no request uses during the cut: its return (idle sweep, recall) meets the dead database.
      const reply = await fetch(`${c.targets[0]!.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${c.idleKey!.key}` },
        body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "idle soon" }], max_tokens: 8 }),
      });
      await reply.arrayBuffer();
      const idleRequestId = reply.headers.get("x-request-id");
      if (!reply.ok || !idleRequestId) throw new Error(`the idle key's request failed before the cut (${reply.status})`);
      const cutMs = Date.now();
      c.proxy.cut = true;
      await Bun.sleep(DB_CUT_MS);
      c.proxy.cut = false;
      const healedMs = Date.now();
      if (c.nodes[0]!.process.exitCode !== null) throw new Error(`node 0 exited (${c.nodes[0]!.process.exitCode}) during the database cut`);
      const failures: string[] = [];
      const swept = idleSweepFailures(c, c.idleKey!.accountId).filter((ms) => ms >= cutMs && ms <= healedMs);
      if (swept.length === 0) failures.push("no idle sweep of the idle key met the database during the cut");
      const holds = await idleHoldsSettled(c, c.idleKey!.accountId);
      if (holds !== "returned") {
        failures.push(
          `the idle key's lease was not given back after the cut (${holds}; ${await idleLeaseStory(c, c.idleKey!.accountId, healedMs)})`,
        );
      }
      return { failures, otherKeyRequestIds: [idleRequestId] };
    },
  },
  {
    name: "usage stream filled past its limit while the database is away",
    async apply(c) {
      await c.pg.kill("SIGINT");
      await Bun.sleep(DOWN_MS);
      const nc = await connectAsGateway(c.nats);
      const js = nc.jetstream();
      const subject = subjects(c.env.DARVAZE_SUBJECT_PREFIX!).usage;
      for (let i = 0; i < STREAM_MESSAGES_MAX * 2; i++) await js.publish(subject, "[]", { msgID: `filler-${crypto.randomUUID()}` });
      await nc.close();
      await c.pg.start();
      return {};
    },
  },
  {
    name: `one NATS server of three (the usage stream's leader) kill -9, down ${MEMBER_DOWN_MS / 1000} s, restarted`,
    async apply(c) {
      const watcher = await connectAsGateway(c.nats);
      try {
        const victim = await pickVictim(watcher, c.nats.members, []);
        await victim.kill("SIGKILL");
        await Bun.sleep(MEMBER_DOWN_MS);
        await victim.start();
        // Healed once the restarted server's copies of every stream and bucket are current again.
        await untilReplicasCurrent(watcher);
      } finally {
        await watcher.close();
      }
      return {};
    },
  },
];

/** kill -9 of every server of the NATS cluster: NATS as a whole is gone. */
async function natsDown(c: Cluster): Promise<void> {
  await Promise.all(c.nats.members.map((m) => m.kill("SIGKILL")));
}

/** Starts the cluster's stopped servers at once (one alone would wait for a JetStream quorum). */
async function natsUp(c: Cluster): Promise<void> {
  await Promise.all(c.nats.members.filter((m) => !m.running).map((m) => m.start()));
}

/** When node 0 logged a failed give-back (shrink or close) of the account's lease: the idle sweep meeting the dead database. */
function idleSweepFailures(c: Cluster, accountId: string): number[] {
  const text = readFileSync(join(c.logs, `node-${c.nodes[0]!.process.pid}.log`), "utf8");
  return text
    .split("\n")
    .filter((line) => line.includes('"event":"background_task_failed"') && line.includes(`"accountId":"${accountId}"`))
    .filter((line) => /"task":"lease_(shrink|close)"/.test(line))
    .map((line) => Date.parse(JSON.parse(line).t));
}

/** "returned" once every hold of the account was closed by its node (posted or voided), else what is left. */
async function idleHoldsSettled(c: Cluster, accountId: string): Promise<string> {
  const holds = async () => {
    const rows = await c.db.rows<{ status: string; n: unknown }>(
      sql`SELECT status, count(*) AS n FROM holds WHERE account_id = ${accountId} GROUP BY status`,
    );
    const left = rows.filter((r) => r.status === "pending" || r.status === "expired");
    if (rows.length > 0 && left.length === 0) return "returned";
    return rows.map((r) => `${Number(r.n)} ${r.status}`).join(", ") || "no hold";
  };
  const returned = {
    accept: (held: string) => held === "returned",
    msMax: IDLE_RETURN_MS_MAX,
    what: "the idle key's holds closed",
    pollMs: 200,
  };
  // What is left at the bound is the answer, which the run reports as a failure.
  return untilValue(holds, returned).catch(holds);
}

/** Log lines of node 0 this many are quoted in a failure, at most. */
const STORY_LINES_MAX = 6;

/**
 * What a failure of the idle key's lease says: its pending holds (amounts, deadline against the
 * heal) and node 0's last log lines about the account, so that a run on a busy machine that fails
 * can be read without the node logs it leaves behind.
 */
async function idleLeaseStory(c: Cluster, accountId: string, healedMs: number): Promise<string> {
  const holds = await c.db.rows<{ id: string; amount: unknown; posted: unknown; deadline_s: unknown }>(sql`
    SELECT id, amount_micro AS amount, posted_micro AS posted,
           extract(epoch FROM deadline) - ${healedMs / 1000} AS deadline_s
    FROM holds WHERE account_id = ${accountId} AND status = 'pending'`);
  const text = readFileSync(join(c.logs, `node-${c.nodes[0]!.process.pid}.log`), "utf8");
  const lines = text
    .split("\n")
    .filter((line) => line.includes(accountId) || holds.some((h) => line.includes(h.id)))
    .slice(-STORY_LINES_MAX)
    .map((line) => {
      const entry = JSON.parse(line) as { t: string; event: string; task?: string; error?: string };
      const atS = ((Date.parse(entry.t) - healedMs) / 1000).toFixed(1);
      return `${atS} s ${entry.task ?? entry.event}${entry.error ? `: ${entry.error.split("\n")[0]!.slice(0, 120)}` : ""}`;
    });
  const held = holds.map(
    (h) => `${h.id} amount ${h.amount} posted ${h.posted} deadline ${Number(h.deadline_s).toFixed(1)} s after the heal`,
  );
  return `${held.join(", ") || "no pending hold"}; node 0 on it, seconds from the heal: ${lines.join(" | ") || "nothing logged"}`;
}

/** The most requests the upstream served at once (a lower bound of the key's slots in use). */
/**
 * How late the simulator may log the end of a request the gateway aborted (a client that left):
 * it learns of the abort from its socket after the gateway has already freed the slot, and on a
 * loaded machine that takes a few event-loop turns. An aborted request counts as ended this much
 * earlier; any overlap longer than that is a real excess.
 */
const ABORT_NOTICE_MS_MAX = 50;

function upstreamConcurrency(entries: { startedAt: number; endedAt: number; aborted: boolean }[]): number {
  const events = entries
    .flatMap((e) => [
      { t: e.startedAt, d: 1 },
      { t: e.aborted ? Math.max(e.startedAt, e.endedAt - ABORT_NOTICE_MS_MAX) : e.endedAt, d: -1 },
    ])
    .sort((a, b) => a.t - b.t || a.d - b.d);
  let now = 0;
  let max = 0;
  for (const e of events) max = Math.max(max, (now += e.d));
  return max;
}

async function ledgerHas(db: Db): Promise<Set<string>> {
  const rows = await db.rows<{ request_id: string }>(
    sql`SELECT request_id FROM usage_records UNION ALL SELECT request_id FROM usage_dead_letters`,
  );
  return new Set(rows.map((r) => r.request_id));
}

/** Served requests the ledger lacks, once it has converged (or the wait ran out). */
async function missingAfterConverging<E extends { requestId: string | null }>(
  c: Cluster,
  served: E[],
): Promise<{ missing: E[]; recorded: number }> {
  const read = async () => {
    const has = await ledgerHas(c.db).catch(() => null);
    const missing = has ? served.filter((e) => !has.has(e.requestId!)) : served;
    return { missing, recorded: served.length - missing.length };
  };
  const converged = {
    accept: (r: { missing: E[] }) => r.missing.length === 0,
    msMax: CONVERGE_MS_MAX,
    what: "every served request in the ledger",
    pollMs: 500,
  };
  // What is missing at the bound is the answer, which the run reports as a failure.
  return untilValue(read, converged).catch(read);
}

/** `gw ledger audit` against a live node, as an operator runs it; then the holds past their deadline. */
async function checkLedger(c: Cluster, failures: string[]): Promise<void> {
  let printed = "";
  const capture = (text: string) => void (printed += `${text}\n`);
  const url = c.targets.find((t) => !t.out)!.url;
  const exit = await runGw(["ledger", "audit"], { GW_URL: url, ADMIN_TOKEN }, { out: capture, err: capture });
  if (exit !== 0) failures.push(`gw ledger audit exited ${exit}: ${printed.trim().split("\n").slice(-6).join(" / ")}`);
  const late = await c.db.rows<{ n: unknown }>(sql`
    SELECT count(*) AS n FROM holds WHERE status = 'pending' AND deadline < now() - make_interval(secs => ${(HOLD_EXPIRY_GRACE_MS + HOLD_GRACE_MS) / 1000})`);
  if (Number(late[0]!.n) > 0) failures.push(`${Number(late[0]!.n)} hold(s) pending past their deadline`);
}

async function runPhase(c: Cluster, load: Load, fault: (typeof FAULTS)[number], accounted: Set<string>): Promise<PhaseReport> {
  const before = new Map(load.kinds);
  const undocumentedBefore = load.undocumentedCount;
  const startedAtMs = Date.now();
  load.start(WORKERS);
  await Bun.sleep(PHASE_LOAD_MS / 2);
  log(`fault: ${fault.name}`);
  const result = await Promise.race([
    fault.apply(c),
    Bun.sleep(FAULT_MS_MAX).then(() => Promise.reject(new Error(`fault "${fault.name}" did not heal within ${FAULT_MS_MAX} ms`))),
  ]);
  for (const t of c.targets) t.faulted = t.out = false;
  await Bun.sleep(PHASE_LOAD_MS / 2);
  await load.stop();
  const failures: string[] = [...(result.failures ?? [])];
  const entries = c.sim.log.entries();
  const served = entries.filter((e) => e.status === 200 && e.requestId && !accounted.has(e.requestId));
  const { missing, recorded } = await missingAfterConverging(c, served);
  const boundMs = USAGE_FLUSH_MS + KILL_SLACK_MS;
  const inBound = result.killedAtMs === undefined ? [] : missing.filter((e) => e.endedAt >= result.killedAtMs! - boundMs);
  const lost = missing.filter((e) => !inBound.includes(e));
  if (lost.length > 0)
    failures.push(
      `${lost.length} served request(s) not in the ledger, e.g. ${lost
        .slice(0, 3)
        .map((e) => e.requestId)
        .join(", ")}`,
    );
  for (const e of served) accounted.add(e.requestId!);
  await checkLedger(c, failures);
  // The load's upstream requests are all the rich key's; a fault's own requests of other keys are not.
  const otherKeys = new Set(result.otherKeyRequestIds ?? []);
  const concurrencyMax = upstreamConcurrency(
    entries.filter((e) => e.startedAt >= startedAtMs && !(e.requestId && otherKeys.has(e.requestId))),
  );
  const concurrencyAllowed = CONCURRENCY_MAX + (result.concurrencySlack ?? 0);
  if (concurrencyMax > concurrencyAllowed)
    failures.push(
      `the key's concurrency_max ${CONCURRENCY_MAX} exceeded: ${concurrencyMax} at once upstream (allowed ${concurrencyAllowed})`,
    );
  const undocumented = load.undocumentedCount - undocumentedBefore;
  if (undocumented > 0) failures.push(`${undocumented} undocumented answer(s): ${load.undocumented.slice(-3).join(" | ")}`);
  const kinds = new Map([...load.kinds].map(([k, n]) => [k, n - (before.get(k) ?? 0)] as [string, number]).filter(([, n]) => n > 0));
  const requests = [...kinds.values()].reduce((a, b) => a + b, 0);
  const { reasons, micro } = await writeOffs(
    c,
    served.map((e) => e.requestId!),
  );
  if (micro > 0n)
    failures.push(
      `${micro} micro-toman of served usage written off (${reasons})${await fencedDetail(
        c,
        served.map((e) => e.requestId!),
      )}`,
    );
  return {
    fault: fault.name,
    requests,
    kinds,
    served: served.length,
    recorded,
    lostInBound: inBound.length,
    concurrencyMax,
    concurrencyAllowed,
    writtenOff: reasons,
    failures,
  };
}

/** Each wallet's spend (seed − balance) against what its usage records billed: zero difference. */
async function moneyDifference(c: Cluster, accounts: string[]): Promise<bigint> {
  const rows = await c.db.rows<{ account_id: string; topped: unknown; balance: unknown; billed: unknown }>(sql`
    SELECT w.account_id, w.balance_micro AS balance,
      (SELECT coalesce(sum(amount_micro), 0) FROM ledger_transfers t WHERE t.credit_account = 'wallet:' || w.account_id AND t.kind = 'topup') AS topped,
      (SELECT coalesce(sum(billed_micro), 0) FROM usage_records u WHERE u.account_id = w.account_id) AS billed
    FROM wallets w WHERE w.account_id IN (SELECT jsonb_array_elements_text(${JSON.stringify(accounts)}::jsonb))`);
  let difference = 0n;
  for (const r of rows) difference += BigInt(String(r.topped)) - BigInt(String(r.balance)) - BigInt(String(r.billed));
  return difference;
}

/** `usage_republished` lines in the nodes' logs: records the stream lost or dropped, published again. */
function republishedRecords(logs: string): number {
  let records = 0;
  for (const file of readdirSync(logs)) {
    for (const line of readFileSync(join(logs, file), "utf8").split("\n")) {
      if (line.includes('"event":"usage_republished"')) records += Number(/"records":(\d+)/.exec(line)?.[1] ?? 0);
    }
  }
  return records;
}

/**
 * Usage metered but not charged, by reason: posted after its lease's hold had expired or was
 * closed (billed 0, hold no longer pending), settled by a deposed partition owner (billed 0, and
 * the fencing rule refuses its token at the time it was written: a takeover after that does not
 * count), or beyond what the reserve and wallet covered (billed in part).
 */
async function writeOffs(c: Cluster, requestIds?: string[]): Promise<{ reasons: string; micro: bigint; deadLetters: number }> {
  const only = requestIds ? sql`AND u.request_id IN (SELECT jsonb_array_elements_text(${JSON.stringify(requestIds)}::jsonb))` : sql``;
  const rows = await c.db.rows<{ reason: string; n: unknown; micro: unknown }>(sql`
    SELECT CASE WHEN u.billed_micro > 0 THEN 'beyond the reserve'
                WHEN h.status = 'expired' THEN 'hold expired first'
                WHEN u.fence_token IS NOT NULL AND ${fencedOut(sql`u.fence_token`, sql`u.admitted_at`, sql`u.created_at`)} THEN 'fenced (deposed owner)'
                ELSE 'hold closed first' END AS reason,
      count(*) AS n, sum(u.metered_micro - u.billed_micro) AS micro
    FROM usage_records u JOIN holds h ON h.id = u.hold_id LEFT JOIN key_partitions kp ON kp.partition = u.partition
    WHERE u.metered_micro > u.billed_micro ${only} GROUP BY 1 ORDER BY 1`);
  const [d] = await c.db.rows<{ n: unknown }>(sql`SELECT count(*) AS n FROM usage_dead_letters`);
  const reasons = rows.map((r) => `${r.reason}: ${Number(r.n)} (${String(r.micro)} micro-toman)`).join(", ") || "none";
  const micro = rows.reduce((sum, r) => sum + BigInt(String(r.micro)), 0n);
  return { reasons, micro, deadLetters: Number(d!.n) };
}

/** Fenced records' tokens against their partition's row, and how late they were posted after its takeovers: what to look at when the fence refused served usage. */
async function fencedDetail(c: Cluster, requestIds: string[]): Promise<string> {
  const rows = await c.db.rows<Record<string, unknown>>(sql`
    SELECT u.partition, u.fence_token AS token, kp.previous_fence_token AS previous, kp.owner_since_token AS since, kp.fence_token AS now,
      round(extract(epoch FROM u.created_at - kp.acquired_at) * 1000) AS after_takeover_ms,
      round(extract(epoch FROM u.created_at - kp.previous_acquired_at) * 1000) AS after_previous_ms
    FROM usage_records u JOIN holds h ON h.id = u.hold_id JOIN key_partitions kp ON kp.partition = u.partition
    WHERE u.metered_micro > u.billed_micro AND u.billed_micro = 0 AND h.status <> 'expired'
      AND u.fence_token IS NOT NULL AND ${fencedOut(sql`u.fence_token`, sql`u.admitted_at`, sql`u.created_at`)}
      AND u.request_id IN (SELECT jsonb_array_elements_text(${JSON.stringify(requestIds)}::jsonb))
    LIMIT 5`);
  return rows.length === 0 ? "" : `; fenced, e.g.: ${rows.map((r) => JSON.stringify(r)).join(" ")}`;
}

function report(
  phases: PhaseReport[],
  totals: { difference: bigint; republished: number; writeOff: Awaited<ReturnType<typeof writeOffs>>; final: string[]; seconds: number },
): string {
  const kinds = new Map<string, number>();
  for (const p of phases) for (const [k, n] of p.kinds) kinds.set(k, (kinds.get(k) ?? 0) + n);
  const failed = phases.reduce((n, p) => n + p.failures.length, 0) + totals.final.length;
  const lines = [
    `## ${new Date().toISOString().slice(0, 16).replace("T", " ")} UTC · chaos${QUICK ? " · quick" : ""}`,
    "",
    `- Command: \`bun run chaos${QUICK ? " -- --quick" : ""}\` (${totals.seconds} s; ${NODES} nodes, ${WORKERS} clients, own three-server NATS cluster and PostgreSQL)`,
    `- Result: ${failed === 0 ? "every check passed" : `${failed} check(s) FAILED`}; money difference ${totals.difference} micro-toman; ` +
      `${totals.republished} usage record(s) published again by their nodes; ${totals.writeOff.deadLetters} dead-lettered`,
    `- Written off (metered, not charged), by reason: ${totals.writeOff.reasons}`,
    "",
    "| Fault | Requests | Served upstream | In the ledger | Lost in kill bound | Written off | Upstream concurrency max | Checks |",
    "|---|---:|---:|---:|---:|---|---:|---|",
    ...phases.map(
      (p) =>
        `| ${p.fault} | ${p.requests} | ${p.served} | ${p.recorded} | ${p.lostInBound} | ${p.writtenOff} | ${p.concurrencyMax} / ${p.concurrencyAllowed === CONCURRENCY_MAX ? CONCURRENCY_MAX : `${CONCURRENCY_MAX} + ${p.concurrencyAllowed - CONCURRENCY_MAX} failover slack`} | ${p.failures.length === 0 ? "ok" : p.failures.join("; ")} |`,
    ),
    "",
    `Answers by kind: ${[...kinds]
      .sort((a, b) => b[1] - a[1])
      .map(([k, n]) => `${k} ${n}`)
      .join(", ")}`,
    ...(totals.final.length > 0 ? ["", `Final checks failed: ${totals.final.join("; ")}`] : []),
    "",
  ];
  return lines.join("\n");
}

async function main(): Promise<number> {
  const startedMs = performance.now();
  const c = await startCluster();
  log(`cluster up: ${c.targets.map((t) => t.url).join(" ")}; PostgreSQL :${c.pg.port}, NATS ${c.nats.url}, node logs in ${c.logs}`);
  try {
    const keys = await setUpKeys(c);
    c.idleKey = keys.idle;
    const load = new Load(c.targets, keys);
    const accounted = new Set<string>();
    const phases: PhaseReport[] = [];
    const only = /--only=([\d,]+)/.exec(process.argv.join(" "))?.[1]?.split(",").map(Number);
    for (const fault of FAULTS.filter((_, i) => !only || only.includes(i))) {
      const phase = await runPhase(c, load, fault, accounted).finally(() => load.stop());
      log(
        `${phase.fault}: ${phase.requests} requests, ${phase.served} served, ${phase.failures.length === 0 ? "ok" : phase.failures.join("; ")}`,
      );
      phases.push(phase);
    }
    await Bun.sleep(LEASE_TTL_MS + HOLD_EXPIRY_GRACE_MS + SWEEP_MS * 4); // every lease of the run past its deadline and grace
    const final: string[] = [];
    await checkLedger(c, final);
    const difference = await moneyDifference(c, keys.accounts);
    if (difference !== 0n) final.push(`money difference ${difference} micro-toman`);
    const text = report(phases, {
      difference,
      republished: republishedRecords(c.logs),
      writeOff: await writeOffs(c),
      final,
      seconds: Math.round((performance.now() - startedMs) / 1000),
    });
    process.stdout.write(`\n${text}\n`);
    if (RECORD) appendFileSync(join(import.meta.dir, "..", "..", "bench", "RESULTS.md"), `\n${text}`);
    return phases.some((p) => p.failures.length > 0) || final.length > 0 ? 1 : 0;
  } finally {
    for (const node of c.nodes) await node.kill("SIGKILL").catch(() => {});
    c.proxy.stop();
    await c.db.close();
    await c.sim.stop();
    await c.nats.stop();
    await c.pg.stop();
  }
}

process.exit(await main());
