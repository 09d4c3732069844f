/** Gemini generateContent reply → OpenAI `chat.completion`, with its usage. */
import { z } from "zod";
import { boundedParts } from "../../units.ts";
import { completionToOpenAI, type FinishReason, type OpenAIToolCall } from "../chatShape.ts";
import type { ChatReply, ReplyContext, Usage, UpstreamFailure } from "../types.ts";
import { parseUpstreamReply } from "../replyJson.ts";

const count = z.number().int().nonnegative().nullish();

export const geminiUsage = z.looseObject({
  promptTokenCount: count,
  candidatesTokenCount: count,
  thoughtsTokenCount: count,
  toolUsePromptTokenCount: count,
  cachedContentTokenCount: count,
});

export const geminiPart = z.looseObject({
  text: z.string().optional(),
  thought: z.boolean().optional(),
  functionCall: z.object({ id: z.string().optional(), name: z.string(), args: z.record(z.string(), z.unknown()).optional() }).optional(),
});

export const geminiCandidate = z.looseObject({
  content: z.looseObject({ parts: z.array(geminiPart).optional() }).optional(),
  finishReason: z.string().optional(),
});

export const geminiReply = z.looseObject({
  candidates: z.array(geminiCandidate).optional(),
  usageMetadata: geminiUsage.optional(),
  promptFeedback: z.looseObject({ blockReason: z.string().optional() }).optional(),
});

export type GeminiReply = z.infer<typeof geminiReply>;

/**
 * Thinking tokens are generated and billed by Google as output, though reported apart from
 * `candidatesTokenCount`; tool-use prompt tokens are input the same way. `promptTokenCount`
 * includes `cachedContentTokenCount`, the part read from a context cache (priced apart).
 *
 * @example geminiUsageToOpenAI({ promptTokenCount: 8, candidatesTokenCount: 12, thoughtsTokenCount: 30 })
 *   // { input: 8, output: 42 }
 */
export function geminiUsageToOpenAI(usage: z.infer<typeof geminiUsage>): Usage {
  return boundedParts({
    input: (usage.promptTokenCount ?? 0) + (usage.toolUsePromptTokenCount ?? 0),
    output: (usage.candidatesTokenCount ?? 0) + (usage.thoughtsTokenCount ?? 0),
    cache_read: usage.cachedContentTokenCount ?? 0,
  });
}

/** @example geminiFinishToFinishReason("MAX_TOKENS", false) // "length" */
export function geminiFinishToFinishReason(reason: string | undefined, calledTools: boolean): FinishReason | null {
  if (!reason) return null;
  switch (reason) {
    case "STOP":
      return calledTools ? "tool_calls" : "stop";
    case "MAX_TOKENS":
      return "length";
    case "SAFETY":
    case "RECITATION":
    case "BLOCKLIST":
    case "PROHIBITED_CONTENT":
    case "SPII":
    case "IMAGE_SAFETY":
      return "content_filter";
    default:
      return calledTools ? "tool_calls" : "stop";
  }
}

/** A tool call's id: Gemini's own when it gives one, else one derived from the request. */
export function geminiCallId(context: ReplyContext, id: string | undefined, index: number): string {
  return id ?? `call_${context.requestId}_${index}`;
}

/** A functionCall part's call as an OpenAI tool call with this id, its arguments as JSON text. */
export function geminiCallToOpenAI(id: string, call: { name: string; args?: Record<string, unknown> }): OpenAIToolCall {
  return { id, type: "function", function: { name: call.name, arguments: JSON.stringify(call.args ?? {}) } };
}

export function geminiToOpenAIResponse(text: string, context: ReplyContext): ChatReply | UpstreamFailure {
  const parsed = parseUpstreamReply(text, geminiReply, "a Gemini generateContent reply");
  if ("failure" in parsed) return parsed.failure;
  const reply = parsed.reply;
  const candidate = reply.candidates?.[0];
  let content = "";
  let reasoning = "";
  const toolCalls: OpenAIToolCall[] = [];
  for (const part of candidate?.content?.parts ?? []) {
    if (part.functionCall) {
      toolCalls.push(geminiCallToOpenAI(geminiCallId(context, part.functionCall.id, toolCalls.length), part.functionCall));
    } else if (typeof part.text === "string") {
      if (part.thought) reasoning += part.text;
      else content += part.text;
    }
  }
  const usage = reply.usageMetadata ? geminiUsageToOpenAI(reply.usageMetadata) : null;
  const blocked = !candidate && reply.promptFeedback?.blockReason;
  const finishReason = blocked ? "content_filter" : geminiFinishToFinishReason(candidate?.finishReason, toolCalls.length > 0);
  const completion = completionToOpenAI(context, {
    text: content === "" && toolCalls.length > 0 ? null : content,
    reasoning: reasoning || null,
    toolCalls,
    finishReason,
    usage,
  });
  return { ...completion, usage };
}
