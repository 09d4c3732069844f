/**
 * The gateway's chat reply → an OpenAI Responses `response` object. The reply's finish reason
 * decides the status: `length` (the output budget, or the hold cut at the wallet) is
 * `incomplete` with reason `max_output_tokens`; `content_filter` is `incomplete` with reason
 * `content_filter`; anything else is `completed`. The searches an Anthropic backend ran (its
 * server_tool_use and web_search_tool_result blocks, src/wires/chat.ts vendorBlock) are
 * `web_search_call` items, as OpenAI's own web search shows them.
 */
import { z } from "zod";
import type { Failure } from "../../errors.ts";
import { type ChatCompletion, type ChatUsage, usageCost, type VendorBlock } from "../chat.ts";
import type { ResponsesRequest } from "./request.ts";
import { customInputOf, type ToolNames } from "./tools.ts";

/** What the translation needs beyond the reply; given by the caller, so nothing here reads a clock. */
export interface ResponsesContext {
  /** The gateway's request id: `resp_<requestId>` is the response's id. */
  requestId: string;
  /** The model id the client asked for (the catalog id). */
  model: string;
  /** Unix seconds. */
  createdAt: number;
  request: ResponsesRequest;
  /** The flat tool names the backend saw → the tools the client offered (tools.ts). */
  toolNames?: ToolNames;
}

export type ResponseStatus = "in_progress" | "completed" | "incomplete" | "failed";

export interface ResponseParts {
  status: ResponseStatus;
  output: Record<string, unknown>[];
  usage: ChatUsage | null;
  finishReason?: string | null;
  failure?: Failure;
  /** Unix seconds, for a finished response. */
  completedAt?: number;
}

export const responseId = (ctx: Pick<ResponsesContext, "requestId">) => `resp_${ctx.requestId}`;
export const messageItemId = (ctx: Pick<ResponsesContext, "requestId">) => `msg_${ctx.requestId}`;
export const functionCallItemId = (callId: string) => `fc_${callId}`;
export const customToolCallItemId = (callId: string) => `ctc_${callId}`;

export const webSearchCallItemId = (callId: string) => `ws_${callId}`;

/** A search the vendor ran: its call (server_tool_use) and its result (web_search_tool_result). */
const searchCall = z.looseObject({
  type: z.literal("server_tool_use"),
  id: z.string(),
  input: z.looseObject({ query: z.string().optional() }).nullish(),
});
const searchResult = z.looseObject({ type: z.literal("web_search_tool_result"), tool_use_id: z.string(), content: z.unknown() });
const resultPages = z.array(z.looseObject({ url: z.string().optional() }));

export type WebSearchStatus = "in_progress" | "searching" | "completed" | "failed";
export type SearchCall = z.infer<typeof searchCall>;

/** The vendor block as a search call, or null when it is not one. */
export function searchCallOf(block: VendorBlock): SearchCall | null {
  const parsed = searchCall.safeParse(block);
  return parsed.success ? parsed.data : null;
}

/** The vendor block as a search's result: the call it answers, and its pages' URLs (null: the search failed). */
export function searchResultOf(block: VendorBlock): { callId: string; urls: string[] | null } | null {
  const parsed = searchResult.safeParse(block);
  if (!parsed.success) return null;
  const pages = resultPages.safeParse(parsed.data.content);
  const urls = pages.success ? pages.data.flatMap((page) => (page.url ? [page.url] : [])) : null;
  return { callId: parsed.data.tool_use_id, urls };
}

/**
 * A search as a `web_search_call` item: its query, and the result's pages as its sources.
 * @example webSearchCallItem({ type: "server_tool_use", id: "srvtoolu_1", input: { query: "q" } }, ["https://a.example"], "completed")
 *   // { type: "web_search_call", id: "ws_srvtoolu_1", status: "completed", action: { type: "search", query: "q", sources: [{ type: "url", url: "https://a.example" }] } }
 */
export function webSearchCallItem(
  call: SearchCall,
  urls: string[] | null,
  status: WebSearchStatus,
): Record<string, unknown> & { id: string } {
  const query = call.input?.query;
  const sources = (urls ?? []).map((url) => ({ type: "url", url }));
  return {
    type: "web_search_call",
    id: webSearchCallItemId(call.id),
    status,
    action: { type: "search", ...(query !== undefined ? { query } : {}), ...(sources.length > 0 ? { sources } : {}) },
  };
}

export function usageToResponses(usage: ChatUsage) {
  return {
    input_tokens: usage.prompt_tokens,
    input_tokens_details: { cached_tokens: usage.prompt_tokens_details?.cached_tokens ?? 0, cache_write_tokens: 0 },
    output_tokens: usage.completion_tokens,
    output_tokens_details: { reasoning_tokens: usage.completion_tokens_details?.reasoning_tokens ?? 0 },
    total_tokens: usage.prompt_tokens + usage.completion_tokens,
    ...usageCost(usage),
  };
}

/** A chat finish reason as the Responses status and its `incomplete_details`. */
export function finishReasonToStatus(finish: string | null | undefined): {
  status: "completed" | "incomplete";
  incomplete: { reason: string } | null;
} {
  if (finish === "length") return { status: "incomplete", incomplete: { reason: "max_output_tokens" } };
  if (finish === "content_filter") return { status: "incomplete", incomplete: { reason: "content_filter" } };
  return { status: "completed", incomplete: null };
}

/**
 * A failure as the spec's closed set of response error codes: a mid-stream failure is the
 * upstream's or ours, so `server_error`, but for the rate limits, which keep their name.
 */
export function failureToResponseErrorCode(failure: Failure): "server_error" | "rate_limit_exceeded" {
  return failure.code === "rate_limit_exceeded" || failure.code === "concurrency_limit_exceeded" ? "rate_limit_exceeded" : "server_error";
}

/** The `response` object: the request's settings echoed, with the parts of this moment. */
export function responseObject(ctx: ResponsesContext, parts: ResponseParts): Record<string, unknown> {
  const r = ctx.request;
  const finished = parts.status === "completed" || parts.status === "incomplete";
  const incomplete = parts.status === "incomplete" ? finishReasonToStatus(parts.finishReason).incomplete : null;
  return {
    id: responseId(ctx),
    object: "response",
    created_at: ctx.createdAt,
    status: parts.status,
    background: false,
    completed_at: finished ? (parts.completedAt ?? ctx.createdAt) : null,
    error: parts.failure ? { code: failureToResponseErrorCode(parts.failure), message: parts.failure.message } : null,
    incomplete_details: incomplete,
    instructions: r.instructions ?? null,
    max_output_tokens: r.max_output_tokens ?? null,
    model: ctx.model,
    output: parts.output,
    parallel_tool_calls: r.parallel_tool_calls ?? true,
    previous_response_id: null,
    reasoning: { effort: r.reasoning?.effort ?? null, summary: null },
    store: false,
    temperature: r.temperature ?? 1,
    text: { format: r.text?.format ?? { type: "text" } },
    tool_choice: r.tool_choice ?? "auto",
    tools: r.tools ?? [],
    top_p: r.top_p ?? 1,
    truncation: "disabled",
    ...(parts.usage ? { usage: usageToResponses(parts.usage) } : {}),
    ...(r.user ? { user: r.user } : {}),
    metadata: r.metadata ?? {},
  };
}

export function messageItem(ctx: ResponsesContext, text: string, status: "in_progress" | "completed" | "incomplete") {
  return {
    type: "message",
    id: messageItemId(ctx),
    status,
    role: "assistant",
    content: status === "in_progress" && text === "" ? [] : [outputTextPart(text)],
  };
}

export const outputTextPart = (text: string) => ({ type: "output_text", text, annotations: [], logprobs: [] });

/**
 * A call as the item of the tool the client offered: a `custom_tool_call` with its freeform
 * `input` for a custom tool, else a `function_call`, with its `namespace` when it has one.
 * @example toolCallItem(ctx, { callId: "c1", name: "clock__sleep", arguments: "{}" }, "completed")
 *   // { type: "function_call", id: "fc_c1", call_id: "c1", name: "sleep", namespace: "clock", arguments: "{}", status: "completed" }
 */
export function toolCallItem(
  ctx: Pick<ResponsesContext, "toolNames">,
  call: { callId: string; name: string; arguments: string },
  status: "in_progress" | "completed" | "incomplete",
): Record<string, unknown> & { id: string } {
  const offered = ctx.toolNames?.get(call.name);
  const named = offered ? { name: offered.name, ...(offered.namespace ? { namespace: offered.namespace } : {}) } : { name: call.name };
  if (offered?.kind === "custom") {
    const input = status === "in_progress" ? "" : customInputOf(call.arguments);
    return { type: "custom_tool_call", id: customToolCallItemId(call.callId), call_id: call.callId, ...named, input, status };
  }
  return { type: "function_call", id: functionCallItemId(call.callId), call_id: call.callId, ...named, arguments: call.arguments, status };
}

/**
 * A whole chat completion as a `response` object.
 * @example chatToResponse(chatCompletionOf(json)!, ctx, nowS) // { object: "response", status: "completed", output: [...] }
 */
export function chatToResponse(reply: ChatCompletion, ctx: ResponsesContext, completedAt: number): Record<string, unknown> {
  const choice = reply.choices[0]!;
  const { status } = finishReasonToStatus(choice.finish_reason);
  const text = choice.message.content ?? choice.message.refusal ?? "";
  const message = text === "" ? null : messageItem(ctx, text, status === "completed" ? "completed" : "incomplete");
  const output = searchesAndMessage(choice.message.anthropic_content ?? [], message);
  for (const call of choice.message.tool_calls ?? []) {
    output.push(toolCallItem(ctx, { callId: call.id, name: call.function.name, arguments: call.function.arguments }, "completed"));
  }
  return responseObject(ctx, { status, output, usage: reply.usage ?? null, finishReason: choice.finish_reason, completedAt });
}

/**
 * The searches the vendor ran, each a `web_search_call` item, with the message where its first
 * text came (as a stream shows them): `blocks` is the vendor's content (none: the message alone).
 */
function searchesAndMessage(blocks: VendorBlock[], message: Record<string, unknown> | null): Record<string, unknown>[] {
  const output: Record<string, unknown>[] = [];
  const urls = new Map<string, string[] | null>();
  for (const block of blocks) {
    const result = searchResultOf(block);
    if (result) urls.set(result.callId, result.urls);
  }
  let messagePlaced = message === null;
  for (const block of blocks) {
    const call = searchCallOf(block);
    if (call) {
      const found = urls.get(call.id);
      output.push(webSearchCallItem(call, found ?? null, found ? "completed" : "failed"));
    } else if (block.type === "text" && !messagePlaced) {
      output.push(message!);
      messagePlaced = true;
    }
  }
  if (!messagePlaced) output.push(message!);
  return output;
}
