import { afterAll, beforeAll, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import { migratedDb, SETUP_MS_MAX } from "../../test/helpers.ts";
import { loadCatalog } from "../catalog/catalog.ts";
import type { Db } from "../db/client.ts";
import { auditLedger } from "./audit.ts";
import { FENCE_ADMISSION_SLACK_MS, FENCE_GRACE_MS, fencedOut, raiseFence } from "./fence.ts";
import { closeHold, openHold } from "./holds.ts";
import { postUsageBatch, type UsageRecord } from "./usage.ts";
import { createAccount, getWallet, topUp } from "./wallets.ts";

let db: Db;
let close: (() => Promise<void>) | undefined;
beforeAll(async () => {
  ({ db, close } = await migratedDb());
  await loadCatalog(db);
}, SETUP_MS_MAX);
afterAll(async () => close?.(), SETUP_MS_MAX);

const usage = (requestId: string, accountId: string, holdId: string, fenceToken: bigint): UsageRecord => ({
  requestId,
  accountId,
  keyId: "key_f",
  holdId,
  model: "gpt-4o-mini",
  operation: "chat",
  backend: "sim",
  priceVersionId: 1,
  usage: { input: 10n, output: 10n },
  prices: { input: 5n, output: 5n },
  meteredMicro: 100n,
  billedMicro: 100n,
  status: 200,
  durationMs: 1,
  partition: 7,
  fenceToken,
});

test("a partition's fencing token only grows", async () => {
  expect(await raiseFence(db, 3, 10n, "node-a")).toBe(true);
  expect(await raiseFence(db, 3, 9n, "node-b")).toBe(false);
  expect(await raiseFence(db, 3, 10n, "node-b")).toBe(false);
  expect(await raiseFence(db, 3, 11n, "node-b")).toBe(true);
  const [row] = await db.rows<{ owner: string; fence: unknown }>(
    sql`SELECT owner, fence_token AS fence FROM key_partitions WHERE partition = 3`,
  );
  expect(row).toEqual({ owner: "node-b", fence: expect.anything() });
  expect(String(row!.fence)).toBe("11");
});

test("a record without its admission time (an older node's): the database refuses a stale fencing token past the grace, and the customer loses nothing", async () => {
  const accountId = await fundedHold("h_fence");
  expect(await raiseFence(db, 7, 10n, "node-a")).toBe(true);
  expect(await raiseFence(db, 7, 20n, "node-b")).toBe(true);
  await ageTakeover(7); // node-b took over from node-a longer ago than the grace

  // The current owner's settlement posts.
  expect(await postUsageBatch(db, [usage("r_current", accountId, "h_fence", 20n)])).toMatchObject({ written: 1, postedMicro: 100n });
  // node-c takes the partition. Within the grace, node-b's settlements (made before the takeover,
  // still in the usage pipeline) post; node-a's, whose run ended with node-b's takeover, do not.
  expect(await raiseFence(db, 7, 25n, "node-c")).toBe(true);
  expect(
    await postUsageBatch(db, [usage("r_grace", accountId, "h_fence", 20n), usage("r_older", accountId, "h_fence", 10n)]),
  ).toMatchObject({
    written: 2,
    postedMicro: 100n,
    writtenOffMicro: 100n,
  });
  // Past the grace, node-b is refused too, while node-c posts.
  await ageTakeover(7);
  expect(await postUsageBatch(db, [usage("r_stale", accountId, "h_fence", 20n), usage("r_new", accountId, "h_fence", 25n)])).toMatchObject({
    written: 2,
    postedMicro: 100n,
    writtenOffMicro: 100n,
  });
  const rows = await db.rows<{ request_id: string; billed: unknown }>(sql`
    SELECT request_id, billed_micro AS billed FROM usage_records WHERE hold_id = 'h_fence' ORDER BY request_id`);
  expect(rows.map((r) => [r.request_id, String(r.billed)])).toEqual([
    ["r_current", "100"],
    ["r_grace", "100"],
    ["r_new", "100"],
    ["r_older", "0"],
    ["r_stale", "0"],
  ]);
  // The refused charges stay in the hold and go back to the wallet when it closes.
  expect(await closeHold(db, "h_fence")).toBe(true);
  const wallet = await getWallet(db, accountId);
  expect(wallet).toMatchObject({ balanceMicro: 9_700n, heldMicro: 0n });
  expect((await auditLedger(db)).ok).toBe(true);
});

/** A hold of 1,000 micro-toman on a fresh wallet of 10,000. */
async function fundedHold(holdId: string): Promise<string> {
  const { id: accountId } = await createAccount(db, holdId);
  await topUp(db, accountId, 10_000n, `seed-${accountId}`);
  const opened = await openHold(db, {
    holdId,
    accountId,
    keyId: "key_f",
    label: "lease",
    minMicro: 1_000n,
    desiredMicro: 1_000n,
    ttlMs: 60_000,
  });
  expect(opened).toEqual({ opened: true, amountMicro: 1_000n });
  return accountId;
}

const onPartition = (record: UsageRecord, partition: number): UsageRecord => ({ ...record, partition });

test("a node that takes its own partition again keeps billing every token of its run, past the grace", async () => {
  const accountId = await fundedHold("h_own");
  // NATS crash loops: the one node's lease lapses twice and it claims the partition again each time.
  expect(await raiseFence(db, 11, 256n, "node-a")).toBe(true);
  expect(await raiseFence(db, 11, 646n, "node-a")).toBe(true);
  expect(await raiseFence(db, 11, 841n, "node-a")).toBe(true);
  await ageTakeover(11);
  const result = await postUsageBatch(db, [
    onPartition(usage("r_own_256", accountId, "h_own", 256n), 11),
    onPartition(usage("r_own_646", accountId, "h_own", 646n), 11),
    onPartition(usage("r_own_841", accountId, "h_own", 841n), 11),
  ]);
  expect(result).toEqual({ written: 3, postedMicro: 300n, writtenOffMicro: 0n });
  const [row] = await db.rows<{ since: unknown; previous: unknown }>(
    sql`SELECT owner_since_token AS since, previous_fence_token AS previous FROM key_partitions WHERE partition = 11`,
  );
  expect([String(row!.since), String(row!.previous)]).toEqual(["256", "0"]);
});

test("once another node has owned the partition in between, the first owner's older tokens are refused", async () => {
  const accountId = await fundedHold("h_between");
  expect(await raiseFence(db, 12, 100n, "node-a")).toBe(true);
  expect(await raiseFence(db, 12, 200n, "node-b")).toBe(true);
  await ageTakeover(12); // node-b's takeover is older than the grace
  expect(await raiseFence(db, 12, 300n, "node-a")).toBe(true);
  // node-a took it back from node-b: node-b's run (200) is within its grace, node-a's first run is not.
  expect(
    await postUsageBatch(db, [
      onPartition(usage("r_between_100", accountId, "h_between", 100n), 12),
      onPartition(usage("r_between_200", accountId, "h_between", 200n), 12),
      onPartition(usage("r_between_300", accountId, "h_between", 300n), 12),
    ]),
  ).toEqual({ written: 3, postedMicro: 200n, writtenOffMicro: 100n });
  const billed = await db.rows<{ request_id: string; billed: unknown }>(sql`
    SELECT request_id, billed_micro AS billed FROM usage_records WHERE hold_id = 'h_between' ORDER BY request_id`);
  expect(billed.map((r) => [r.request_id, String(r.billed)])).toEqual([
    ["r_between_100", "0"],
    ["r_between_200", "100"],
    ["r_between_300", "100"],
  ]);
});

test("a killed node's usage still posts within the grace, though its partition moved twice (to a survivor, then to its replacement)", async () => {
  const accountId = await fundedHold("h_twice");
  expect(await raiseFence(db, 13, 10n, "node-killed")).toBe(true);
  expect(await raiseFence(db, 13, 20n, "node-survivor")).toBe(true);
  expect(await raiseFence(db, 13, 30n, "node-replacement")).toBe(true);
  // Published before the kill, redelivered after the stream's ack wait: it arrives now.
  expect(await postUsageBatch(db, [onPartition(usage("r_twice_10", accountId, "h_twice", 10n), 13)])).toEqual({
    written: 1,
    postedMicro: 100n,
    writtenOffMicro: 0n,
  });
});

/** A partition's last takeover (`acquired_at`) or the one before (`previous_acquired_at`) plus `ms`, as a record's `admittedAt`. */
async function takeoverPlus(partition: number, ms: number, which: "acquired_at" | "previous_acquired_at" = "acquired_at"): Promise<string> {
  const [row] = await db.rows<{ at: string }>(
    sql`SELECT to_json(${sql.raw(which)} + make_interval(secs => ${ms / 1000}))#>>'{}' AS at FROM key_partitions WHERE partition = ${partition}`,
  );
  return new Date(row!.at).toISOString();
}

/** A partition's takeovers moved back by `seconds` (both of them), on the database's clock. */
async function moveTakeoversBack(partition: number, seconds: number): Promise<void> {
  await db.rows(sql`
    UPDATE key_partitions SET acquired_at = acquired_at - make_interval(secs => ${seconds}),
      previous_acquired_at = previous_acquired_at - make_interval(secs => ${seconds}) WHERE partition = ${partition}`);
}

test("a request admitted before its run ended posts however late its record arrives (a NATS crash loop moved the partition twice meanwhile)", async () => {
  const accountId = await fundedHold("h_late");
  // node-a's run (10), node-b takes over (20), node-c takes over (30).
  expect(await raiseFence(db, 15, 10n, "node-a")).toBe(true);
  expect(await raiseFence(db, 15, 20n, "node-b")).toBe(true);
  expect(await raiseFence(db, 15, 30n, "node-c")).toBe(true);
  // The records arrive ten minutes after both takeovers: far past any delivery grace.
  await moveTakeoversBack(15, 600);
  const admitted = async (requestId: string, token: bigint, admittedAt: Promise<string>) => ({
    ...onPartition(usage(requestId, accountId, "h_late", token), 15),
    admittedAt: await admittedAt,
  });
  expect(
    await postUsageBatch(db, [
      // node-a's, admitted a second before node-b took over; node-b's, within the slack after node-c did.
      await admitted("r_late_a", 10n, takeoverPlus(15, -1_000, "previous_acquired_at")),
      await admitted("r_late_b", 20n, takeoverPlus(15, FENCE_ADMISSION_SLACK_MS - 1_000)),
    ]),
  ).toEqual({ written: 2, postedMicro: 200n, writtenOffMicro: 0n });
});

test("work admitted under a run's token more than the slack after the run ended is refused, on either run", async () => {
  const accountId = await fundedHold("h_zombie");
  expect(await raiseFence(db, 16, 10n, "node-a")).toBe(true);
  expect(await raiseFence(db, 16, 20n, "node-b")).toBe(true);
  const admitted = async (requestId: string, token: bigint, admittedAt: Promise<string>) => ({
    ...onPartition(usage(requestId, accountId, "h_zombie", token), 16),
    admittedAt: await admittedAt,
  });
  // node-a's run ended at node-b's takeover.
  expect(
    await postUsageBatch(db, [
      await admitted("r_zombie_within", 10n, takeoverPlus(16, FENCE_ADMISSION_SLACK_MS - 1_000)),
      await admitted("r_zombie_past", 10n, takeoverPlus(16, FENCE_ADMISSION_SLACK_MS + 1_000)),
    ]),
  ).toEqual({ written: 2, postedMicro: 100n, writtenOffMicro: 100n });
  // node-c takes over: node-a's run is now older than the previous one, judged from node-b's takeover.
  expect(await raiseFence(db, 16, 30n, "node-c")).toBe(true);
  expect(
    await postUsageBatch(db, [
      await admitted("r_zombie_old", 10n, takeoverPlus(16, FENCE_ADMISSION_SLACK_MS + 1_000, "previous_acquired_at")),
      await admitted("r_zombie_b", 20n, takeoverPlus(16, FENCE_ADMISSION_SLACK_MS + 1_000)),
      await admitted("r_zombie_b_within", 20n, takeoverPlus(16, FENCE_ADMISSION_SLACK_MS - 1_000)),
    ]),
  ).toEqual({ written: 3, postedMicro: 100n, writtenOffMicro: 200n });
  const rows = await db.rows<{ request_id: string; billed: unknown }>(sql`
    SELECT request_id, billed_micro AS billed FROM usage_records WHERE hold_id = 'h_zombie' ORDER BY request_id`);
  expect(rows.map((r) => [r.request_id, String(r.billed)])).toEqual([
    ["r_zombie_b", "0"],
    ["r_zombie_b_within", "100"],
    ["r_zombie_old", "0"],
    ["r_zombie_past", "0"],
    ["r_zombie_within", "100"],
  ]);
});

/** Moves a partition's last takeover back past the grace, on the database's clock. */
test("a record billed before a takeover is not judged fenced by it afterwards; one refused by the ledger is", async () => {
  const accountId = await fundedHold("h_judged");
  const onPartition = (requestId: string, fenceToken: bigint) => ({
    ...usage(requestId, accountId, "h_judged", fenceToken),
    partition: 14,
  });
  expect(await raiseFence(db, 14, 10n, "node-a")).toBe(true);
  expect(await postUsageBatch(db, [onPartition("r_judged_before", 10n)])).toMatchObject({ written: 1, postedMicro: 100n });
  // node-b takes the partition longer ago than the grace; node-a's record was written before that.
  expect(await raiseFence(db, 14, 20n, "node-b")).toBe(true);
  await ageTakeover(14);
  await db.rows(sql`
    UPDATE usage_records SET created_at = (SELECT acquired_at FROM key_partitions WHERE partition = 14) - interval '1 second'
    WHERE request_id = 'r_judged_before'`);
  expect(await postUsageBatch(db, [onPartition("r_judged_after", 10n)])).toMatchObject({ written: 1, writtenOffMicro: 100n });
  const rows = await db.rows<{ request_id: string; billed: unknown; at_write: boolean; now: boolean }>(sql`
    SELECT u.request_id, u.billed_micro AS billed, ${fencedOut(sql`u.fence_token`, sql`u.admitted_at`, sql`u.created_at`)} AS at_write,
      ${fencedOut(sql`u.fence_token`, sql`u.admitted_at`)} AS now
    FROM usage_records u JOIN key_partitions kp ON kp.partition = u.partition
    WHERE u.hold_id = 'h_judged' ORDER BY u.request_id`);
  expect(rows.map((r) => [r.request_id, String(r.billed), r.at_write, r.now])).toEqual([
    ["r_judged_after", "0", true, true],
    ["r_judged_before", "100", false, true],
  ]);
});

async function ageTakeover(partition: number): Promise<void> {
  await db.rows(
    sql`UPDATE key_partitions SET acquired_at = now() - make_interval(secs => ${FENCE_GRACE_MS / 1000 + 1}) WHERE partition = ${partition}`,
  );
}
