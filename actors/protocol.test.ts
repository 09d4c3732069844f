import { expect, test } from "bun:test";
import { encodeJson } from "../src/json.ts";
import { isFailure } from "../src/errors.ts";
import { admitReply, pricedMicro, settlement, settleReply, type Settlement } from "./protocol.ts";

const base: Settlement = {
  keyId: "key_1",
  requestId: "req_1",
  holdId: "hold_1",
  reserveMicro: 100_000_000n,
  model: "claude-sonnet-4",
  operation: "chat",
  backend: "anthropic-sim",
  priceVersionId: 1,
  inputUnits: 15n,
  outputUnits: 8n,
  inputPricePer1m: 270_000n,
  outputPricePer1m: 1_350_000n,
  status: 200,
  durationMs: 12,
};

test("a settlement's cache components travel as decimal strings and are read back exactly", () => {
  const withCache: Settlement = {
    ...base,
    cacheReadUnits: 64n,
    cacheReadPricePer1m: 27_000n,
    cacheWriteUnits: 64n,
    cacheWritePricePer1m: 337_500n,
  };
  const read = settlement.parse(JSON.parse(encodeJson(withCache)));
  expect(read).toEqual(withCache);
  // 15 × 270,000 + 8 × 1,350,000 + 64 × 27,000 + 64 × 337,500
  expect(pricedMicro(read)).toBe(38_178_000n);
});

test("a settlement from before cache prices (no cache fields) is still valid and priced as before", () => {
  const read = settlement.parse(JSON.parse(encodeJson(base)));
  expect(read.cacheReadUnits).toBeUndefined();
  expect(pricedMicro(read)).toBe(15n * 270_000n + 8n * 1_350_000n);
  expect(settlement.safeParse({ ...JSON.parse(encodeJson(base)), cacheReadUnits: "-1" }).success).toBe(false);
});

test("a refusal's code travels as one of the closed set; a reply with any other code is malformed", () => {
  const refused = { ok: false, failure: { code: "rate_limit_exceeded", message: "Slow down.", retryAfterS: 2 } };
  const read = admitReply.parse(JSON.parse(encodeJson(refused)));
  expect(read.ok).toBe(false);
  if (!read.ok) expect(read.failure).toEqual({ code: "rate_limit_exceeded", message: "Slow down.", retryAfterS: 2 });
  const unknown = { ok: false, failure: { code: "slow_down", message: "Slow down." } };
  expect(admitReply.safeParse(unknown).success).toBe(false);
  expect(settleReply.safeParse(unknown).success).toBe(false);
});

test("a value with a code outside the closed set is not a failure", () => {
  expect(isFailure({ code: "not_found", message: "No such key." })).toBe(true);
  expect(isFailure({ code: "slow_down", message: "a client's JSON body" })).toBe(false);
  expect(isFailure({ code: "not_found" })).toBe(false);
  expect(isFailure(null)).toBe(false);
});
