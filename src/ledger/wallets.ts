/**
 * Accounts, wallets and top-ups. A top-up is a posted transfer `payments → wallet:<account>`
 * whose reference is the idempotency key: the same reference again credits nothing (and is
 * reported as a replay); the same reference with another amount or account is a conflict.
 */
import { desc, eq, sql, TransactionRollbackError } from "drizzle-orm";
import { txRows, type Db, type Tx } from "../db/client.ts";
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

/**
 * The account of the node's start-up rehearsal (src/rehearsal.ts): no phone, so no one signs in
 * to it; a wallet at zero, drawn on only by requests at zero prices. The operator's revenue and
 * anomaly figures leave it out.
 */
export const REHEARSAL_ACCOUNT_ID = "acc_start_rehearsal";

/**
 * The rehearsal's account and its wallet, made once (a node started again, or two at once, find
 * them made). Its limits are set, as many customers' are, so that the rehearsal runs the
 * account's gates too: they are far above the rehearsal's two requests.
 */
export async function ensureRehearsalAccount(db: Db): Promise<void> {
  await db.rows(sql`
    WITH account AS (
      INSERT INTO accounts (id, name, concurrency_max, rpm, tpm) VALUES (${REHEARSAL_ACCOUNT_ID}, 'Start-up rehearsal', 8, 600, 1000000)
      ON CONFLICT (id) DO UPDATE SET concurrency_max = EXCLUDED.concurrency_max, rpm = EXCLUDED.rpm, tpm = EXCLUDED.tpm
      RETURNING id)
    INSERT INTO wallets (account_id) SELECT id FROM account ON CONFLICT (account_id) DO NOTHING`);
}

/**
 * The account signed in with this phone, created with its wallet on the first sign-in. Two
 * first sign-ins at once make one account: the phone is unique and the loser reads the winner's.
 */
export async function accountForPhone(db: Db, phone: string): Promise<{ id: string; created: boolean }> {
  const id = newId("acc");
  const created = await db.orm.transaction(async (tx) => {
    const rows = await txRows(
      tx,
      sql`
      INSERT INTO accounts (id, name, phone) VALUES (${id}, ${phone}, ${phone}) ON CONFLICT (phone) DO NOTHING RETURNING id`,
    );
    if (rows.length === 1) await tx.insert(wallets).values({ accountId: id });
    return rows.length === 1;
  });
  if (created) return { id, created };
  const [row] = await db.orm.select({ id: accounts.id }).from(accounts).where(eq(accounts.phone, phone));
  return { id: row!.id, created: false };
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

/**
 * What else the caller writes in the transfer's own transaction, once it is applied (an
 * operator's audit row: it commits with the transfer or not at all).
 */
export type Within = (tx: Tx, applied: { credited: boolean; wallet: Wallet }) => Promise<void>;

interface ExternalTransfer {
  accountId: string;
  /** Positive: into the wallet; negative: out of it (only from the available balance). */
  amountMicro: bigint;
  /** The idempotency key, unique across the ledger. */
  reference: string;
  kind: "topup" | "adjustment";
  /** The other side: `payments` for top-ups, `adjustments` for operator corrections. */
  counterparty: string;
  memo?: string;
}

/**
 * Moves money between a wallet and the outside, once per reference: the same reference again
 * changes nothing (credited: false); with another amount or account it is a conflict.
 */
async function postExternal(db: Db, t: ExternalTransfer, within?: Within): Promise<TopUpResult> {
  return db.orm
    .transaction(async (tx) => {
      const result = await postExternalIn(tx, t);
      if (within && !("code" in result)) await within(tx, result);
      return result;
    })
    .catch((error: unknown) => {
      if (error instanceof TransactionRollbackError) {
        return fail("invalid_request", "The wallet's available balance does not cover this debit.", { param: "amount_toman" });
      }
      throw error;
    });
}

/** The transfer inside the caller's transaction; a refused debit rolls that transaction back. */
async function postExternalIn(tx: Tx, t: ExternalTransfer): Promise<TopUpResult> {
  const wallet = `wallet:${t.accountId}`;
  const into = t.amountMicro > 0n;
  const amount = into ? t.amountMicro : -t.amountMicro;
  const [debit, credit] = into ? [t.counterparty, wallet] : [wallet, t.counterparty];
  const inserted = await txRows(
    tx,
    sql`
    INSERT INTO ledger_transfers (reference, debit_account, credit_account, amount_micro, kind, memo)
    VALUES (${t.reference}, ${debit}, ${credit}, ${amount}, ${t.kind}, ${t.memo ?? null})
    ON CONFLICT (reference) DO NOTHING RETURNING id`,
  );
  const created = inserted.length === 1;
  if (created) {
    const updated = await tx
      .update(wallets)
      .set({ balanceMicro: sql`${wallets.balanceMicro} + ${t.amountMicro}`, updatedAt: new Date() })
      .where(sql`${wallets.accountId} = ${t.accountId} AND ${wallets.balanceMicro} - ${wallets.heldMicro} + ${t.amountMicro} >= 0`)
      .returning({ accountId: wallets.accountId });
    if (updated.length === 0) {
      tx.rollback();
    }
  } else {
    const [row] = await txRows<{ debit_account: string; credit_account: string; amount_micro: string | bigint }>(
      tx,
      sql`
      SELECT debit_account, credit_account, amount_micro FROM ledger_transfers WHERE reference = ${t.reference}`,
    );
    if (!row || row.debit_account !== debit || row.credit_account !== credit || BigInt(row.amount_micro) !== amount) {
      return fail(
        "idempotency_conflict",
        `reference ${JSON.stringify(t.reference.slice(t.reference.indexOf(":") + 1))} was already used for another ${t.kind === "topup" ? "top-up" : "adjustment"}`,
        {
          param: "reference",
        },
      );
    }
  }
  const [after] = await tx
    .select({ balanceMicro: wallets.balanceMicro, heldMicro: wallets.heldMicro })
    .from(wallets)
    .where(eq(wallets.accountId, t.accountId));
  return { credited: created, wallet: after! };
}

export async function topUp(db: Db, accountId: string, amountMicro: bigint, reference: string, within?: Within): Promise<TopUpResult> {
  if (amountMicro <= 0n) return fail("invalid_request", "amount_toman must be positive", { param: "amount_toman" });
  return postExternal(db, topUpTransfer(accountId, amountMicro, reference), within);
}

/**
 * The same top-up inside the caller's transaction (a verified payment credits the wallet in the
 * transaction that marks it verified): the reference still makes a second credit impossible.
 */
export async function topUpIn(tx: Tx, accountId: string, amountMicro: bigint, reference: string): Promise<TopUpResult> {
  if (amountMicro <= 0n) return fail("invalid_request", "amount_toman must be positive", { param: "amount_toman" });
  return postExternalIn(tx, topUpTransfer(accountId, amountMicro, reference));
}

function topUpTransfer(accountId: string, amountMicro: bigint, reference: string): ExternalTransfer {
  return { accountId, amountMicro, reference: `topup:${reference}`, kind: "topup", counterparty: "payments" };
}

/** An operator's correction, with a reason: positive credits the wallet, negative debits it. */
export async function adjust(
  db: Db,
  accountId: string,
  amountMicro: bigint,
  reason: string,
  reference: string,
  within?: Within,
): Promise<TopUpResult> {
  if (amountMicro === 0n) return fail("invalid_request", "amount_toman must not be zero", { param: "amount_toman" });
  const transfer = {
    accountId,
    amountMicro,
    reference: `adjustment:${reference}`,
    kind: "adjustment",
    counterparty: "adjustments",
    memo: reason,
  } as const;
  return postExternal(db, transfer, within);
}

/** Whether the account has ever been funded (keys are refused before the first top-up). */
export async function hasBeenFunded(db: Db, accountId: string): Promise<boolean> {
  const rows = await db.rows(sql`
    SELECT 1 FROM ledger_transfers WHERE credit_account = ${`wallet:${accountId}`} AND kind = 'topup' LIMIT 1`);
  return rows.length > 0;
}

export const RECENT_USAGE_MAX = 20;
/** The keys an account's view lists, oldest first; `keysMore` says when it has more. */
export const ACCOUNT_VIEW_KEYS_MAX = 1_000;

/** Whether the account exists: one indexed row, for the writes that name an account. */
export async function accountExists(db: Db, accountId: string): Promise<boolean> {
  const rows = await db.rows(sql`SELECT 1 FROM accounts WHERE id = ${accountId}`);
  return rows.length > 0;
}

export async function showAccount(db: Db, accountId: string) {
  const [account] = await db.orm.select().from(accounts).where(eq(accounts.id, accountId));
  if (!account) return null;
  const wallet = (await getWallet(db, accountId))!;
  const listed = await db.orm
    .select()
    .from(apiKeys)
    .where(eq(apiKeys.accountId, accountId))
    .orderBy(apiKeys.createdAt, apiKeys.id)
    .limit(ACCOUNT_VIEW_KEYS_MAX + 1);
  const keysMore = listed.length > ACCOUNT_VIEW_KEYS_MAX;
  const keys = keysMore ? listed.slice(0, ACCOUNT_VIEW_KEYS_MAX) : listed;
  const usage = await db.orm
    .select()
    .from(usageRecords)
    .where(eq(usageRecords.accountId, accountId))
    .orderBy(desc(usageRecords.id))
    .limit(RECENT_USAGE_MAX);
  return { account, wallet, keys, keysMore, usage };
}
