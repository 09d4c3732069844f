/**
 * POST /v1/messages and POST /v1/messages/count_tokens: Anthropic's Messages API for any model of
 * the catalog (Claude Code and `@anthropic-ai/sdk` pointed at the gateway with
 * ANTHROPIC_BASE_URL). Translated to the one chat path (src/wires/messages), so that admission,
 * reserve bounds, live metering, the cut at the wallet, disconnect rules and residency are chat's.
 * The key comes as `x-api-key` or `Authorization: Bearer`; `anthropic-version`, `anthropic-beta`
 * and `?beta=true` are accepted and change nothing. Errors keep Anthropic's shape.
 */
import { operationModel } from "../../admission/admission.ts";
import { errorHeaders, fail, isFailure, type Failure } from "../../errors.ts";
import { countPromptTokens, countTokens } from "../../tokens/count.ts";
import { parseChatCompletion } from "../../wires/chat.ts";
import { failureToAnthropicError } from "../../wires/messages/errors.ts";
import { conversationToChat, countTokensRequest, messagesToChat, toolsToChat, type MessagesRequest } from "../../wires/messages/request.ts";
import { chatToMessage } from "../../wires/messages/response.ts";
import { MessagesStream } from "../../wires/messages/stream.ts";
import type { EdgeDeps } from "../deps.ts";
import { callerOf, zodFailure } from "../guard.ts";
import { readJsonBodyText } from "../request.ts";
import { chatThroughWire, streamHeaders, wireBody } from "../translated.ts";

function replyHeaders(requestId: string, headers: Record<string, string> = {}): Record<string, string> {
  // `request-id` is where Anthropic's SDKs read the id from.
  return { "content-type": "application/json", "x-request-id": requestId, "request-id": requestId, ...headers };
}

/** A failure in Anthropic's shape, with the failure's headers (`retry-after` …) and the rate headers that still apply. */
export function anthropicFailed(failure: Failure, requestId: string, headers: Record<string, string> = {}): Response {
  const { status, body } = failureToAnthropicError(failure);
  return new Response(JSON.stringify(body), { status, headers: replyHeaders(requestId, { ...errorHeaders(failure), ...headers }) });
}

export async function createMessage(
  request: Request,
  requestId: string,
  deps: EdgeDeps,
  set: { headers: Record<string, string | number> },
) {
  const { result, wire } = await chatThroughWire<MessagesRequest>(deps, request, requestId, messagesToChat);
  if (result.kind === "refused") return anthropicFailed(result.failure, requestId, result.headers);
  const ctx = { requestId, model: wire!.model };
  if (result.kind === "json") {
    const reply = parseChatCompletion(result.body);
    if (!reply)
      return anthropicFailed(fail("upstream_error", "The upstream reply could not be read as a completion."), requestId, result.headers);
    return new Response(JSON.stringify(chatToMessage(reply, ctx)), { status: 200, headers: replyHeaders(requestId, result.headers) });
  }
  streamHeaders(set, requestId, result.headers);
  set.headers["request-id"] = requestId;
  return wireBody(result.relay, new MessagesStream(ctx));
}

/**
 * The prompt's tokens by the gateway's own count (o200k_base with OpenAI's template counts, tool
 * definitions and calls by their JSON): what admission and billing without a usage report use,
 * not the vendor's tokenizer. Free, but it needs a key and a chat model of the catalog.
 */
export async function countMessageTokens(request: Request, requestId: string, deps: EdgeDeps) {
  const caller = await callerOf(request, deps);
  if (isFailure(caller)) return anthropicFailed(caller, requestId);
  const read = await readJsonBodyText(request, deps.env.BODY_BYTES_MAX);
  if (isFailure(read)) return anthropicFailed(read, requestId);
  const parsed = countTokensRequest.safeParse(read.value);
  if (!parsed.success) return anthropicFailed(zodFailure(parsed.error), requestId);
  const model = operationModel(deps, parsed.data.model, "chat");
  if (isFailure(model)) return anthropicFailed(model, requestId);
  const messages = conversationToChat(parsed.data);
  if (isFailure(messages)) return anthropicFailed(messages, requestId);
  const tools = toolsToChat(parsed.data);
  if (isFailure(tools)) return anthropicFailed(tools, requestId);
  const calls = messages.flatMap((m) => (Array.isArray(m.tool_calls) ? [JSON.stringify(m.tool_calls)] : []));
  const extra = [JSON.stringify(tools.tools ?? []), ...calls].filter((text) => text !== "[]");
  const counts = await Promise.all([countPromptTokens(messages), ...extra.map((text) => countTokens(text))]);
  const inputTokens = counts.reduce((sum, n) => sum + n, 0);
  return new Response(JSON.stringify({ input_tokens: inputTokens }), { status: 200, headers: replyHeaders(requestId) });
}
