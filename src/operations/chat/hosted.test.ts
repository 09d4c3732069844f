import { expect, test } from "bun:test";
import type { CatalogModel } from "../../catalog/catalog.ts";
import { hostedCallsReserve, WEB_SEARCH_INPUT_TOKENS_PER_CALL, withHostedCalls } from "./hosted.ts";
import { HOSTED_TOOL_CALLS_MAX, type ChatRequest } from "./schema.ts";

const priced = (units: [string, bigint][]) =>
  ({ price: { versionId: 1, tomanPer1m: new Map(units) } }) as unknown as Pick<CatalogModel, "price">;
const sonnet = priced([
  ["input_token", 270_000n],
  ["web_search_call", 900_000_000n],
]);
const search = { type: "web_search_20250305", name: "web_search" as const };
const body = (extra: Partial<ChatRequest>): ChatRequest =>
  ({ model: "claude-sonnet-4", messages: [{ role: "user", content: "News?" }], ...extra }) as ChatRequest;

test("the calls held are the client's max_uses, capped; none sent: the cap", () => {
  const held = (maxUses?: number) =>
    hostedCallsReserve(body({ anthropic: { web_search: { ...search, max_uses: maxUses } } }), sonnet)?.units;
  expect(held(3)).toBe(3);
  expect(held(500)).toBe(HOSTED_TOOL_CALLS_MAX);
  expect(held(undefined)).toBe(HOSTED_TOOL_CALLS_MAX);
  expect(hostedCallsReserve(body({ anthropic: { web_search: search } }), sonnet)).toEqual({
    unit: "web_search_call",
    units: HOSTED_TOOL_CALLS_MAX,
    pricePer1m: 900_000_000n,
    inputUnitsPerCall: WEB_SEARCH_INPUT_TOKENS_PER_CALL,
  });
});

test("no tool offered, or a model without a per-call price: nothing held", () => {
  expect(hostedCallsReserve(body({}), sonnet)).toBeUndefined();
  expect(hostedCallsReserve(body({ anthropic: { web_search: search } }), priced([["input_token", 1n]]))).toBeUndefined();
});

test("the upstream is told the calls held; none held leaves the tool out, and the other extras stay", () => {
  const offered = body({ anthropic: { web_search: { ...search, max_uses: 8 }, betas: ["x"] } });
  expect(withHostedCalls(offered, 2).anthropic).toEqual({ web_search: { ...search, max_uses: 2 }, betas: ["x"] });
  expect(withHostedCalls(offered, 0).anthropic).toEqual({ betas: ["x"] });
  expect("anthropic" in withHostedCalls(body({ anthropic: { web_search: search } }), 0)).toBe(false);
  const plain = body({});
  expect(withHostedCalls(plain, 3)).toBe(plain);
});
