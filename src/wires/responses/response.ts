/**
 * The gateway's chat reply → an OpenAI Responses `response` object. The reply's finish reason
 * decides the status: `length` (the output budget, or the hold cut at the wallet) is
 * `incomplete` with reason `max_output_tokens`; `content_filter` is `incomplete` with reason
 * `content_filter`; anything else is `completed`.
 */
import type { Failure } from "../../errors.ts";
import type { ChatCompletion, ChatUsage } from "../chat.ts";
import type { ResponsesRequest } from "./request.ts";

/** What the translation needs beyond the reply; given by the caller, so nothing here reads a clock. */
export interface ResponsesContext {
  /** The gateway's request id: `resp_<requestId>` is the response's id. */
  requestId: string;
  /** The model id the client asked for (the catalog id). */
  model: string;
  /** Unix seconds. */
  createdAt: number;
  request: ResponsesRequest;
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

export function usageToResponses(usage: ChatUsage) {
  return {
    input_tokens: usage.prompt_tokens,
    input_tokens_details: { cached_tokens: usage.prompt_tokens_details?.cached_tokens ?? 0, cache_write_tokens: 0 },
    output_tokens: usage.completion_tokens,
    output_tokens_details: { reasoning_tokens: usage.completion_tokens_details?.reasoning_tokens ?? 0 },
    total_tokens: usage.prompt_tokens + usage.completion_tokens,
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

export function functionCallItem(
  call: { callId: string; name: string; arguments: string },
  status: "in_progress" | "completed" | "incomplete",
) {
  return {
    type: "function_call",
    id: functionCallItemId(call.callId),
    call_id: call.callId,
    name: call.name,
    arguments: call.arguments,
    status,
  };
}

/**
 * A whole chat completion as a `response` object.
 * @example chatToResponse(parseChatCompletion(body)!, ctx, nowS) // { object: "response", status: "completed", output: [...] }
 */
export function chatToResponse(reply: ChatCompletion, ctx: ResponsesContext, completedAt: number): Record<string, unknown> {
  const choice = reply.choices[0]!;
  const { status } = finishReasonToStatus(choice.finish_reason);
  const output: Record<string, unknown>[] = [];
  const text = choice.message.content ?? choice.message.refusal ?? "";
  if (text !== "") output.push(messageItem(ctx, text, status === "completed" ? "completed" : "incomplete"));
  for (const call of choice.message.tool_calls ?? []) {
    output.push(functionCallItem({ callId: call.id, name: call.function.name, arguments: call.function.arguments }, "completed"));
  }
  return responseObject(ctx, { status, output, usage: reply.usage ?? null, finishReason: choice.finish_reason, completedAt });
}
