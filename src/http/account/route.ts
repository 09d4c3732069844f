/** GET /v1/key and GET /v1/credits: what the calling key may do and what its wallet holds. */
import { and, count, eq, sum } from "drizzle-orm";
import { microToToman } from "../../catalog/prices.ts";
import { usageRecords } from "../../db/schema.ts";
import { fail } from "../../errors.ts";
import type { KeyRecord } from "../../keys/store.ts";
import { getWallet, type Wallet } from "../../ledger/wallets.ts";
import type { EdgeDeps } from "../deps.ts";

export function walletFields(wallet: Wallet) {
  const available = wallet.balanceMicro - wallet.heldMicro;
  return {
    balance_toman: microToToman(wallet.balanceMicro),
    balance_micro_toman: wallet.balanceMicro.toString(),
    held_toman: microToToman(wallet.heldMicro),
    held_micro_toman: wallet.heldMicro.toString(),
    available_toman: microToToman(available),
    available_micro_toman: available.toString(),
  };
}

/** How long /v1/credits waits for this node's pending charges to be written. */
export const CREDITS_FLUSH_WAIT_MS = 1_000;

export async function credits(key: KeyRecord, deps: EdgeDeps) {
  // Read your own charges: this node's buffered usage is written before the balance is read.
  await deps.writer.flushWithin(CREDITS_FLUSH_WAIT_MS);
  const wallet = await getWallet(deps.db, key.accountId);
  if (!wallet) return fail("internal_error", "The key's wallet is missing.");
  return { object: "credits", ...walletFields(wallet) };
}

export async function keyInfo(key: KeyRecord, deps: EdgeDeps) {
  await deps.writer.flushWithin(CREDITS_FLUSH_WAIT_MS);
  const [usage] = await deps.db.orm
    .select({
      requests: count(),
      billed: sum(usageRecords.billedMicro),
      input: sum(usageRecords.inputUnits),
      output: sum(usageRecords.outputUnits),
      cacheRead: sum(usageRecords.cacheReadUnits),
      cacheWrite: sum(usageRecords.cacheWriteUnits),
    })
    .from(usageRecords)
    .where(and(eq(usageRecords.keyId, key.id)));
  const billed = BigInt(usage?.billed ?? 0);
  return {
    object: "key",
    id: key.id,
    name: key.name,
    display: key.display,
    created_at: Math.floor(key.createdAt.getTime() / 1000),
    /** Unix seconds after which the key is refused; null: never. */
    expires_at: key.expiresAt ? Math.floor(key.expiresAt.getTime() / 1000) : null,
    limits: { concurrency_max: key.concurrencyMax, rpm: key.rpm, tpm: key.tpm },
    usage: {
      requests: usage?.requests ?? 0,
      // The whole prompts, as `prompt_tokens` counts them; the cache parts also apart.
      input_tokens: Number(usage?.input ?? 0) + Number(usage?.cacheRead ?? 0) + Number(usage?.cacheWrite ?? 0),
      cached_tokens: Number(usage?.cacheRead ?? 0),
      cache_write_tokens: Number(usage?.cacheWrite ?? 0),
      output_tokens: Number(usage?.output ?? 0),
      spent_toman: microToToman(billed),
      spent_micro_toman: billed.toString(),
    },
  };
}
