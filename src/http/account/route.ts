/**
 * GET /v1/key, GET /v1/credits and GET /v1/generations/{request_id}: what the calling key may
 * do, what its wallet holds, and what one of its account's requests came to.
 */
import { PURSE_FIGURES, type PurseFigures } from "../../../actors/protocol.ts";
import { costToman } from "../../admission/costReply.ts";
import { microToToman } from "../../catalog/prices.ts";
import { keyUsage, recordUnits, usageRecordOf } from "../../accountArea/usage.ts";
import { fail } from "../../errors.ts";
import type { KeyRecord } from "../../keys/store.ts";
import { getWallet, type Wallet } from "../../ledger/wallets.ts";
import type { GatewayDeps } from "../../admission/deps.ts";
import { UNIT_NAMES, UNITS, withParts, type UnitRow } from "../../units.ts";

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
/** How long the wallet's figures wait for every node's purse of the account; past it they say `approximate`. */
export const PURSES_WAIT_MS = 500;

/**
 * What the account's leases hold as the customer means it: the reserves of the requests running
 * now (`in_flight`), and what the account can spend (`spendable`: the available balance plus
 * its leases' room not committed to a request, which is the account's own money held for speed),
 * from every node's purse of the account. `approximate` when a node did not answer in time: its
 * leases' room then counts as held.
 */
export async function leaseFields(deps: Pick<GatewayDeps, "bus" | "subjects">, accountId: string, wallet: Wallet) {
  const purses = await deps.bus.gather(
    PURSE_FIGURES,
    deps.subjects.walletPurses,
    { accountId },
    { timeoutMs: PURSES_WAIT_MS, enough: (replies) => replies.length >= nodesKnown(replies) },
  );
  let slack = 0n;
  let inFlight = 0n;
  for (const purse of purses) {
    slack += purse.slackMicro;
    inFlight += purse.outstandingMicro;
  }
  // The purses' figures and the wallet's row are read at different moments: never more than the wallet holds.
  if (slack > wallet.heldMicro) slack = wallet.heldMicro;
  if (inFlight > wallet.heldMicro - slack) inFlight = wallet.heldMicro - slack;
  const spendable = wallet.balanceMicro - wallet.heldMicro + slack;
  return {
    in_flight_toman: microToToman(inFlight),
    in_flight_micro_toman: inFlight.toString(),
    spendable_toman: microToToman(spendable),
    spendable_micro_toman: spendable.toString(),
    approximate: purses.length === 0 || purses.length < nodesKnown(purses),
  };
}

/** The most live nodes any answering node knows of: the answers to wait for. */
function nodesKnown(replies: PurseFigures[]): number {
  let nodes = 1;
  for (const reply of replies) if (reply.nodes > nodes) nodes = reply.nodes;
  return nodes;
}

export async function credits(key: KeyRecord, deps: Pick<GatewayDeps, "writer" | "db" | "bus" | "subjects">) {
  // Read your own charges: this node's buffered usage is written before the balance is read.
  await deps.writer.flushWithin(CREDITS_FLUSH_WAIT_MS);
  const wallet = await getWallet(deps.db, key.accountId);
  if (!wallet) return fail("internal_error", "The key's wallet is missing.");
  return { object: "credits", ...walletFields(wallet), ...(await leaseFields(deps, key.accountId, wallet)) };
}

export async function keyInfo(key: KeyRecord, deps: Pick<GatewayDeps, "writer" | "db">) {
  await deps.writer.flushWithin(CREDITS_FLUSH_WAIT_MS);
  const { requests, billedMicro: billed, units } = await keyUsage(deps.db, key.id);
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
      requests,
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
export async function generation(key: KeyRecord, requestId: string, deps: Pick<GatewayDeps, "writer" | "db" | "pools">) {
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
