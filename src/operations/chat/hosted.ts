/**
 * Hosted (vendor-run) tools on the chat path: a tool the vendor runs and bills per call, bounded
 * by the hold like every other part of a request's cost.
 *
 *   offered   Anthropic's web search (`anthropic.web_search`, from the Messages wire or the
 *             Responses wire's `web_search` tool), on a model whose catalog entry prices
 *             `web_search_call`
 *   reserved  calls = the client's `max_uses`, capped at HOSTED_TOOL_CALLS_MAX (no `max_uses`: the
 *             cap), each at the per-call price plus WEB_SEARCH_INPUT_TOKENS_PER_CALL input tokens
 *             for its results, in the request's cost value (`Reserve.hostedCalls`); lowered at the
 *             wallet's edge to what the hold covers, down to none
 *   sent      to an Anthropic backend with `max_uses` = the calls the hold covers; left out when
 *             none fits or the model has no per-call price; other backends never see it (their
 *             adapters drop `anthropic`), so the bound holds whichever backend the pool picks
 *   billed    the calls the vendor reports (`server_tool_use.web_search_requests`), clamped to
 *             the calls sent, and the input tokens up to the prompt's bound plus each call's
 *             allowance; when it reports no usage, every call sent to an Anthropic backend and
 *             its allowance
 *
 * Anthropic bills each search $10 per 1,000 on top of the tokens its results add:
 * https://platform.claude.com/docs/en/agents-and-tools/tool-use/web-search-tool (read 2026-11-27).
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
