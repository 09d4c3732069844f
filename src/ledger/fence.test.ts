import { afterAll, beforeAll, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import { migratedDb, SETUP_MS_MAX } from "../../test/helpers.ts";
import { loadCatalog } from "../catalog/catalog.ts";
import type { Db } from "../db/client.ts";
import { auditLedger } from "./audit.ts";
import { FENCE_GRACE_MS, raiseFence } from "./fence.ts";
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
  inputUnits: 10n,
  outputUnits: 10n,
  inputPricePer1m: 5n,
  outputPricePer1m: 5n,
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

test("the database refuses a settlement carrying a stale fencing token, and the customer loses nothing", async () => {
  const { id: accountId } = await createAccount(db, "fence");
  await topUp(db, accountId, 10_000n, `seed-${accountId}`);
  expect(
    await openHold(db, {
      holdId: "h_fence",
      accountId,
      keyId: "key_f",
      label: "lease",
      minMicro: 1_000n,
      desiredMicro: 1_000n,
      ttlMs: 60_000,
    }),
  ).toEqual({ opened: true, amountMicro: 1_000n });
  expect(await raiseFence(db, 7, 10n, "node-a")).toBe(true);
  expect(await raiseFence(db, 7, 20n, "node-b")).toBe(true);

  // The current owner's settlement posts.
  expect(await postUsageBatch(db, [usage("r_current", accountId, "h_fence", 20n)])).toMatchObject({ written: 1, postedMicro: 100n });
  // node-c takes the partition. Within the grace, node-b's settlements (made before the takeover,
  // still in the usage pipeline) post; node-a's, two tenures old, do not.
  expect(await raiseFence(db, 7, 25n, "node-c")).toBe(true);
  expect(
    await postUsageBatch(db, [usage("r_grace", accountId, "h_fence", 20n), usage("r_older", accountId, "h_fence", 10n)]),
  ).toMatchObject({
    written: 2,
    postedMicro: 100n,
    writtenOffMicro: 100n,
  });
  // Past the grace, node-b is refused too, while node-c posts.
  await db.rows(
    sql`UPDATE key_partitions SET acquired_at = now() - make_interval(secs => ${FENCE_GRACE_MS / 1000 + 1}) WHERE partition = 7`,
  );
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
