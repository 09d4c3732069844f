import { afterAll, beforeAll, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import { migratedDb, SETUP_MS_MAX } from "../../test/helpers.ts";
import { usageRecord } from "../../test/usageRecords.ts";
import { loadCatalog } from "../catalog/catalog.ts";
import type { Db } from "../db/client.ts";
import { loadConfig } from "../config.ts";
import { isFailure } from "../errors.ts";
import { auditLedger } from "./audit.ts";
import { closeHold, expireHolds, HOLD_EXPIRY_GRACE_MS, openHold, renewHolds, shrinkHold } from "./holds.ts";
import { parseBatch, USAGE_ACK_WAIT_MS } from "./stream.ts";
import { postUsageBatch, type UsageRecord } from "./usage.ts";
import { ACCOUNT_VIEW_KEYS_MAX, adjust, createAccount, getWallet, showAccount, topUp } from "./wallets.ts";

let db: Db;
let close: (() => Promise<void>) | undefined;
beforeAll(async () => {
  ({ db, close } = await migratedDb());
  await loadCatalog(db);
}, SETUP_MS_MAX);
afterAll(async () => close?.(), SETUP_MS_MAX);

function record(requestId: string, holdId: string, accountId: string, billedMicro: bigint, meteredMicro = billedMicro): UsageRecord {
  return usageRecord({ requestId, holdId, accountId, billedMicro, meteredMicro });
}

async function funded(micro: bigint) {
  const account = await createAccount(db, "ledger");
  await topUp(db, account.id, micro, `seed-${account.id}`);
  return account.id;
}

const open = (accountId: string, holdId: string, min: bigint, desired: bigint, ttlMs = 60_000) =>
  openHold(db, { holdId, accountId, keyId: "key_t", label: "lease", minMicro: min, desiredMicro: desired, ttlMs });

test("a hold takes LEAST(desired, available), and none below the minimum", async () => {
  const accountId = await funded(1_000n);
  expect(await open(accountId, "l1", 100n, 600n)).toEqual({ opened: true, amountMicro: 600n });
  expect(await open(accountId, "l2", 100n, 600n)).toEqual({ opened: true, amountMicro: 400n });
  expect(await open(accountId, "l3", 1n, 600n)).toEqual({ opened: false, balanceMicro: 1_000n, heldMicro: 1_000n });
});

test("a request at zero prices (minimum 0) opens a hold on an empty wallet, at zero; one that costs anything does not", async () => {
  const { id: empty } = await createAccount(db, "empty");
  expect(await open(empty, "z1", 0n, 600n)).toEqual({ opened: true, amountMicro: 0n });
  expect(await open(empty, "z2", 1n, 600n)).toEqual({ opened: false, balanceMicro: 0n, heldMicro: 0n });
  // A funded wallet still leases what it has for such a request.
  const accountId = await funded(1_000n);
  expect(await open(accountId, "z3", 0n, 600n)).toEqual({ opened: true, amountMicro: 600n });
  await postUsageBatch(db, [record("z1-a", "z1", empty, 0n)]);
  expect(await closeHold(db, "z1")).toBe(true);
  expect(await getWallet(db, empty)).toEqual({ balanceMicro: 0n, heldMicro: 0n });
  expect((await auditLedger(db)).checks.filter((c) => !c.ok)).toEqual([]);
});

test("partial posts, once per request id; shrink and close release the rest", async () => {
  const accountId = await funded(1_000n);
  await open(accountId, "p1", 1n, 900n);
  const batch = [record("p1-a", "p1", accountId, 100n), record("p1-b", "p1", accountId, 50n, 80n), record("p1-a", "p1", accountId, 100n)];
  expect(await postUsageBatch(db, batch)).toEqual({ written: 2, postedMicro: 150n, writtenOffMicro: 30n });
  expect(await postUsageBatch(db, batch)).toEqual({ written: 0, postedMicro: 0n, writtenOffMicro: 0n });
  expect(await getWallet(db, accountId)).toEqual({ balanceMicro: 850n, heldMicro: 750n });
  expect(await shrinkHold(db, "p1", 800n)).toBe(false); // would cut below the 150 posted
  expect(await shrinkHold(db, "p1", 700n)).toBe(true);
  expect(await getWallet(db, accountId)).toEqual({ balanceMicro: 850n, heldMicro: 50n });
  expect(await closeHold(db, "p1")).toBe(true);
  expect(await closeHold(db, "p1")).toBe(false);
  expect(await getWallet(db, accountId)).toEqual({ balanceMicro: 850n, heldMicro: 0n });
  expect((await auditLedger(db)).ok).toBe(true);
});

test("a close that names what the lease charged waits until that much is posted", async () => {
  const accountId = await funded(1_000n);
  await open(accountId, "c1", 1n, 500n);
  expect(await closeHold(db, "c1", 120n)).toBe(false); // nothing posted yet: the hold stays
  await postUsageBatch(db, [record("c1-a", "c1", accountId, 100n)]);
  expect(await closeHold(db, "c1", 120n)).toBe(false); // one charge of two in
  await postUsageBatch(db, [record("c1-b", "c1", accountId, 20n)]);
  expect(await closeHold(db, "c1", 120n)).toBe(true);
  expect(await getWallet(db, accountId)).toEqual({ balanceMicro: 880n, heldMicro: 0n });
  expect((await auditLedger(db)).ok).toBe(true);
});

test("an expired hold takes no post: the usage is recorded, billed 0 and written off", async () => {
  const accountId = await funded(1_000n);
  await open(accountId, "e1", 1n, 500n);
  await db.rows(sql`UPDATE holds SET deadline = now() - interval '1 second' WHERE id = 'e1'`);
  expect(await expireHolds(db, { graceMs: 0 })).toBeGreaterThanOrEqual(1);
  expect(await getWallet(db, accountId)).toEqual({ balanceMicro: 1_000n, heldMicro: 0n });
  expect(await postUsageBatch(db, [record("e1-a", "e1", accountId, 200n)])).toEqual({ written: 1, postedMicro: 0n, writtenOffMicro: 200n });
  expect(await getWallet(db, accountId)).toEqual({ balanceMicro: 1_000n, heldMicro: 0n });
  const report = await auditLedger(db);
  expect(report.checks.filter((c) => !c.ok)).toEqual([]);
});

test("a hold ends by close or expiry only: past its deadline, within the expiry grace, it still takes its usage", async () => {
  const accountId = await funded(1_000n);
  await open(accountId, "g1", 1n, 500n);
  // The usage was served before the deadline and reaches the ledger late (a slow database, a redelivery).
  await db.rows(sql`UPDATE holds SET deadline = now() - interval '5 seconds' WHERE id = 'g1'`);
  expect(await expireHolds(db)).toBe(0);
  expect(await postUsageBatch(db, [record("g1-a", "g1", accountId, 200n)])).toEqual({ written: 1, postedMicro: 200n, writtenOffMicro: 0n });
  expect(await getWallet(db, accountId)).toEqual({ balanceMicro: 800n, heldMicro: 300n });
  // Past the grace its node is gone: the rest goes back to the wallet.
  await db.rows(sql`UPDATE holds SET deadline = now() - make_interval(secs => ${HOLD_EXPIRY_GRACE_MS / 1000 + 1}) WHERE id = 'g1'`);
  expect(await expireHolds(db)).toBe(1);
  expect(await getWallet(db, accountId)).toEqual({ balanceMicro: 800n, heldMicro: 0n });
  expect((await auditLedger(db)).checks.filter((c) => !c.ok)).toEqual([]);
});

test("a live node's renewal keeps its leases' holds from expiring; a closed hold is not renewed", async () => {
  const accountId = await funded(1_000n);
  await open(accountId, "n1", 1n, 300n, 2_000);
  await open(accountId, "n2", 1n, 300n, 2_000);
  await closeHold(db, "n2");
  expect(await renewHolds(db, ["n1", "n2"], 600_000)).toBe(1);
  const [row] = await db.rows<{ left_s: unknown }>(sql`SELECT extract(epoch FROM deadline - now()) AS left_s FROM holds WHERE id = 'n1'`);
  expect(Number(row!.left_s)).toBeGreaterThan(500);
  expect(await expireHolds(db, { graceMs: 0 })).toBe(0);
});

test("the expiry grace outlasts the usage stream's redelivery of a dead consumer's messages", () => {
  expect(HOLD_EXPIRY_GRACE_MS).toBeGreaterThan(USAGE_ACK_WAIT_MS);
  expect(loadConfig({ ADMIN_TOKEN: "a".repeat(16), KEY_PEPPER: "p".repeat(32) }).env.HOLD_EXPIRY_GRACE_MS).toBe(HOLD_EXPIRY_GRACE_MS);
});

test("adjustments credit and debit with a reason, never below the available balance", async () => {
  const accountId = await funded(1_000_000n);
  const down = await adjust(db, accountId, -400_000n, "refund reversal", "adj-1");
  expect(isFailure(down) ? down.code : down.wallet.balanceMicro).toBe(600_000n);
  const tooMuch = await adjust(db, accountId, -600_001n, "too much", "adj-2");
  expect(isFailure(tooMuch) ? tooMuch.param : null).toBe("amount_toman");
  const replay = await adjust(db, accountId, -400_000n, "refund reversal", "adj-1");
  expect(isFailure(replay) ? null : replay.credited).toBe(false);
  const conflict = await adjust(db, accountId, 5n, "other", "adj-1");
  expect(isFailure(conflict) ? conflict.code : null).toBe("idempotency_conflict");
  expect(await getWallet(db, accountId)).toEqual({ balanceMicro: 600_000n, heldMicro: 0n });
  expect((await auditLedger(db)).ok).toBe(true);
});

test("the audit finds a wallet that does not match its transfers", async () => {
  const accountId = await funded(10n);
  await db.rows(sql`UPDATE wallets SET balance_micro = balance_micro + 1 WHERE account_id = ${accountId}`);
  const report = await auditLedger(db);
  expect(report.ok).toBe(false);
  expect(report.checks.find((c) => c.name.startsWith("every wallet's balance"))!.violations[0]).toMatchObject({ account_id: accountId });
  await db.rows(sql`UPDATE wallets SET balance_micro = balance_micro - 1 WHERE account_id = ${accountId}`);
});

test("the audit finds a usage record metered at other than its units × prices", async () => {
  // A usage record of its own, so this test holds alone and in any order.
  const accountId = await funded(1_000n);
  await open(accountId, "m1", 1n, 500n);
  const requestId = "m1-a";
  expect((await postUsageBatch(db, [record(requestId, "m1", accountId, 100n)])).written).toBe(1);
  await db.rows(sql`UPDATE usage_records SET cache_read_units = 3, cache_read_price_per_1m = 2 WHERE request_id = ${requestId}`);
  const report = await auditLedger(db);
  expect(report.checks.find((c) => c.name.startsWith("every usage record is metered"))!.violations).toEqual([
    expect.objectContaining({ request_id: requestId }),
  ]);
  await db.rows(sql`UPDATE usage_records SET cache_read_units = 0, cache_read_price_per_1m = 0 WHERE request_id = ${requestId}`);
  expect((await auditLedger(db)).ok).toBe(true);
});

test("a record of the old shape (flat units and prices, still in the stream during an upgrade) posts, each unit in its columns", async () => {
  const accountId = await funded(1_000_000n);
  await open(accountId, "o1", 1n, 900_000n);
  const requestId = "o1-a";
  // As an older node appended it: every field as a column, bigints as strings.
  const old = {
    requestId,
    accountId,
    keyId: "key_t",
    holdId: "o1",
    model: "claude-sonnet-4",
    operation: "chat",
    backend: "sim",
    priceVersionId: 1,
    inputUnits: "21",
    outputUnits: "7",
    inputPricePer1m: "3",
    outputPricePer1m: "15",
    cacheReadUnits: "3000",
    cacheReadPricePer1m: "1",
    cacheWrite1hUnits: "10",
    cacheWrite1hPricePer1m: "6",
    hostedCallUnits: "2",
    hostedCallPricePer1m: "100",
    hostedCallUnit: "web_search_call",
    meteredMicro: String(21 * 3 + 7 * 15 + 3000 + 60 + 200),
    billedMicro: String(21 * 3 + 7 * 15 + 3000 + 60 + 200),
    status: 200,
    durationMs: 3,
  };
  const parsed = await parseBatch([old]);
  if ("invalid" in parsed) throw new Error(parsed.invalid);
  expect(parsed.records[0]!.usage).toEqual({ input: 21n, output: 7n, cache_read: 3000n, cache_write_1h: 10n, hosted_call: 2n });
  expect((await postUsageBatch(db, parsed.records)).postedMicro).toBe(3_428n);
  const [row] = await db.rows<Record<string, string | null>>(sql`
    SELECT input_units::text, cache_read_units::text, cache_read_price_per_1m::text, cache_write_units::text,
      cache_write_1h_units::text, cache_write_1h_price_per_1m::text, hosted_call_units::text, hosted_call_unit
    FROM usage_records WHERE request_id = ${requestId}`);
  expect(row).toEqual({
    input_units: "21",
    cache_read_units: "3000",
    cache_read_price_per_1m: "1",
    cache_write_units: "0",
    cache_write_1h_units: "10",
    cache_write_1h_price_per_1m: "6",
    hosted_call_units: "2",
    hosted_call_unit: "web_search_call",
  });
  expect((await auditLedger(db)).ok).toBe(true);
});

test("an account's view lists its first ACCOUNT_VIEW_KEYS_MAX keys and says there are more", async () => {
  const account = await createAccount(db, "many keys");
  const rows = Array.from(
    { length: ACCOUNT_VIEW_KEYS_MAX + 1 },
    (_, i) => sql`(${`key_view_${i}`}, ${account.id}, 'k', ${`hash_view_${account.id}_${i}`}, 'sk-…', 2)`,
  );
  await db.rows(sql`INSERT INTO api_keys (id, account_id, name, hash, display, concurrency_max) VALUES ${sql.join(rows, sql`, `)}`);
  const shown = await showAccount(db, account.id);
  expect([shown?.keys.length, shown?.keysMore]).toEqual([ACCOUNT_VIEW_KEYS_MAX, true]);
});
