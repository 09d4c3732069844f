import { describe, expect, test } from "bun:test";
import { errorHeaders, fail } from "./errors.ts";

describe("errorHeaders", () => {
  test("retry-after is whole seconds, rounded up, never 0", () => {
    expect(errorHeaders(fail("rate_limit_exceeded", "x", { retryAfterS: 2.2 }))["retry-after"]).toBe("3");
    expect(errorHeaders(fail("rate_limit_exceeded", "x", { retryAfterS: 0.01 }))["retry-after"]).toBe("1");
    expect(errorHeaders(fail("rate_limit_exceeded", "x", { retryAfterS: 0 }))["retry-after"]).toBe("1");
  });

  test("every 429 and 503 carries retry-after, named or not", () => {
    for (const code of ["concurrency_limit_exceeded", "rate_limit_exceeded", "service_unavailable", "no_healthy_backend"] as const) {
      expect(errorHeaders(fail(code, "x"))["retry-after"]).toBe("1");
    }
  });

  test("what a retry cannot fix says x-should-retry: false, and what it can does not", () => {
    const final = [
      "invalid_request",
      "invalid_json",
      "invalid_api_key",
      "insufficient_quota",
      "model_forbidden",
      "model_not_found",
      "not_found",
    ] as const;
    for (const code of final) expect(errorHeaders(fail(code, "x"))["x-should-retry"]).toBe("false");
    for (const code of ["rate_limit_exceeded", "service_unavailable", "upstream_error", "upstream_timeout"] as const) {
      expect(errorHeaders(fail(code, "x"))["x-should-retry"]).toBeUndefined();
    }
  });

  test("a 429 that no wait can fix (a reserve above tpm) asks for no retry and names no wait", () => {
    const headers = errorHeaders(fail("rate_limit_exceeded", "x", { param: "max_tokens", retryable: false }));
    expect(headers).toEqual({ "x-should-retry": "false" });
  });
});
