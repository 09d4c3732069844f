/**
 * The parts of an OpenAI chat request that translating adapters read, as zod schemas, and the
 * OpenAI reply shapes they write. Shared by anthropic/ and gemini/ so both read one definition of
 * what a client may send, and both write the same `chat.completion(.chunk)` JSON.
 */
import { z } from "zod";
import type { ReplyContext, Usage } from "./types.ts";
import type { ChatChunk, ChunkDelta } from "./chunk.ts";

/**
 * A prompt-cache mark, as Anthropic reads it: the prompt up to here may be cached. Only the
 * 5-minute cache is priced in the catalog, so a `ttl` is not passed on (the default, 5 minutes,
 * applies); a mark of another shape is dropped.
 */
export const cacheControl = z
  .object({ type: z.literal("ephemeral") })
  .transform(() => ({ type: "ephemeral" as const }))
  .optional()
  .catch(undefined);

export const textPart = z.object({ type: z.literal("text"), text: z.string(), cache_control: cacheControl });
export const imagePart = z.object({
  type: z.literal("image_url"),
  image_url: z.union([z.string(), z.object({ url: z.string(), detail: z.string().optional() })]),
  cache_control: cacheControl,
});
/** Parts we do not translate (audio, files) are kept as unknown and dropped by the adapters. */
export const contentPart = z.union([textPart, imagePart, z.looseObject({ type: z.string() })]);
export const content = z.union([z.string(), z.array(contentPart), z.null()]).optional();

export const toolCall = z.object({
  id: z.string(),
  type: z.literal("function").optional(),
  function: z.object({ name: z.string(), arguments: z.string() }),
});

export const message = z.looseObject({
  role: z.enum(["system", "developer", "user", "assistant", "tool", "function"]),
  content,
  name: z.string().optional(),
  tool_calls: z.array(toolCall).nullish(),
  tool_call_id: z.string().optional(),
  /** A mark on the message itself applies to its last content block. */
  cache_control: cacheControl,
});

export const tool = z.object({
  type: z.literal("function"),
  function: z.object({
    name: z.string(),
    description: z.string().optional(),
    parameters: z.record(z.string(), z.unknown()).optional(),
  }),
  cache_control: cacheControl,
});

export const toolChoice = z.union([
  z.enum(["auto", "none", "required"]),
  z.object({ type: z.literal("function"), function: z.object({ name: z.string() }) }),
]);

/** What the translating adapters read; the gateway's own schema checked the rest. */
export const chatShape = z.looseObject({
  messages: z.array(message),
  temperature: z.number().nullish(),
  top_p: z.number().nullish(),
  stop: z.union([z.string(), z.array(z.string())]).nullish(),
  tools: z.array(tool).nullish(),
  tool_choice: toolChoice.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  user: z.string().nullish(),
  seed: z.number().int().nullish(),
  presence_penalty: z.number().nullish(),
  frequency_penalty: z.number().nullish(),
  response_format: z.looseObject({ type: z.string() }).nullish(),
  /** Anthropic's automatic caching: the prompt up to its last cacheable block may be cached. */
  cache_control: cacheControl,
});

export type ChatShape = z.infer<typeof chatShape>;
export type ChatMessage = z.infer<typeof message>;
export type ContentPart = z.infer<typeof contentPart>;

/**
 * The request as the adapters read it, field by field: a field of a shape the adapters cannot
 * translate is dropped alone (the gateway's own schema already accepted the body), so one odd
 * field never costs the others and a translation never throws.
 */
export function readChatShape(body: Record<string, unknown>): ChatShape {
  const read: Record<string, unknown> = {};
  for (const [key, schema] of Object.entries(chatShape.shape)) {
    const parsed = schema.safeParse(body[key]);
    if (parsed.success && parsed.data !== undefined) read[key] = parsed.data;
  }
  read.messages ??= [];
  return read as ChatShape;
}

/** The text of a content field: the string, or the text parts joined. */
export function contentText(value: ChatMessage["content"]): string {
  if (typeof value === "string") return value;
  if (!value) return "";
  return value.map((part) => (part.type === "text" && "text" in part && typeof part.text === "string" ? part.text : "")).join("");
}

/** `data:<mime>;base64,<data>` split, or null for any other URL. */
export function dataUrlToInline(url: string): { mimeType: string; data: string } | null {
  const match = /^data:([^;,]+);base64,(.*)$/s.exec(url);
  return match ? { mimeType: match[1]!, data: match[2]! } : null;
}

export function imageUrlOf(part: z.infer<typeof imagePart>): string {
  return typeof part.image_url === "string" ? part.image_url : part.image_url.url;
}

/** Tool-call arguments as the object the vendors want; arguments that are not a JSON object become `{}`. */
export function argumentsToObject(text: string): Record<string, unknown> {
  try {
    const value = JSON.parse(text) as unknown;
    return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

export type FinishReason = "stop" | "length" | "tool_calls" | "content_filter";

export interface OpenAIToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/**
 * Usage in OpenAI's shape: cache reads as `prompt_tokens_details.cached_tokens`, as OpenAI reports
 * them; cache writes, which OpenAI's shape lacks, as `cache_write_tokens` beside them.
 * @example usageToOpenAI({ input: 10, output: 2, cache_read: 8 })
 *   // { prompt_tokens: 10, completion_tokens: 2, total_tokens: 12, prompt_tokens_details: { cached_tokens: 8 } }
 */
export function usageToOpenAI(usage: Usage) {
  const base = {
    prompt_tokens: usage.input,
    completion_tokens: usage.output,
    total_tokens: usage.input + usage.output,
  };
  const read = usage.cache_read ?? 0;
  const write = usage.cache_write ?? 0;
  if (read === 0 && write === 0) return base;
  return { ...base, prompt_tokens_details: { cached_tokens: read, ...(write > 0 ? { cache_write_tokens: write } : {}) } };
}

export interface CompletionParts {
  text: string | null;
  reasoning: string | null;
  toolCalls: OpenAIToolCall[];
  finishReason: FinishReason | null;
  usage: Usage | null;
  /** The vendor's own content blocks, kept when they hold a vendor-run tool's blocks (`anthropic_content`). */
  vendorContent?: unknown[];
}

/** A whole `chat.completion` body. */
export function completionToOpenAI(context: ReplyContext, parts: CompletionParts): { body: string; json: unknown } {
  const message: Record<string, unknown> = { role: "assistant", content: parts.text, refusal: null };
  if (parts.reasoning) message.reasoning_content = parts.reasoning;
  if (parts.toolCalls.length > 0) message.tool_calls = parts.toolCalls;
  if (parts.vendorContent) message.anthropic_content = parts.vendorContent;
  const json = {
    id: `chatcmpl-${context.requestId}`,
    object: "chat.completion",
    created: context.created,
    model: context.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: parts.finishReason ?? "stop" }],
    ...(parts.usage ? { usage: usageToOpenAI(parts.usage) } : {}),
  };
  return { body: JSON.stringify(json), json };
}

/** One `chat.completion.chunk` with a single choice. */
export function chunkToOpenAI(context: ReplyContext, delta: ChunkDelta, finishReason: FinishReason | null = null): ChatChunk {
  return {
    id: `chatcmpl-${context.requestId}`,
    object: "chat.completion.chunk",
    created: context.created,
    model: context.model,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
  };
}

/** The usage-only chunk (empty `choices`) that ends an OpenAI stream when usage was asked for. */
export function usageChunkToOpenAI(context: ReplyContext, usage: Usage): ChatChunk {
  return {
    id: `chatcmpl-${context.requestId}`,
    object: "chat.completion.chunk",
    created: context.created,
    model: context.model,
    choices: [],
    usage: usageToOpenAI(usage),
  };
}

/** The generated fields of an OpenAI-style reply message or stream delta: what its output tokens were spent on. */
export interface GeneratedFields {
  content?: unknown;
  refusal?: unknown;
  reasoning_content?: unknown;
  tool_calls?: { function?: { name?: unknown; arguments?: unknown } }[] | unknown;
}

/**
 * A message's (or a delta's) generated text: content, refusal, visible reasoning, tool calls'
 * names and arguments, joined without a separator (a stream's pieces join the same way, so a word
 * split between two deltas is one word: a lower bound of the output either way).
 * @example generatedText({ content: "Hi", refusal: null, tool_calls: [{ function: { name: "f", arguments: "{}" } }] }) // "Hif{}"
 */
export function generatedText(fields: GeneratedFields): string {
  let text = "";
  if (typeof fields.content === "string") text += fields.content;
  if (typeof fields.refusal === "string") text += fields.refusal;
  if (typeof fields.reasoning_content === "string") text += fields.reasoning_content;
  if (Array.isArray(fields.tool_calls)) {
    for (const call of fields.tool_calls as { function?: { name?: unknown; arguments?: unknown } }[]) {
      if (typeof call?.function?.name === "string") text += call.function.name;
      if (typeof call?.function?.arguments === "string") text += call.function.arguments;
    }
  }
  return text;
}
