/** Simulator knobs and the request body it accepts; both validated with zod at the boundary. */
import { z } from "zod";

const rate = z.number().min(0).max(1);
const chunkCount = z.number().int().min(0).nullable();

export const SimOptionsSchema = z.object({
  /** 0 picks an ephemeral port. */
  port: z.number().int().min(0).max(65535).default(0),
  /** Keys the output words and the failure rolls. */
  seed: z.number().int().default(1),
  /** Wait before the first content token (for non-stream: part of the total wait). */
  ttftMs: z.number().min(0).default(0),
  /** Wait between content tokens. */
  itlMs: z.number().min(0).default(0),
  /** Tokens generated without max_tokens; with it, min(max_tokens, outputTokens). */
  outputTokens: z.number().int().min(0).default(16),
  /** Share of requests answered 500 before any byte. */
  failRate: rate.default(0),
  /** Share of requests answered 429 with `retry-after: 1`. */
  rateLimitRate: rate.default(0),
  /** Streams only: drop the connection, unterminated, after this many content chunks. */
  failAfterChunks: chunkCount.default(null),
  /** Streams only: go silent, connection open, after this many content chunks. */
  stallAfterChunks: chunkCount.default(null),
  /** Never report usage, like an upstream that ignores `stream_options`. */
  omitUsage: z.boolean().default(false),
  /**
   * OpenAI chat wire: the usage reported is the true one times this, rounded (an upstream whose
   * usage lies high or low); the log keeps the truth.
   */
  usageScale: z.number().min(0).max(10_000_000).default(1),
  /**
   * What the log bills for a request its caller cancelled: `sent`, the tokens generated until
   * the cancel; `all`, every token it would have generated (vendors do not document which).
   */
  cancelBills: z.enum(["sent", "all"]).default("sent"),
  /**
   * The `service_tier` a reply reports serving when the request asked for one other than auto or
   * default (OpenAI serves `default` when a `priority` request finds no priority capacity); null:
   * the tier asked for.
   */
  servedServiceTier: z.enum(["default", "flex", "scale", "priority"]).nullable().default(null),
  /**
   * Wire formats served: `all` (the default) serves every route at once; otherwise only that
   * vendor's routes answer and the others are 404.
   */
  flavor: z.enum(["all", "openai", "anthropic", "gemini"]).default("all"),
  /** Gemini flavor: thinking tokens reported as `thoughtsTokenCount` and logged as completion tokens. */
  thoughtTokens: z.number().int().min(0).default(0),
  /**
   * Prompt tokens reported as read from the vendor's prompt cache (at most the prompt): OpenAI
   * `prompt_tokens_details.cached_tokens`, Gemini `cachedContentTokenCount`, Anthropic
   * `cache_read_input_tokens`. Logged with the request.
   */
  cacheReadTokens: z.number().int().min(0).default(0),
  /**
   * Anthropic flavor: prompt tokens reported as written to the cache
   * (`cache_creation_input_tokens`, at most what the reads leave); OpenAI and Gemini report none.
   */
  cacheWriteTokens: z.number().int().min(0).default(0),
  /**
   * Anthropic flavor: the part of the writes reported as kept for an hour
   * (`cache_creation.ephemeral_1h_input_tokens`, at most the writes); the rest are 5-minute writes.
   */
  cacheWrite1hTokens: z.number().int().min(0).default(0),
  /**
   * Anthropic flavor: web searches made when the request offers the web search tool
   * (`web_search_20250305` …), at most its `max_uses`; each is billed per call in the log
   * (`webSearchCalls`) and its results add `webSearchResultTokens` input tokens.
   */
  webSearchCalls: z.number().int().min(0).default(1),
  webSearchResultTokens: z.number().int().min(0).default(500),
  /** Requests served at once; more wait in a queue (null: no limit), like a host's full batch. */
  concurrency: z.number().int().min(1).nullable().default(null),
  /**
   * When set, required on every chat route: `Authorization: Bearer <apiKey>` (OpenAI),
   * `x-api-key` (Anthropic), `x-goog-api-key` or `?key=` (Gemini).
   */
  apiKey: z.string().min(1).nullable().default(null),
});

export type SimOptions = z.infer<typeof SimOptionsSchema>;

const ContentPartSchema = z.looseObject({ type: z.string(), text: z.string().optional() });

const MessageSchema = z.looseObject({
  role: z.string(),
  content: z.union([z.string(), z.array(ContentPartSchema), z.null()]).optional(),
});

/** The most choices (`n`) a chat request may ask for, as OpenAI allows. */
export const SIM_CHOICES_MAX = 128;

export const ChatRequestSchema = z.looseObject({
  model: z.string(),
  messages: z.array(MessageSchema).min(1),
  stream: z.boolean().nullish(),
  stream_options: z
    .looseObject({
      include_usage: z.boolean().nullish(),
      continuous_usage_stats: z.boolean().nullish(),
    })
    .nullish(),
  max_tokens: z.number().int().min(1).nullish(),
  max_completion_tokens: z.number().int().min(1).nullish(),
  /** Choices to generate, each its own completion of up to max_tokens (OpenAI's limit, 128). */
  n: z.number().int().min(1).max(SIM_CHOICES_MAX).nullish(),
});

export type ChatRequest = z.infer<typeof ChatRequestSchema>;
