/** Builds OpenAI-style requests (OpenAI, vLLM, SGLang, TGI and other compatible servers). */
import type { ChatRequestInput, JsonUpstreamRequest } from "../types.ts";

/**
 * The client's body with our model id mapped to the upstream's, the output budget enforced and
 * usage always requested for streams. Every other field passes through as the client sent it (the
 * edge has refused any field outside the spec and the named extras: src/operations/chat/schema.ts).
 */
export function chatToOpenAIRequest(input: ChatRequestInput, apiKey: string | undefined): JsonUpstreamRequest {
  const body: Record<string, unknown> = { ...input.body, model: input.upstreamModel };
  // Anthropic's own fields (chat/schema.ts anthropicExtras) are for Anthropic backends only.
  delete body.anthropic;
  // Reasoning models accept only max_completion_tokens; keep whichever field the client used.
  if (body.max_completion_tokens !== undefined && body.max_completion_tokens !== null) {
    body.max_completion_tokens = input.maxTokens;
    delete body.max_tokens;
  } else {
    body.max_tokens = input.maxTokens;
  }
  if (input.stream) {
    const clientOptions = (body.stream_options as Record<string, unknown> | null | undefined) ?? {};
    body.stream_options = { ...clientOptions, include_usage: true };
  }
  const headers: Record<string, string> = {
    "content-type": "application/json",
    accept: input.stream ? "text/event-stream" : "application/json",
  };
  if (apiKey) headers.authorization = `Bearer ${apiKey}`;
  return { path: "/chat/completions", body: JSON.stringify(body), headers };
}
