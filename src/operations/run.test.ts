import { describe, expect, test } from "bun:test";
import type { PricedModel } from "../admission/model.ts";
import { type Failure, fail } from "../errors.ts";
import type { OperationInput } from "./input.ts";
import { type Admitted, type Bill, isRefused, type PaidDeps, type Prepared, presented, run } from "./run.ts";

/** An admitted request whose settlements are noted: its reply is presented before any. */
function admitted() {
  const settled: { used: unknown; status: number }[] = [];
  const headers: Record<string, string> = {};
  const request = {
    deps: { log: () => {} },
    requestId: "req_1",
    backend: "b1",
    admission: {
      headers,
      settle: async (used: unknown, _backend: string | null, status: number) => {
        settled.push({ used, status });
        headers["x-darvaze-cost"] = "0";
        return { billedMicro: 0n, meteredMicro: 0n };
      },
    },
  } as unknown as Admitted<Prepared>;
  return { request, settled };
}

describe("presented", () => {
  test("a reply presented is returned, the settlement left to its caller", async () => {
    const { request, settled } = admitted();
    expect(await presented(request, () => ({ usage: { input_tokens: 1 } }))).toEqual({ usage: { input_tokens: 1 } });
    expect(settled).toEqual([]);
  });

  test("a translation's failure is the client's, settled at zero with its status", async () => {
    const { request, settled } = admitted();
    const shown = await presented(request, () => fail("upstream_error", "No choice."));
    expect(isRefused(shown) && [shown.failure.code, shown.headers["x-darvaze-cost"]]).toEqual(["upstream_error", "0"]);
    expect(settled).toEqual([{ used: { input: 0, output: 0 }, status: 502 }]);
  });

  test("a translation that throws is a 500 internal_error, settled at zero", async () => {
    const { request, settled } = admitted();
    const shown = await presented(request, () => {
      throw new Error("a bug");
    });
    expect(isRefused(shown) && shown.failure.code).toBe("internal_error");
    expect(settled).toEqual([{ used: { input: 0, output: 0 }, status: 500 }]);
  });
});

/** The gateway's services as the paid sequence sees them: one key, one priced model, a key actor that admits and settles. */
function services() {
  const settlements: { status: number; usage: Record<string, bigint> }[] = [];
  const model = { id: "m", operation: "speech", price: { versionId: 1, tomanPer1m: new Map([["character", 10n]]) } };
  const deps = {
    env: { ALLOWED_ORIGINS: [], LOG_MESSAGE_CONTENT: false },
    keys: { authenticate: async () => ({ id: "key_1", name: "k", residency: null, allowedIps: null, allowedModels: null }) },
    catalog: { lookup: () => ({ kind: "found", model }) },
    pools: { get: () => ({ hasRegion: () => true }) },
    writer: { hasRoom: true },
    subjects: { keyAdmit: () => "admit", keySettle: () => "settle" },
    bus: {
      request: async (_schema: unknown, subject: string, message: { status: number; usage: Record<string, bigint> }) => {
        if (subject === "admit") return { ok: true, holdId: "hold_1" };
        settlements.push({ status: message.status, usage: message.usage });
        return { ok: true, billedMicro: message.usage.input! * 10n, meteredMicro: message.usage.input! * 10n };
      },
    },
    metrics: { request: () => {}, refused: () => {} },
    log: () => {},
  } as unknown as PaidDeps;
  const input = { requestId: "req_1", credentials: { key: "sk", origin: null, residency: null } } as unknown as OperationInput;
  return { deps, input, settlements };
}

/** A speech-like operation of 7 characters whose call does what `call` says. */
function operation(call: () => Promise<object | Failure>, billFailed?: () => Promise<Bill | null>) {
  return {
    operation: "speech" as const,
    read: async () => ({ model: "m" }),
    priced: () => ({ model: "m", unit: "character" }),
    prepare: async (_body: unknown, priced: PricedModel) => ({
      ...priced,
      reserve: { input: { unit: "character", units: 7, pricePer1m: priced.pricePer1m }, tokens: 0, exact: true },
    }),
    call,
    ...(billFailed ? { billFailed } : {}),
    deliver: async () => ({ used: { input: 7 }, reply: () => ({ contentType: "text/plain", body: "ok" }) }),
  };
}

describe("run", () => {
  test("a reply is settled once, at the units it used, and answered with its cost", async () => {
    const { deps, input, settlements } = services();
    const result = await run(
      deps,
      input,
      operation(async () => ({})),
    );
    expect(result).toMatchObject({ kind: "reply", body: "ok", headers: { "x-darvaze-cost": "70" } });
    expect(settlements).toEqual([{ status: 200, usage: { input: 7n, output: 0n } }]);
  });

  test("a failed call is settled once at zero with its client's status, or at what the operation bills for it", async () => {
    const { deps, input, settlements } = services();
    const failed = await run(
      deps,
      input,
      operation(async () => fail("upstream_error", "No.")),
    );
    expect(isRefused(failed) && failed.failure.code).toBe("upstream_error");
    const billed = await run(
      deps,
      input,
      operation(
        async () => fail("upstream_error", "Gone."),
        async () => ({ used: { input: 3 }, status: 499 }),
      ),
    );
    expect(isRefused(billed) && billed.headers["x-darvaze-cost"]).toBe("30");
    expect(settlements).toEqual([
      { status: 502, usage: { input: 0n, output: 0n } },
      { status: 499, usage: { input: 3n, output: 0n } },
    ]);
  });
});
