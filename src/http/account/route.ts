/**
 * GET /v1/key, GET /v1/credits and GET /v1/generations/{request_id}: what the calling key may
 * do, what its wallet holds, and what one of its account's requests came to.
 */
import { and, count, eq, sum } from "drizzle-orm";
import { costToman } from "../../admission/costReply.ts";
import { microToToman } from "../../catalog/prices.ts";
import { recordUnits, unitSums, usageRecordOf } from "../../accountArea/usage.ts";
import { usageRecords } from "../../db/schema.ts";
import { fail } from "../../errors.ts";
import type { KeyRecord } from "../../keys/store.ts";
import { getWallet, type Wallet } from "../../ledger/wallets.ts";
import type { EdgeDeps } from "../../admission/deps.ts";
import { UNIT_NAMES, UNITS, withParts, type Counts, type UnitRow } from "../../units.ts";

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
      ...unitSums,
    })
    .from(usageRecords)
    .where(and(eq(usageRecords.keyId, key.id)));
  const billed = BigInt(usage?.billed ?? 0);
  const units: Counts = {};
  for (const unit of UNIT_NAMES) units[unit] = Number(usage?.[unit] ?? 0);
  // A whole's count takes in its parts (`input_tokens` the whole prompts, as `prompt_tokens` counts them); the parts also apart.
  const tokens: Record<string, number> = {};
  for (const unit of UNIT_NAMES) {
    const field = (UNITS[unit] as UnitRow).keyUsageField;
    if (field) tokens[field] = withParts(units, unit);
  }
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
      ...tokens,
      spent_toman: microToToman(billed),
      spent_micro_toman: billed.toString(),
    },
  };
}

/**
 * One request of the key's account, from its usage record (the console's usage page reads the
 * same rows). This node's buffered records are written first, as for /v1/credits; a record still
 * in another node's buffer is a 404 that says to retry shortly.
 */
export async function generation(key: KeyRecord, requestId: string, deps: EdgeDeps) {
  await deps.writer.flushWithin(CREDITS_FLUSH_WAIT_MS);
  const row = await usageRecordOf(deps.db, key.accountId, requestId);
  if (!row) {
    return fail(
      "not_found",
      `No request \`${requestId}\` of this account is recorded. A request is recorded within seconds of its end: retry shortly if it just ended.`,
    );
  }
  const backend = row.backend === null ? undefined : deps.pools.get(row.model)?.backends.find((b) => b.name === row.backend);
  return {
    object: "generation",
    id: row.requestId,
    model: row.model,
    operation: row.operation,
    key_id: row.keyId,
    backend_region: backend?.config.region ?? null,
    status: row.status,
    latency_ms: row.durationMs,
    created_at: Math.floor(row.createdAt.getTime() / 1000),
    units: recordUnits(row),
    cost: costToman(row.billedMicro),
    cost_micro_toman: row.billedMicro.toString(),
    price_version: row.priceVersionId,
    // How a request that ended early was billed; null for one that ran to its end.
    ended_early:
      row.endedBy === null
        ? null
        : {
            by: row.endedBy,
            output_metered_units: String(row.outputMeteredUnits ?? 0),
            output_allowance_units: String(row.outputAllowanceUnits ?? 0),
          },
  };
}
