import { describe, expect, test } from "bun:test";
import type { CatalogModel } from "../catalog/catalog.ts";
import type { KeyRecord } from "../keys/store.ts";
import type { Reserve } from "./reserve.ts";
import { Admission, type SettlementDeps } from "./settlement.ts";

// 100 input tokens at 10, 50 output tokens at 100 (micro-toman per token): 6,000 held.
const reserve: Reserve = {
  input: { unit: "input_token", units: 100, pricePer1m: 10n },
  output: { unit: "output_token", units: 50, pricePer1m: 100n },
  tokens: 150,
  exact: false,
};
const model = {
  id: "m",
  price: {
    versionId: 1,
    tomanPer1m: new Map([
      ["input_token", 10n],
      ["output_token", 100n],
    ]),
  },
} as unknown as CatalogModel;

/** An Admission whose settlements are answered as the key actor would: billed what was metered. */
function admitted() {
  const sent: { usage: Record<string, bigint> }[] = [];
  const clamped: string[] = [];
  const deps = {
    env: { LOG_MESSAGE_CONTENT: false },
    subjects: { keySettle: () => "settle", keyExtend: () => "extend" },
    bus: {
      request: async (
        _schema: unknown,
        _subject: string,
        settlement: { usage: Record<string, bigint>; prices: Record<string, bigint> },
      ) => {
        sent.push(settlement);
        const billed = Object.entries(settlement.usage).reduce((sum, [unit, n]) => sum + n * (settlement.prices[unit] ?? 0n), 0n);
        return { ok: true, billedMicro: billed, meteredMicro: billed };
      },
    },
    metrics: { clamped: (_m: string, _b: string, part: string) => clamped.push(part), raised: () => {}, request: () => {} },
    log: () => {},
  } as unknown as SettlementDeps;
  const caller = { key: { id: "key_1", name: "k" } as unknown as KeyRecord, region: undefined };
  const admission = new Admission(
    deps,
    { requestId: "req_1", caller, model, operation: "chat", reserve, startedMs: performance.now() },
    "hold_1",
    6_000n,
    {},
  );
  return { admission, sent, clamped };
}

describe("settlement", () => {
  test("a report beyond the hold is charged within it, the part clamped counted as an upstream anomaly", async () => {
    const { admission, sent, clamped } = admitted();
    const settled = await admission.settle({ input: 100, output: 5_000 }, "b1", 200);
    expect(settled).toEqual({ billedMicro: 6_000n, meteredMicro: 6_000n });
    expect([sent[0]!.usage.output, clamped, admission.anomalies]).toEqual([50n, ["output"], [{ part: "output", kind: "over" }]]);
    expect(admission.headers["x-darvaze-cost"]).toBe("6000");
  });

  test("a report below what was proven used is raised to it; only the first settlement counts", async () => {
    const { admission, sent } = admitted();
    const first = await admission.settle({ input: 1, output: 10 }, "b1", 200, { floor: { input: 20, output: 10 } });
    expect(first).toEqual({ billedMicro: 20n * 10n + 10n * 100n, meteredMicro: 20n * 10n + 10n * 100n });
    expect(await admission.settle({ input: 0, output: 0 }, "b1", 502)).toBe(first);
    expect(sent.length).toBe(1);
    expect(admission.anomalies).toEqual([{ part: "input", kind: "under" }]);
  });
});
