/**
 * The chat completion request as the gateway checks it. Only what the gateway itself relies on
 * is checked strictly; every other standard or vendor field passes through to the upstream.
 */
import { z } from "zod";

/** Choices per request: the output budget, and so the reserve, is multiplied by n. */
export const CHOICES_MAX = 8;
export const MESSAGES_MAX = 100_000;

/** Output tokens a request may ask for at most (the model's window bounds it further). */
export const CHAT_TOKENS_MAX = 100_000_000;

const tokens = z.number().int().min(1).max(CHAT_TOKENS_MAX);

export const chatMessage = z.looseObject({
  role: z.enum(["system", "developer", "user", "assistant", "tool", "function"]),
  content: z.union([z.string(), z.array(z.unknown()), z.null()]).optional(),
  name: z.string().optional(),
});

export const chatRequest = z.looseObject({
  model: z.string().min(1).max(256),
  messages: z.array(chatMessage).min(1).max(MESSAGES_MAX),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullish(),
  max_tokens: tokens.nullish(),
  max_completion_tokens: tokens.nullish(),
  n: z.number().int().min(1).max(CHOICES_MAX).nullish(),
  tools: z.array(z.unknown()).max(1_000).nullish(),
});

export type ChatRequest = z.infer<typeof chatRequest>;

const ROLES = new Set(["system", "developer", "user", "assistant", "tool", "function"]);
const TOOLS_MAX = 1_000;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const absent = (v: unknown) => v === undefined || v === null;
const intIn = (v: unknown, min: number, max: number) => typeof v === "number" && Number.isInteger(v) && v >= min && v <= max;

function messageOk(m: unknown): boolean {
  if (!isObject(m) || typeof m.role !== "string" || !ROLES.has(m.role)) return false;
  const c = m.content;
  if (!(c === undefined || c === null || typeof c === "string" || Array.isArray(c))) return false;
  return m.name === undefined || typeof m.name === "string";
}

/**
 * The same rules as `chatRequest`, hand-written for the hot path: a body it accepts, zod accepts
 * too (a test holds the two together), so only bodies it refuses pay for zod, which then names
 * the field at fault. Parsing every message with zod cost about a seventh of the throughput.
 */
export function isPlainChatRequest(raw: unknown): raw is ChatRequest {
  if (!isObject(raw)) return false;
  const { model, messages, stream, stream_options: options, max_tokens, max_completion_tokens, n, tools } = raw;
  if (typeof model !== "string" || model.length < 1 || model.length > 256) return false;
  if (!Array.isArray(messages) || messages.length < 1 || messages.length > MESSAGES_MAX) return false;
  for (const m of messages) if (!messageOk(m)) return false;
  if (!(absent(stream) || typeof stream === "boolean")) return false;
  if (!(absent(options) || (isObject(options) && (options.include_usage === undefined || typeof options.include_usage === "boolean")))) return false;
  if (!(absent(max_tokens) || intIn(max_tokens, 1, CHAT_TOKENS_MAX))) return false;
  if (!(absent(max_completion_tokens) || intIn(max_completion_tokens, 1, CHAT_TOKENS_MAX))) return false;
  if (!(absent(n) || intIn(n, 1, CHOICES_MAX))) return false;
  return absent(tools) || (Array.isArray(tools) && tools.length <= TOOLS_MAX);
}
