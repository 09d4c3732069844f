import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import { migratedDb, SETUP_MS_MAX } from "../../test/helpers.ts";
import { usageRecord } from "../../test/usageRecords.ts";
import { sqlStateOf, type Db } from "../db/client.ts";
import { auditLedger } from "./audit.ts";
import { sqlReason } from "../db/client.ts";
import { deadLetterRecords, isPoison, postOrDeadLetter, replayDeadLetter } from "./deadletter.ts";
import { openHold } from "./holds.ts";
import { createAccount, getWallet, topUp } from "./wallets.ts";

/** An error as drizzle throws it: "Failed query … params: …", the driver's error as its cause. */
const drizzleError = (code: string, message: string) =>
  Object.assign(new Error(`Failed query: INSERT INTO usage_records …\nparams: [{"requestId":"req_1","accountId":"acct_1"}]`), {
    cause: Object.assign(new Error(message), { code }),
  });

test("only data and constraint errors (SQLSTATE classes 22 and 23) are poison", () => {
  for (const code of ["22003", "22P05", "22021", "23514", "23505", "23502"]) expect(isPoison(drizzleError(code, "refused"))).toBe(true);
  for (const code of ["40001", "40P01", "08006", "57P01", "53300", "42P01", "XX000"])
    expect(isPoison(drizzleError(code, "failed"))).toBe(false);
  // Connection errors carry errno names, not SQLSTATEs.
  expect(isPoison(Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }))).toBe(false);
  expect(isPoison(Object.assign(new Error("write CONNECTION_CLOSED"), { code: "CONNECTION_CLOSED" }))).toBe(false);
  expect(isPoison(new Error("timeout"))).toBe(false);
  expect(sqlStateOf(drizzleError("23514", "x"))).toBe("23514");
});

test("a reason is the database's words, without the batch drizzle puts in its message", () => {
  const reason = sqlReason(
    drizzleError("23514", 'new row for relation "usage_records" violates check constraint "usage_records_billed_within_metered"'),
  );
  expect(reason).toBe('23514: new row for relation "usage_records" violates check constraint "usage_records_billed_within_metered"');
  expect(sqlReason(new Error("Failed query: SELECT 1\nparams: secret"))).toBe("Failed query: SELECT 1");
});

describe("on a database", () => {
  let db: Db;
  let close: (() => Promise<void>) | undefined;
  beforeAll(async () => ({ db, close } = await migratedDb()), SETUP_MS_MAX);
  afterAll(async () => close?.(), SETUP_MS_MAX);

  test("a dead-lettered record is not billed by a redelivery, only by its replay, once", async () => {
    const account = await createAccount(db, "dead letters");
    await topUp(db, account.id, 1_000n, `seed-${account.id}`);
    expect(
      (
        await openHold(db, {
          holdId: `h_${account.id}`,
          accountId: account.id,
          keyId: "key_t",
          label: "lease",
          minMicro: 1n,
          desiredMicro: 500n,
          ttlMs: 60_000,
        })
      ).opened,
    ).toBe(true);
    const record = usageRecord({ requestId: `req_${account.id}`, accountId: account.id, holdId: `h_${account.id}`, billedMicro: 40n });
    const [letter] = await deadLetterRecords(db, [record], { reason: "delivered 10 times", sqlState: null, source: "deliveries" });
    expect(letter).toMatchObject({ requestId: record.requestId, writtenOffMicro: 40n });
    // Dead-lettering again (another delivery) changes nothing.
    expect(await deadLetterRecords(db, [record], { reason: "again", sqlState: null, source: "deliveries" })).toEqual([]);
    // A redelivery of the same record posts nothing: the write-off stands until the replay.
    expect(await postOrDeadLetter(db, [record], { source: "consumer" })).toEqual({ written: 0, deadLetters: [] });
    expect((await auditLedger(db)).ok).toBe(true);
    const [row] = await db.rows<{ id: string }>(sql`SELECT id::text AS id FROM usage_dead_letters WHERE request_id = ${record.requestId}`);
    expect(await replayDeadLetter(db, BigInt(row!.id))).toEqual({ outcome: "replayed", written: 1, postedMicro: 40n, writtenOffMicro: 0n });
    expect(await replayDeadLetter(db, BigInt(row!.id))).toEqual({ outcome: "already_replayed" });
    expect(await replayDeadLetter(db, 999_999_999n)).toEqual({ outcome: "not_found" });
    expect((await getWallet(db, account.id))?.balanceMicro).toBe(960n);
    const audit = await auditLedger(db);
    expect(audit.checks.filter((c) => !c.ok)).toEqual([]);
    expect(audit.dead_letters.awaiting_replay).toBe(0);
  });
});
