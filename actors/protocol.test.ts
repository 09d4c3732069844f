import { expect, test } from "bun:test";
import { encodeJson } from "../src/json.ts";
import { isFailure } from "../src/errors.ts";
import { costOf } from "../src/units.ts";
import { admitReply, settlement, settleReply, type Settlement } from "./protocol.ts";

const base: Settlement = {
  keyId: "key_1",
  requestId: "req_1",
  holdId: "hold_1",
  reserveMicro: 100_000_000n,
  model: "claude-sonnet-4",
  operation: "chat",
  backend: "anthropic-sim",
  priceVersionId: 1,
  usage: { input: 15n, output: 8n },
  prices: { input: 270_000n, output: 1_350_000n },
  status: 200,
  durationMs: 12,
};

test("a settlement's cache components travel as decimal strings and are read back exactly", () => {
  const withCache: Settlement = {
    ...base,
    usage: { ...base.usage, cache_read: 64n, cache_write: 64n },
    prices: { ...base.prices, cache_read: 27_000n, cache_write: 337_500n },
  };
  const read = settlement.parse(JSON.parse(encodeJson(withCache)));
  expect(read).toEqual(withCache);
  // 15 × 270,000 + 8 × 1,350,000 + 64 × 27,000 + 64 × 337,500
  expect(costOf(read.usage, read.prices)).toBe(38_178_000n);
});

test("a settlement from before cache prices (no cache fields) is still valid and priced as before", () => {
  const read = settlement.parse(JSON.parse(encodeJson(base)));
  expect(read.usage.cache_read).toBeUndefined();
  expect(costOf(read.usage, read.prices)).toBe(15n * 270_000n + 8n * 1_350_000n);
  expect(settlement.safeParse({ ...JSON.parse(encodeJson(base)), usage: { input: "15", cache_read: "-1" } }).success).toBe(false);
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

test("a settlement of the old shape (flat unit fields, from a node not yet upgraded) is read as the maps and priced the same", () => {
  const old = {
    ...JSON.parse(encodeJson({ ...base, usage: undefined, prices: undefined })),
    inputUnits: "15",
    outputUnits: "8",
    inputPricePer1m: "270000",
    outputPricePer1m: "1350000",
    cacheReadUnits: "64",
    cacheReadPricePer1m: "27000",
    hostedCallUnits: "1",
    hostedCallPricePer1m: "900000000",
    hostedCallUnit: "web_search_call",
  };
  const read = settlement.parse(old);
  expect(read.usage).toEqual({ input: 15n, output: 8n, cache_read: 64n, hosted_call: 1n });
  expect(read.prices).toEqual({ input: 270_000n, output: 1_350_000n, cache_read: 27_000n, hosted_call: 900_000_000n });
  expect(read.hostedCallUnit).toBe("web_search_call");
  expect(costOf(read.usage, read.prices)).toBe(15n * 270_000n + 8n * 1_350_000n + 64n * 27_000n + 900_000_000n);
  expect("inputUnits" in read).toBe(false);
});
