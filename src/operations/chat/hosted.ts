/**
 * Hosted (vendor-run) tools on the chat path: a tool the vendor runs and bills per call, bounded
 * by the hold like every other part of a request's cost.
 *
 * In full, with the reasoning: docs/internals.md#hosted-tools-on-the-chat-path.
 */
import type { CatalogModel } from "../../catalog/catalog.ts";
import type { HostedCalls } from "../../admission/reserve.ts";
import { HOSTED_TOOL_CALLS_MAX, type ChatRequest } from "./schema.ts";

/** The catalog unit a web search call is billed at. */
export const WEB_SEARCH_CALL_UNIT = "web_search_call";
/**
 * Input tokens reserved for each search's results, which Anthropic adds to the prompt and bills
 * as input. Anthropic publishes no bound on them: this is an allowance (results of a typical
 * search run to a few thousand tokens); a report beyond it is clamped and counted as an upstream
 * anomaly, like any other input beyond its bound.
 */
export const WEB_SEARCH_INPUT_TOKENS_PER_CALL = 16_384;

/**
 * The hosted-tool calls a request may make, priced: absent when it offers none or the model has
 * no per-call price for it (the tool is then left out).
 * @example hostedCallsReserve({ …, anthropic: { web_search: { type: "web_search_20250305", name: "web_search", max_uses: 3 } } }, sonnet)
 *   // { unit: "web_search_call", units: 3, pricePer1m: 900_000_000n, inputUnitsPerCall: 16_384 } ($10 per 1,000 at 90,000 toman: 900 toman a call)
 */
export function hostedCallsReserve(body: ChatRequest, model: Pick<CatalogModel, "price">): HostedCalls | undefined {
  const search = body.anthropic?.web_search;
  const pricePer1m = model.price.tomanPer1m.get(WEB_SEARCH_CALL_UNIT);
  if (!search || pricePer1m === undefined) return undefined;
  const units = Math.min(search.max_uses ?? HOSTED_TOOL_CALLS_MAX, HOSTED_TOOL_CALLS_MAX);
  return { unit: WEB_SEARCH_CALL_UNIT, units, pricePer1m, inputUnitsPerCall: WEB_SEARCH_INPUT_TOKENS_PER_CALL };
}

/**
 * The body the upstream is sent: the web search allowed `calls` calls, or left out when none.
 * @example withHostedCalls(body, 0).anthropic?.web_search // undefined
 */
export function withHostedCalls(body: ChatRequest, calls: number): ChatRequest {
  const extras = body.anthropic;
  if (!extras?.web_search) return body;
  const { web_search: search, ...rest } = extras;
  if (calls > 0) return { ...body, anthropic: { ...rest, web_search: { ...search, max_uses: calls } } };
  const { anthropic: _, ...without } = body;
  return Object.keys(rest).length > 0 ? { ...without, anthropic: rest } : without;
}
