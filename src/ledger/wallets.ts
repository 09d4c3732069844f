/**
 * Accounts, wallets and top-ups. A top-up is a posted transfer `payments → wallet:<account>`
 * whose reference is the idempotency key: the same reference again credits nothing (and is
 * reported as a replay); the same reference with another amount or account is a conflict.
 */
import { desc, eq, sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { accounts, apiKeys, usageRecords, wallets } from "../db/schema.ts";
import { fail, type Failure } from "../errors.ts";
import { newId } from "../ids.ts";

export async function createAccount(db: Db, name: string): Promise<{ id: string; name: string; createdAt: Date }> {
  const id = newId("acc");
  return db.orm.transaction(async (tx) => {
    const [account] = await tx.insert(accounts).values({ id, name }).returning();
    await tx.insert(wallets).values({ accountId: id });
    return account!;
  });
}

export interface Wallet {
  balanceMicro: bigint;
  heldMicro: bigint;
}

export async function getWallet(db: Db, accountId: string): Promise<Wallet | null> {
  const [row] = await db.orm
    .select({ balanceMicro: wallets.balanceMicro, heldMicro: wallets.heldMicro })
    .from(wallets)
    .where(eq(wallets.accountId, accountId));
  return row ?? null;
}

export type TopUpResult = { credited: boolean; wallet: Wallet } | Failure;

export async function topUp(db: Db, accountId: string, amountMicro: bigint, reference: string): Promise<TopUpResult> {
  if (amountMicro <= 0n) return fail("invalid_request", "amount_toman must be positive", { param: "amount_toman" });
  const ledgerReference = `topup:${reference}`;
  const walletAccount = `wallet:${accountId}`;
  return db.orm.transaction(async (tx) => {
    const inserted = await tx.execute(sql`
      INSERT INTO ledger_transfers (reference, debit_account, credit_account, amount_micro, kind)
      VALUES (${ledgerReference}, 'payments', ${walletAccount}, ${amountMicro}, 'topup')
      ON CONFLICT (reference) DO NOTHING RETURNING id`);
    const created = (Array.isArray(inserted) ? inserted : (inserted as { rows: unknown[] }).rows).length === 1;
    if (created) {
      await tx
        .update(wallets)
        .set({ balanceMicro: sql`${wallets.balanceMicro} + ${amountMicro}`, updatedAt: new Date() })
        .where(eq(wallets.accountId, accountId));
    } else {
      const existing = await tx.execute(sql`
        SELECT credit_account, amount_micro FROM ledger_transfers WHERE reference = ${ledgerReference}`);
      const [row] = (Array.isArray(existing) ? existing : (existing as { rows: unknown[] }).rows) as {
        credit_account: string;
        amount_micro: string | bigint;
      }[];
      if (!row || row.credit_account !== walletAccount || BigInt(row.amount_micro) !== amountMicro) {
        return fail("idempotency_conflict", `reference ${JSON.stringify(reference)} was already used for another top-up`, {
          param: "reference",
        });
      }
    }
    const [wallet] = await tx
      .select({ balanceMicro: wallets.balanceMicro, heldMicro: wallets.heldMicro })
      .from(wallets)
      .where(eq(wallets.accountId, accountId));
    return { credited: created, wallet: wallet! };
  });
}

/** Whether the account has ever been funded (keys are refused before the first top-up). */
export async function hasBeenFunded(db: Db, accountId: string): Promise<boolean> {
  const rows = await db.rows(sql`
    SELECT 1 FROM ledger_transfers WHERE credit_account = ${`wallet:${accountId}`} AND kind = 'topup' LIMIT 1`);
  return rows.length > 0;
}

export const RECENT_USAGE_MAX = 20;

export async function showAccount(db: Db, accountId: string) {
  const [account] = await db.orm.select().from(accounts).where(eq(accounts.id, accountId));
  if (!account) return null;
  const wallet = (await getWallet(db, accountId))!;
  const keys = await db.orm.select().from(apiKeys).where(eq(apiKeys.accountId, accountId)).orderBy(apiKeys.createdAt);
  const usage = await db.orm
    .select()
    .from(usageRecords)
    .where(eq(usageRecords.accountId, accountId))
    .orderBy(desc(usageRecords.id))
    .limit(RECENT_USAGE_MAX);
  return { account, wallet, keys, usage };
}
