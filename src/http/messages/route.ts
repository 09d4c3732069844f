/**
 * POST /v1/messages and POST /v1/messages/count_tokens: Anthropic's Messages API for any model of
 * the catalog (Claude Code and `@anthropic-ai/sdk` pointed at the gateway with
 * ANTHROPIC_BASE_URL). Translated to the one chat path (src/wires/messages), so that admission,
 * reserve bounds, live metering, the cut at the wallet, disconnect rules and residency are chat's.
 * The key comes as `x-api-key` or `Authorization: Bearer`; `anthropic-version`
 * and `?beta=true` are accepted and change nothing; `anthropic-beta` names are checked against the
 * list in src/operations/chat/betas.ts (an unknown or refused one is a 400). Errors keep Anthropic's shape.
 */
import { errorHeaders, isFailure, type Failure } from "../../errors.ts";
import { failureToAnthropicError } from "../../wires/messages/errors.ts";
import {
  conversationToChat,
  countTokensRequest,
  messagesOutputLimit,
  messagesToChat,
  toolsToChat,
  type MessagesRequest,
} from "../../wires/messages/request.ts";
import { chatToMessage } from "../../wires/messages/response.ts";
import { MessagesStream } from "../../wires/messages/stream.ts";
import type { FreeGate } from "../../admission/free.ts";
import type { GatewayDeps } from "../../admission/deps.ts";
import { zodFailure } from "../guard.ts";
import { credentialsOf } from "../request.ts";
import { wireBody } from "../../wires/through.ts";
import { chatThroughWire, type CountRequest, countTranslatedPrompt, presentedReply, streamHeaders } from "../translated.ts";

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
  deps: GatewayDeps,
  set: { headers: Record<string, string | number> },
) {
  // Anthropic lowers a max_tokens the window cannot hold (the stop reason tells), as Claude Code expects.
  const { result, wire } = await chatThroughWire<MessagesRequest>(
    deps,
    request,
    requestId,
    {
      translate: messagesToChat,
      present: (reply, wire, facts) => chatToMessage(reply, { requestId, model: wire.model }, facts.hostedCalls),
    },
    { lowerToWindow: true, outputLimitWording: messagesOutputLimit },
  );
  if (result.kind === "refused") return anthropicFailed(result.failure, requestId, result.headers);
  if (result.kind === "reply") return presentedReply(result, replyHeaders(requestId));
  const ctx = { requestId, model: wire!.model };
  streamHeaders(set, requestId, result.headers);
  set.headers["request-id"] = requestId;
  // message_start's input count when the backend tells none at its start (LangChain reads it there).
  return wireBody(result.relay, new MessagesStream(ctx, await result.relay.inputTokensCounted()));
}

/** POST /v1/messages/count_tokens: the prompt's tokens by the gateway's own count (translated.ts countTranslatedPrompt). */
export async function countMessageTokens(request: Request, requestId: string, deps: GatewayDeps, gate: FreeGate) {
  const counted = await countTranslatedPrompt(request, deps, gate, { credentials: credentialsOf(request), read: countRequestOf });
  if (isFailure(counted)) return anthropicFailed(counted, requestId);
  return new Response(JSON.stringify({ input_tokens: counted }), { status: 200, headers: replyHeaders(requestId) });
}

function countRequestOf(raw: unknown): CountRequest | Failure {
  const parsed = countTokensRequest.safeParse(raw);
  if (!parsed.success) return zodFailure(parsed.error);
  const prompt = () => {
    const messages = conversationToChat(parsed.data);
    if (isFailure(messages)) return messages;
    const tools = toolsToChat(parsed.data);
    return isFailure(tools) ? tools : { messages, tools: tools.tools };
  };
  return { model: parsed.data.model, prompt };
}
