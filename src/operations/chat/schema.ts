/**
 * The chat completion request as the gateway checks it: the fields of the OpenAI spec
 * (`CreateChatCompletionRequest`, kept in test/fixtures/openai-chat-request.schema.json) plus each
 * adapter's named extras (CHAT_ADAPTER_EXTRAS), and nothing else. An unknown field is refused with
 * a 400 naming it, never forwarded: a field the gateway does not know is a field it cannot price.
 * Fields that change the upstream's price or keep customer data are known but refused unless the
 * pool enables them (paidFields.ts in this folder).
 */
import { z } from "zod";
import { FUNCTION_NAME_CHARS_MAX } from "../../tokens/count.ts";

/** Choices per request: the output budget, and so the reserve, is multiplied by n. */
export const CHOICES_MAX = 8;
export const MESSAGES_MAX = 100_000;
/** Tools or legacy functions per request. */
export const TOOLS_MAX = 1_000;
/** Stop sequences per request (the spec's limit). */
export const STOP_SEQUENCES_MAX = 4;
/** Output tokens a request may ask for at most (the model's window bounds it further). */
export const CHAT_TOKENS_MAX = 100_000_000;
const TOKENS_MAX = CHAT_TOKENS_MAX;

/**
 * Fields an adapter sends on top of the spec, by path. vLLM (`openai` kind): running usage on
 * every stream chunk, which the meter reads.
 */
export const CHAT_ADAPTER_EXTRAS = [
  "stream_options.continuous_usage_stats",
  // Anthropic's prompt-cache marks, passed to Anthropic backends and priced (src/operations/chat/cache.ts).
  "cache_control",
  "messages.cache_control",
  "messages.content.cache_control",
  "tools.cache_control",
  // Anthropic's own request fields, passed to Anthropic backends as sent and dropped for others.
  "anthropic",
] as const;

/** Betas one request may name, and the characters of each (Anthropic's names are short). */
export const ANTHROPIC_BETAS_MAX = 64;
export const ANTHROPIC_BETA_CHARS_MAX = 128;
/** Context-management edits one request may carry. */
export const CONTEXT_EDITS_MAX = 16;

const tokens = z.number().int().min(1).max(TOKENS_MAX);
const jsonObject = z.record(z.string(), z.unknown());

/**
 * The most calls of a vendor-run tool one request may make (Anthropic's web search `max_uses`):
 * a client's larger value, or none (unbounded at the vendor), is lowered to this.
 */
export const HOSTED_TOOL_CALLS_MAX = 10;

/**
 * Anthropic's web search tool as the Messages wire received it (`web_search_20250305` and later
 * versions), its domain and location settings passed on as they are; `max_uses` is replaced by
 * the calls the hold covers (src/operations/chat/hosted.ts).
 */
export const anthropicWebSearch = z.looseObject({
  type: z.string().regex(/^web_search_\d{8}$/),
  name: z.literal("web_search"),
  max_uses: z.number().int().min(1).max(TOKENS_MAX).optional(),
});
export type AnthropicWebSearch = z.infer<typeof anthropicWebSearch>;

/**
 * Anthropic's request fields without a chat counterpart, as Claude Code sends them: `thinking`
 * (enabled with a budget, adaptive, disabled), `output_config` (effort, structured output),
 * `context_management` (edits that clear old thinking or tool results), the `anthropic-beta`
 * names and the web search tool. The Messages wire fills it; the Anthropic adapter sends it on, within the output budget
 * the reserve covers (thinking counts toward max_tokens there).
 */
export const anthropicExtras = z.strictObject({
  thinking: z
    .union([
      z.strictObject({ type: z.literal("enabled"), budget_tokens: tokens, display: z.enum(["summarized", "omitted"]).optional() }),
      z.strictObject({ type: z.literal("adaptive"), display: z.enum(["summarized", "omitted"]).optional() }),
      z.strictObject({ type: z.literal("disabled") }),
    ])
    .optional(),
  output_config: z.strictObject({ effort: z.enum(["low", "medium", "high", "max"]).optional(), format: jsonObject.optional() }).optional(),
  context_management: z.strictObject({ edits: z.array(jsonObject).max(CONTEXT_EDITS_MAX) }).optional(),
  betas: z.array(z.string().min(1).max(ANTHROPIC_BETA_CHARS_MAX)).max(ANTHROPIC_BETAS_MAX).optional(),
  /** Anthropic's web search, run by the vendor and billed per call (`web_search_call`). */
  web_search: anthropicWebSearch.optional(),
});
export type AnthropicExtras = z.infer<typeof anthropicExtras>;

const functionName = z.string().min(1).max(FUNCTION_NAME_CHARS_MAX);
const cacheBreakpoint = z.strictObject({ mode: z.literal("explicit").optional() }).optional();
/** Anthropic's prompt-cache mark (an adapter extra: CHAT_ADAPTER_EXTRAS). */
const cacheControl = z.strictObject({ type: z.literal("ephemeral"), ttl: z.enum(["5m", "1h"]).optional() }).optional();

const textPart = z.strictObject({
  type: z.literal("text"),
  text: z.string(),
  prompt_cache_breakpoint: cacheBreakpoint,
  cache_control: cacheControl,
});
const contentPart = z.discriminatedUnion("type", [
  textPart,
  z.strictObject({
    type: z.literal("image_url"),
    image_url: z.strictObject({ url: z.string(), detail: z.enum(["auto", "low", "high"]).optional() }),
    cache_control: cacheControl,
    prompt_cache_breakpoint: cacheBreakpoint,
  }),
  z.strictObject({
    type: z.literal("input_audio"),
    input_audio: z.strictObject({ data: z.string(), format: z.enum(["wav", "mp3"]) }),
    prompt_cache_breakpoint: cacheBreakpoint,
  }),
  z.strictObject({
    type: z.literal("file"),
    file: z.strictObject({ filename: z.string().optional(), file_data: z.string().optional(), file_id: z.string().optional() }),
    prompt_cache_breakpoint: cacheBreakpoint,
  }),
  z.strictObject({ type: z.literal("refusal"), refusal: z.string() }),
]);

const toolCall = z.union([
  z.strictObject({
    id: z.string(),
    type: z.literal("function").optional(),
    function: z.strictObject({ name: functionName, arguments: z.string() }),
  }),
  z.strictObject({ id: z.string(), type: z.literal("custom"), custom: z.strictObject({ name: functionName, input: z.string() }) }),
]);

/**
 * Files uploaded here are for batches only (docs/batches.md): a file part that names one by
 * `file_id` is refused, naming it, until chat reads files.
 */
function fileIdRefusal(message: { content?: unknown }, ctx: z.RefinementCtx): void {
  if (!Array.isArray(message.content)) return;
  message.content.forEach((part: { type?: string; file?: { file_id?: unknown } }, i) => {
    if (part.type !== "file" || part.file?.file_id === undefined) return;
    ctx.addIssue({
      code: "custom",
      path: ["content", i, "file", "file_id"],
      message: "a file part cannot name a `file_id` here: send the file's content as `file_data`",
    });
  });
}

/** Every field a message of any role may carry in the spec. */
export const chatMessage = z
  .strictObject({
    role: z.enum(["system", "developer", "user", "assistant", "tool", "function"]),
    content: z.union([z.string(), z.array(contentPart), z.null()]).optional(),
    name: z.string().optional(),
    refusal: z.string().nullish(),
    audio: z.strictObject({ id: z.string() }).nullish(),
    tool_calls: z.array(toolCall).nullish(),
    function_call: z.strictObject({ name: functionName, arguments: z.string() }).nullish(),
    tool_call_id: z.string().optional(),
    cache_control: cacheControl,
  })
  .superRefine(fileIdRefusal);

const functionObject = z.strictObject({
  name: functionName,
  description: z.string().optional(),
  parameters: jsonObject.optional(),
  strict: z.boolean().nullish(),
});

const tool = z.discriminatedUnion("type", [
  z.strictObject({ type: z.literal("function"), function: functionObject, cache_control: cacheControl }),
  z.strictObject({
    type: z.literal("custom"),
    custom: z.strictObject({ name: functionName, description: z.string().optional(), format: jsonObject.optional() }),
  }),
]);

const toolChoice = z.union([
  z.enum(["none", "auto", "required"]),
  z.strictObject({ type: z.literal("function"), function: z.strictObject({ name: functionName }) }),
  z.strictObject({ type: z.literal("custom"), custom: z.strictObject({ name: functionName }) }),
  z.strictObject({
    type: z.literal("allowed_tools"),
    allowed_tools: z.strictObject({ mode: z.enum(["auto", "required"]), tools: z.array(jsonObject) }),
  }),
]);

const responseFormat = z.discriminatedUnion("type", [
  z.strictObject({ type: z.literal("text") }),
  z.strictObject({ type: z.literal("json_object") }),
  z.strictObject({
    type: z.literal("json_schema"),
    json_schema: z.strictObject({
      name: z.string(),
      description: z.string().optional(),
      schema: jsonObject.optional(),
      strict: z.boolean().nullish(),
    }),
  }),
]);

const webSearchLocation = z.strictObject({ country: z.string(), region: z.string(), city: z.string(), timezone: z.string() }).partial();

export const chatRequest = z.strictObject({
  model: z.string().min(1).max(256),
  cache_control: cacheControl,
  anthropic: anthropicExtras.optional(),
  messages: z.array(chatMessage).min(1).max(MESSAGES_MAX),
  stream: z.boolean().nullish(),
  stream_options: z
    .strictObject({
      include_usage: z.boolean().optional(),
      include_obfuscation: z.boolean().optional(),
      continuous_usage_stats: z.boolean().optional(),
    })
    .nullish(),
  max_tokens: tokens.nullish(),
  max_completion_tokens: tokens.nullish(),
  n: z.number().int().min(1).max(CHOICES_MAX).nullish(),
  tools: z.array(tool).max(TOOLS_MAX).nullish(),
  tool_choice: toolChoice.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  functions: z
    .array(functionObject.omit({ strict: true }))
    .min(1)
    .max(TOOLS_MAX)
    .nullish(),
  function_call: z.union([z.enum(["none", "auto"]), z.strictObject({ name: functionName })]).nullish(),
  response_format: responseFormat.nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  logit_bias: z.record(z.string(), z.number().int().min(-100).max(100)).nullish(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().min(0).max(20).nullish(),
  stop: z.union([z.string(), z.array(z.string()).min(1).max(STOP_SEQUENCES_MAX)]).nullish(),
  seed: z.number().int().nullish(),
  user: z.string().nullish(),
  metadata: z.record(z.string().max(64), z.string().max(512)).nullish(),
  safety_identifier: z.string().max(64).nullish(),
  prompt_cache_key: z.string().nullish(),
  prompt_cache_retention: z.enum(["in_memory", "24h"]).nullish(),
  prompt_cache_options: z.strictObject({ ttl: z.literal("30m").optional(), mode: z.enum(["implicit", "explicit"]).optional() }).nullish(),
  moderation: z.strictObject({ model: z.string(), policy: jsonObject.nullish() }).nullish(),
  reasoning_effort: z.enum(["none", "minimal", "low", "medium", "high", "xhigh", "max"]).nullish(),
  verbosity: z.enum(["low", "medium", "high"]).nullish(),
  // Known, and refused unless the pool enables them (paidFields.ts): they change the price or keep data.
  service_tier: z.enum(["auto", "default", "flex", "scale", "priority", "fast"]).nullish(),
  store: z.boolean().nullish(),
  prediction: z.strictObject({ type: z.literal("content"), content: z.union([z.string(), z.array(textPart).min(1)]) }).nullish(),
  web_search_options: z
    .strictObject({
      user_location: z.strictObject({ type: z.literal("approximate"), approximate: webSearchLocation }).nullish(),
      search_context_size: z.enum(["low", "medium", "high"]).optional(),
    })
    .nullish(),
  modalities: z.array(z.enum(["text", "audio"])).nullish(),
  audio: z
    .strictObject({
      voice: z.union([z.string(), z.strictObject({ id: z.string() })]),
      format: z.enum(["wav", "aac", "mp3", "flac", "opus", "pcm16"]),
    })
    .nullish(),
});

export type ChatRequest = z.infer<typeof chatRequest>;

const ROLES = new Set(["system", "developer", "user", "assistant", "tool", "function"]);
/** The fields the hot path checks by hand; a body with any other field goes to zod. */
const PLAIN_FIELDS = new Set([
  "model",
  "messages",
  "stream",
  "stream_options",
  "max_tokens",
  "max_completion_tokens",
  "n",
  "temperature",
  "top_p",
]);

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const absent = (v: unknown) => v === undefined || v === null;
const intIn = (v: unknown, min: number, max: number) => typeof v === "number" && Number.isInteger(v) && v >= min && v <= max;
const numberIn = (v: unknown, min: number, max: number) => absent(v) || (typeof v === "number" && v >= min && v <= max);

function textPartOk(part: unknown): boolean {
  if (!isObject(part) || part.type !== "text" || typeof part.text !== "string") return false;
  for (const field in part) if (field !== "type" && field !== "text") return false;
  return true;
}

function messageOk(m: unknown): boolean {
  if (!isObject(m) || typeof m.role !== "string" || !ROLES.has(m.role)) return false;
  for (const field in m) if (field !== "role" && field !== "content" && field !== "name") return false;
  const c = m.content;
  if (Array.isArray(c)) {
    for (const part of c) if (!textPartOk(part)) return false;
  } else if (!(c === undefined || c === null || typeof c === "string")) return false;
  return m.name === undefined || typeof m.name === "string";
}

function streamOptionsOk(options: unknown): boolean {
  if (absent(options)) return true;
  if (!isObject(options)) return false;
  for (const field in options) if (field !== "include_usage" || typeof options[field] !== "boolean") return false;
  return true;
}

/**
 * A subset of `chatRequest`'s rules, hand-written for the hot path: plain messages (text only)
 * and the common sampling fields. A body it accepts, zod accepts too (a test holds the two
 * together), so only other bodies pay for zod, which then names the field at fault or accepts
 * them. Parsing every message with zod cost about a seventh of the throughput.
 */
export function isPlainChatRequest(raw: unknown): raw is ChatRequest {
  if (!isObject(raw)) return false;
  for (const field in raw) if (!PLAIN_FIELDS.has(field)) return false;
  const { model, messages, stream, stream_options: options, max_tokens, max_completion_tokens, n } = raw;
  if (typeof model !== "string" || model.length < 1 || model.length > 256) return false;
  if (!Array.isArray(messages) || messages.length < 1 || messages.length > MESSAGES_MAX) return false;
  for (const m of messages) if (!messageOk(m)) return false;
  if (!(absent(stream) || typeof stream === "boolean") || !streamOptionsOk(options)) return false;
  if (!(absent(max_tokens) || intIn(max_tokens, 1, TOKENS_MAX))) return false;
  if (!(absent(max_completion_tokens) || intIn(max_completion_tokens, 1, TOKENS_MAX))) return false;
  if (!(absent(n) || intIn(n, 1, CHOICES_MAX))) return false;
  return numberIn(raw.temperature, 0, 2) && numberIn(raw.top_p, 0, 1);
}
