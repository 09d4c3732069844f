/**
 * The gateway's chat reply → a Gemini `GenerateContentResponse`. The reverse of the Gemini
 * adapter's reading (src/providers/gemini/response.ts): reasoning becomes a `thought` text part,
 * text a text part, each tool call a `functionCall` part with its arguments as an object and the
 * call's id (sent back on its `functionResponse`). `usageMetadata` holds the billed counts.
 */
import { argumentsToObject } from "../../providers/chatShape.ts";
import type { ChatCompletion, ChatUsage } from "../chat.ts";

export interface GeminiContext {
  /** The gateway's request id: the reply's `responseId`. */
  requestId: string;
  /** The model id the client named in the path. */
  model: string;
}

export type GeminiFinishReason = "STOP" | "MAX_TOKENS" | "SAFETY";

/** @example finishReasonToGemini("length") // "MAX_TOKENS" */
export function finishReasonToGemini(finish: string | null | undefined): GeminiFinishReason {
  if (finish === "length") return "MAX_TOKENS";
  return finish === "content_filter" ? "SAFETY" : "STOP";
}

/** The billed counts: thoughts are output billed apart from the candidates' own tokens. */
export function usageToGemini(usage: ChatUsage | null): Record<string, number> {
  const prompt = usage?.prompt_tokens ?? 0;
  const output = usage?.completion_tokens ?? 0;
  const thoughts = Math.min(output, usage?.completion_tokens_details?.reasoning_tokens ?? 0);
  const metadata: Record<string, number> = {
    promptTokenCount: prompt,
    candidatesTokenCount: output - thoughts,
    totalTokenCount: prompt + output,
  };
  if (thoughts > 0) metadata.thoughtsTokenCount = thoughts;
  const cached = usage?.prompt_tokens_details?.cached_tokens ?? 0;
  if (cached > 0) metadata.cachedContentTokenCount = cached;
  return metadata;
}

export function functionCallPart(call: { id: string; name: string; arguments: string }): Record<string, unknown> {
  return { functionCall: { id: call.id, name: call.name, args: argumentsToObject(call.arguments) } };
}

/** One response event: a candidate with these parts, and the finish reason and usage when known. */
export function geminiResponse(
  ctx: GeminiContext,
  parts: Record<string, unknown>[],
  end: { finishReason: GeminiFinishReason; usage: ChatUsage | null } | null,
): Record<string, unknown> {
  const candidate: Record<string, unknown> = { content: { role: "model", parts }, index: 0 };
  if (end) candidate.finishReason = end.finishReason;
  const response: Record<string, unknown> = { candidates: [candidate] };
  if (end) response.usageMetadata = usageToGemini(end.usage);
  response.modelVersion = ctx.model;
  response.responseId = ctx.requestId;
  return response;
}

/**
 * A whole chat completion as a GenerateContentResponse.
 * @example chatToGemini(chatCompletionOf(json)!, ctx) // { candidates: [{ content: { role: "model", parts: [{ text }] }, finishReason: "STOP" }], usageMetadata, … }
 */
export function chatToGemini(reply: ChatCompletion, ctx: GeminiContext): Record<string, unknown> {
  const choice = reply.choices[0]!;
  const parts: Record<string, unknown>[] = [];
  if (choice.message.reasoning_content) parts.push({ text: choice.message.reasoning_content, thought: true });
  const text = choice.message.content ?? choice.message.refusal ?? "";
  if (text !== "") parts.push({ text });
  for (const call of choice.message.tool_calls ?? []) parts.push(functionCallPart({ id: call.id, ...call.function }));
  return geminiResponse(ctx, parts, { finishReason: finishReasonToGemini(choice.finish_reason), usage: reply.usage ?? null });
}
