/**
 * The simulator's own tokenizer and prompt rule. It is deliberately NOT tiktoken and imports
 * nothing from the gateway: the simulator is the independent truth for billing tests, so it must
 * be simple enough to count by hand, and it bills everything it receives that a model reads.
 *
 * Rule: a token is either a maximal run of letters, digits and `_`, or one single character that
 * is none of those and not whitespace. Whitespace is never a token.
 *
 *   "Hello, world!"        → Hello | , | world | !            = 4
 *   " lorem"               → lorem                             = 1
 *   "naïve café 123_abc?"  → naïve | café | 123_abc | ?        = 4
 *
 * A prompt costs, per message, 3 + the tokens of its text, plus 3 for the whole prompt:
 *
 *   [{ role: "user", content: "Hello, world!" }] → (3 + 4) + 3 = 10
 *
 * A message's text is its `content` string, or for a content array the concatenation (no
 * separator) of the parts' `text` fields. Everything else the model reads costs its tokens too:
 * a string field (`name`, `tool_call_id`) the tokens of its text; a structured one (`tool_calls`,
 * `tools`, `response_format`, a part's other data) the tokens of its JSON text; an image part
 * SIM_IMAGE_TOKENS on top, and content named by id (a file's `file_id`, an assistant's earlier
 * `audio`) SIM_STORED_CONTENT_TOKENS. Only the role and the fields that steer sampling or delivery (the
 * flavour's control fields: model, stream, max_tokens, temperature, …) cost nothing.
 *
 *   { role: "user", content: "hi", name: "ali" }                      → 3 + 1 + 1 = 5 (+ 3)
 *   tools: [{ type: "function", function: { name: "f" } }]            → tokens of its JSON = 25
 */

const tokenPattern = /[\p{L}\p{N}_]+|[^\s\p{L}\p{N}_]/gu;

/** Per-message overhead, as in OpenAI's published counting recipe. */
export const simMessageOverheadTokens = 3;
/** Priming overhead of the assistant reply, counted once per prompt. */
export const simPromptOverheadTokens = 3;
/** An image, whatever its URL or data: what OpenAI bills a 1024×1024 high-detail image (85 + 4 × 170). */
export const SIM_IMAGE_TOKENS = 765;
/** Content named by id, which the upstream reads from its own store: a file part's `file_id`, an assistant's earlier `audio`. */
export const SIM_STORED_CONTENT_TOKENS = 1_000;

/** A content part as found in chat messages. */
export type SimContentPart = { readonly type?: string; readonly text?: string; readonly [field: string]: unknown };

/** A chat message: role, content and any other field the model reads. */
export type SimMessage = {
  readonly role?: string;
  readonly content?: string | readonly SimContentPart[] | null;
  readonly [field: string]: unknown;
};

/**
 * Counts tokens by the simulator's rule.
 * @example simCountTokens("Hello, world!") // 4
 */
export function simCountTokens(text: string): number {
  return text.match(tokenPattern)?.length ?? 0;
}

/**
 * A value the model reads: a string by its text, anything else by its JSON text.
 * @example simValueTokens({ a: "b" }) // { " a " : " b " } = 9
 */
export function simValueTokens(value: unknown): number {
  if (value === undefined || value === null) return 0;
  return simCountTokens(typeof value === "string" ? value : JSON.stringify(value));
}

/** Σ simValueTokens over the fields of `record` not named in `free`. */
export function simFieldsTokens(record: Readonly<Record<string, unknown>>, free: ReadonlySet<string>): number {
  let total = 0;
  for (const field in record) if (!free.has(field)) total += simValueTokens(record[field]);
  return total;
}

/**
 * The text of one message: the string content, or the `text` parts joined with no separator.
 * @example simMessageText([{ type: "text", text: "foo" }, { type: "text", text: "bar" }]) // "foobar"
 */
export function simMessageText(content: SimMessage["content"]): string {
  if (typeof content === "string") return content;
  if (!content) return "";
  let text = "";
  for (const part of content) if (typeof part.text === "string") text += part.text;
  return text;
}

// A prompt-cache mark steers the vendor's cache; the model does not read it.
const messageTextFields = new Set(["role", "content", "cache_control"]);
const partTextFields = new Set(["type", "text", "cache_control"]);

/** A part's cost beyond its text: its other data, and an image's fixed price. */
function partExtraTokens(part: SimContentPart): number {
  const stored = part.type === "file" && typeof (part.file as { file_id?: unknown } | undefined)?.file_id === "string";
  return (
    simFieldsTokens(part, partTextFields) + (part.type === "image_url" ? SIM_IMAGE_TOKENS : 0) + (stored ? SIM_STORED_CONTENT_TOKENS : 0)
  );
}

/** One message: 3 + its text + every other field but the role + its parts' other data. */
function messageTokens(message: SimMessage): number {
  let total = simMessageOverheadTokens + simCountTokens(simMessageText(message.content)) + simFieldsTokens(message, messageTextFields);
  if (message.audio !== undefined && message.audio !== null) total += SIM_STORED_CONTENT_TOKENS;
  if (Array.isArray(message.content)) for (const part of message.content) total += partExtraTokens(part);
  return total;
}

/**
 * Prompt tokens of a message list by the simulator's rule: Σ (3 + text + other fields) + 3.
 * @example simPromptTokens([{ role: "user", content: "Hello, world!" }]) // 10
 */
export function simPromptTokens(messages: readonly SimMessage[]): number {
  let total = simPromptOverheadTokens;
  for (const message of messages) total += messageTokens(message);
  return total;
}

/** OpenAI chat fields that steer sampling, delivery or storage: the model does not read them as prompt. */
export const SIM_OPENAI_CONTROL_FIELDS: ReadonlySet<string> = new Set([
  "model",
  "messages",
  "stream",
  "stream_options",
  "max_tokens",
  "max_completion_tokens",
  "n",
  "temperature",
  "top_p",
  "seed",
  "stop",
  "presence_penalty",
  "frequency_penalty",
  "logit_bias",
  "logprobs",
  "top_logprobs",
  "user",
  "metadata",
  "store",
  "service_tier",
  "parallel_tool_calls",
  "reasoning_effort",
  "verbosity",
  "modalities",
  "audio",
  "safety_identifier",
  "prompt_cache_key",
  "prompt_cache_retention",
  "prompt_cache_options",
  "moderation",
  "cache_control",
]);

/**
 * An OpenAI chat body's prompt: its messages, plus every field that is not a control field
 * (tools, legacy functions and function_call, tool_choice, response_format, prediction, …).
 * @example simChatPromptTokens({ model: "m", messages: [{ role: "user", content: "Hello, world!" }], max_tokens: 5 }) // 10
 */
export function simChatPromptTokens(body: Readonly<Record<string, unknown>> & { messages: readonly SimMessage[] }): number {
  return simPromptTokens(body.messages) + simFieldsTokens(body, SIM_OPENAI_CONTROL_FIELDS);
}
