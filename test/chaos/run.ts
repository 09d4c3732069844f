/**
 * The chaos suite (`bun run chaos`, `bun run chaos -- --quick` in CI): three gateway nodes on a
 * nats-server and a PostgreSQL cluster of the suite's own (never the shared services), under a
 * mixed load (load.ts), while the suite in turn restarts NATS (kill -9), restarts PostgreSQL,
 * kill -9s a node mid-stream, pauses a node (SIGSTOP) past its partition lease, adds 200 ms of
 * latency, then a stall and connection resets, between node 0 and the database (proxy.ts), and
 * fills the usage stream past its limit while the database is away. After each fault (load
 * stopped, the cluster given time to settle) and at the end it checks:
 *
 *   the ledger audit passes; no hold is pending past its deadline (beyond the sweep);
 *   every request the simulator served is in usage_records (once: request ids are unique) or
 *   dead-lettered, except those a node's kill -9 lost within its bound (USAGE_FLUSH_MS), counted;
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
import { connect } from "nats";
import { subjects } from "../../actors/subjects.ts";
import { PARTITION_LEASE_TTL_MS } from "../../actors/cluster/partitions.ts";
import { runGw } from "../../src/cli/gw.ts";
import { openPostgres, type Db } from "../../src/db/client.ts";
import { startSimulator, type Simulator } from "../../src/sim/server.ts";
import { ADMIN_TOKEN } from "../helpers.ts";
import { clusterEnv, spawnGateway, type GatewayProcess } from "../processes.ts";
import { Load, type LoadTarget } from "./load.ts";
import { FaultProxy } from "./proxy.ts";
import { OwnNats, OwnPostgres } from "./services.ts";

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
/** A pending hold this far past its deadline was missed by the sweep. */
const HOLD_GRACE_MS = 2_000;
const DOWN_MS = 1_000;
/** Longest a fault may take to be applied and healed before the run fails. */
const FAULT_MS_MAX = 60_000;
const LATENCY_MS = 200;
const SEED_TOMAN = 10_000_000;

interface Cluster {
  pg: OwnPostgres;
  nats: OwnNats;
  proxy: FaultProxy;
  sim: Simulator;
  db: Db;
  env: Record<string, string | undefined>;
  nodes: GatewayProcess[];
  targets: LoadTarget[];
  logs: string;
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
  const [pg, nats, sim] = await Promise.all([OwnPostgres.start(), OwnNats.start(), startSimulator({ itlMs: 2 })]);
  const proxy = FaultProxy.start(pg.port);
  const env = clusterEnv(pg.url, sim, {
    NATS_URL: nats.url,
    LEASE_TTL_MS: String(LEASE_TTL_MS),
    HOLD_SWEEP_INTERVAL_MS: String(SWEEP_MS),
    USAGE_FLUSH_MS: String(USAGE_FLUSH_MS),
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

async function setUpKeys(c: Cluster): Promise<{ rich: string; poor: string; accounts: string[] }> {
  const rich = await admin(c, "POST", "/admin/accounts", { name: "chaos-rich" });
  await admin(c, "POST", `/admin/accounts/${rich.id}/topups`, { amount_toman: SEED_TOMAN, reference: "chaos-seed" });
  const poor = await admin(c, "POST", "/admin/accounts", { name: "chaos-poor" });
  await admin(c, "POST", `/admin/accounts/${poor.id}/topups`, { amount_toman: "0.01", reference: "chaos-seed-poor" });
  const richKey = await admin(c, "POST", `/admin/accounts/${rich.id}/keys`, { name: "rich", concurrency_max: CONCURRENCY_MAX });
  const poorKey = await admin(c, "POST", `/admin/accounts/${poor.id}/keys`, { name: "poor" });
  return { rich: richKey.key, poor: poorKey.key, accounts: [rich.id, poor.id] };
}

/** The faults, in turn; each heals itself before it returns. */
const FAULTS: { name: string; apply: (c: Cluster) => Promise<FaultResult> }[] = [
  {
    name: "NATS kill -9 and restart",
    async apply(c) {
      await c.nats.kill("SIGKILL");
      await Bun.sleep(DOWN_MS);
      await c.nats.start();
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
      await until(() => target.streamsOpen > 0, 5_000);
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
    name: "usage stream filled past its limit while the database is away",
    async apply(c) {
      await c.pg.kill("SIGINT");
      await Bun.sleep(DOWN_MS);
      const nc = await connect({ servers: c.nats.url });
      const js = nc.jetstream();
      const subject = subjects(c.env.DARVAZE_SUBJECT_PREFIX!).usage;
      for (let i = 0; i < STREAM_MESSAGES_MAX * 2; i++) await js.publish(subject, "[]", { msgID: `filler-${crypto.randomUUID()}` });
      await nc.close();
      await c.pg.start();
      return {};
    },
  },
];

async function until(ready: () => boolean, waitMsMax: number): Promise<void> {
  const deadline = performance.now() + waitMsMax;
  while (!ready() && performance.now() < deadline) await Bun.sleep(10);
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
  const deadline = performance.now() + CONVERGE_MS_MAX;
  for (;;) {
    const has = await ledgerHas(c.db).catch(() => null);
    const missing = has ? served.filter((e) => !has.has(e.requestId!)) : served;
    if (missing.length === 0 || performance.now() > deadline) return { missing, recorded: served.length - missing.length };
    await Bun.sleep(500);
  }
}

/** `gw ledger audit` against a live node, as an operator runs it; then the holds past their deadline. */
async function checkLedger(c: Cluster, failures: string[]): Promise<void> {
  let printed = "";
  const capture = (text: string) => void (printed += `${text}\n`);
  const url = c.targets.find((t) => !t.out)!.url;
  const exit = await runGw(["ledger", "audit"], { GW_URL: url, ADMIN_TOKEN }, { out: capture, err: capture });
  if (exit !== 0) failures.push(`gw ledger audit exited ${exit}: ${printed.trim().split("\n").slice(-6).join(" / ")}`);
  const late = await c.db.rows<{ n: unknown }>(sql`
    SELECT count(*) AS n FROM holds WHERE status = 'pending' AND deadline < now() - make_interval(secs => ${HOLD_GRACE_MS / 1000})`);
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
  const failures: string[] = [];
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
  const concurrencyMax = upstreamConcurrency(entries.filter((e) => e.startedAt >= startedAtMs));
  const concurrencyAllowed = CONCURRENCY_MAX + (result.concurrencySlack ?? 0);
  if (concurrencyMax > concurrencyAllowed)
    failures.push(
      `the key's concurrency_max ${CONCURRENCY_MAX} exceeded: ${concurrencyMax} at once upstream (allowed ${concurrencyAllowed})`,
    );
  const undocumented = load.undocumentedCount - undocumentedBefore;
  if (undocumented > 0) failures.push(`${undocumented} undocumented answer(s): ${load.undocumented.slice(-3).join(" | ")}`);
  const kinds = new Map([...load.kinds].map(([k, n]) => [k, n - (before.get(k) ?? 0)] as [string, number]).filter(([, n]) => n > 0));
  const requests = [...kinds.values()].reduce((a, b) => a + b, 0);
  const { reasons } = await writeOffs(
    c,
    served.map((e) => e.requestId!),
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
 * closed (billed 0, hold no longer pending), settled by a deposed partition owner (billed 0 on a
 * live hold: fenced), or beyond what the reserve and wallet covered (billed in part).
 */
async function writeOffs(c: Cluster, requestIds?: string[]): Promise<{ reasons: string; deadLetters: number }> {
  const only = requestIds ? sql`AND u.request_id IN (SELECT jsonb_array_elements_text(${JSON.stringify(requestIds)}::jsonb))` : sql``;
  const rows = await c.db.rows<{ reason: string; n: unknown; micro: unknown }>(sql`
    SELECT CASE WHEN u.billed_micro > 0 THEN 'beyond the reserve'
                WHEN h.status = 'expired' THEN 'hold expired first'
                WHEN u.fence_token IS NOT NULL AND u.fence_token < kp.fence_token THEN 'fenced (deposed owner)'
                ELSE 'hold closed first' END AS reason,
      count(*) AS n, sum(u.metered_micro - u.billed_micro) AS micro
    FROM usage_records u JOIN holds h ON h.id = u.hold_id LEFT JOIN key_partitions kp ON kp.partition = u.partition
    WHERE u.metered_micro > u.billed_micro ${only} GROUP BY 1 ORDER BY 1`);
  const [d] = await c.db.rows<{ n: unknown }>(sql`SELECT count(*) AS n FROM usage_dead_letters`);
  const reasons = rows.map((r) => `${r.reason}: ${Number(r.n)} (${String(r.micro)} micro-toman)`).join(", ") || "none";
  return { reasons, deadLetters: Number(d!.n) };
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
    `- Command: \`bun run chaos${QUICK ? " -- --quick" : ""}\` (${totals.seconds} s; ${NODES} nodes, ${WORKERS} clients, own nats-server and PostgreSQL)`,
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
  log(`cluster up: ${c.targets.map((t) => t.url).join(" ")}; PostgreSQL :${c.pg.port}, NATS :${c.nats.port}, node logs in ${c.logs}`);
  try {
    const keys = await setUpKeys(c);
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
    await Bun.sleep(LEASE_TTL_MS + SWEEP_MS * 4); // every lease of the run past its deadline
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
