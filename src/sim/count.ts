/**
 * The vendors' free count endpoints, as the simulator counts: Anthropic's
 * `POST /v1/messages/count_tokens` (`input_tokens`: the messages by the prompt rule of tokens.ts,
 * their framing included, as a vendor's count of a request is) and Gemini's
 * `POST /v1beta/models/{m}:countTokens` (`totalTokens`: the parts' text by the same rule it counts
 * what it generates). Nothing is billed or logged: a count is free, and the log is the bill.
 */
import type { ChatContext } from "./chat.ts";
import { anthropicWire } from "./anthropic.ts";
import { geminiWire } from "./gemini.ts";
import { simCountTokens, simPromptTokens, type SimMessage } from "./tokens.ts";

const jsonHeaders = { "content-type": "application/json" } as const;

function refused(refusal: { status: number; body: string }): Response {
  return new Response(refusal.body, { status: refusal.status, headers: jsonHeaders });
}

async function jsonOf(req: Request): Promise<Record<string, unknown> | null> {
  const raw: unknown = await req.json().catch(() => null);
  return raw !== null && typeof raw === "object" && !Array.isArray(raw) ? (raw as Record<string, unknown>) : null;
}

export async function handleAnthropicCount(context: ChatContext, req: Request): Promise<Response> {
  if (!anthropicWire.authorized(context.options, req)) return refused(anthropicWire.unauthorized);
  const body = await jsonOf(req);
  if (!body || !Array.isArray(body.messages) || typeof body.model !== "string") {
    return refused(anthropicWire.invalid("count_tokens takes a model and messages."));
  }
  context.counts++;
  return Response.json({ input_tokens: simPromptTokens(body.messages as SimMessage[]) });
}

export async function handleGeminiCount(context: ChatContext, req: Request): Promise<Response> {
  if (!geminiWire.authorized(context.options, req)) return refused(geminiWire.unauthorized);
  const body = await jsonOf(req);
  if (!body || !Array.isArray(body.contents)) return refused(geminiWire.invalid("countTokens takes contents."));
  let tokens = 0;
  for (const content of body.contents as { parts?: { text?: unknown }[] }[]) {
    for (const part of content?.parts ?? []) if (typeof part?.text === "string") tokens += simCountTokens(part.text);
  }
  context.counts++;
  return Response.json({ totalTokens: tokens });
}
