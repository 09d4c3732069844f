/** Usage records for tests of the ledger: metered input tokens at 1 toman per 1M (metered = units × price, as the audit checks). */
import type { UsageRecord } from "../src/ledger/usage.ts";

export function usageRecord(
  fields: Pick<UsageRecord, "requestId" | "accountId" | "holdId" | "billedMicro"> & Partial<UsageRecord>,
): UsageRecord {
  return {
    keyId: "key_t",
    model: "gpt-4o-mini",
    operation: "chat",
    backend: "sim",
    priceVersionId: 1,
    usage: { input: fields.meteredMicro ?? fields.billedMicro, output: 0n },
    prices: { input: 1n, output: 1n },
    meteredMicro: fields.billedMicro,
    status: 200,
    durationMs: 1,
    ...fields,
  };
}
