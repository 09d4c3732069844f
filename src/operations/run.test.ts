import { describe, expect, test } from "bun:test";
import { fail } from "../errors.ts";
import { type Admitted, isRefused, type Prepared, presented } from "./run.ts";

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
