/**
 * Token counting. The hot path uses a cheap upper bound: byte-level BPE never makes more tokens
 * than the UTF-8 bytes of the text it reads, and every string an upstream reads as prompt (message
 * text, names, tool calls, tools, schemas, any part's data) is inside the request body, whose JSON
 * bytes are never fewer than the bytes of the strings in it (escapes only add). So the body's bytes
 * (for a plain body of text messages, just its texts' and names' bytes) plus fixed allowances per
 * message and for what a model reads beyond the bytes (an image, audio, a file, a tool result's
 * repeated function name) bound the prompt without tokenising it. The exact js-tiktoken count (o200k_base) runs on
 * a thread of its own (worker.ts), used at the wallet's edge, for the context window, and for
 * billing when an upstream reports no usage.
 */

/** Role markers and separators a chat template adds around each message. */
export const MESSAGE_ALLOWANCE_TOKENS = 8;
/** Priming tokens for the assistant's reply. */
export const REQUEST_ALLOWANCE_TOKENS = 8;
/** An image part, at the most detailed tiling any vendor bills for one image (its URL is in the bytes). */
export const IMAGE_ALLOWANCE_TOKENS = 6_400;
/** An audio or file part, or an assistant message's earlier audio reply: what the upstream decodes from it. */
export const FILE_ALLOWANCE_TOKENS = 65_536;
/**
 * A tool result: translating adapters repeat the called function's name in it (Gemini matches
 * results to calls by name), a name of at most FUNCTION_NAME_CHARS_MAX characters.
 */
export const TOOL_RESULT_ALLOWANCE_TOKENS = 64;
/** The longest function name a request may give (the OpenAI spec's limit). */
export const FUNCTION_NAME_CHARS_MAX = 64;

export const utf8Bytes = (text: string) => Buffer.byteLength(text, "utf8");

/** What a model reads from a content part beyond its bytes: text and refusals are all bytes. */
export function partAllowanceTokens(part: unknown): number {
  const type = (part as { type?: unknown } | null)?.type;
  if (type === "text" || type === "refusal") return 0;
  return type === "image_url" ? IMAGE_ALLOWANCE_TOKENS : FILE_ALLOWANCE_TOKENS;
}

/** The allowances of one message: its template, a tool result's repeated name, its images, audio and files. */
export function messageAllowanceTokens(message: Readonly<Record<string, unknown>>, templateTokens = MESSAGE_ALLOWANCE_TOKENS): number {
  let allowance = templateTokens;
  if (message.role === "tool" || message.role === "function") allowance += TOOL_RESULT_ALLOWANCE_TOKENS;
  if (message.audio !== undefined && message.audio !== null) allowance += FILE_ALLOWANCE_TOKENS;
  if (Array.isArray(message.content)) for (const part of message.content) allowance += partAllowanceTokens(part);
  return allowance;
}

/** Chat fields that steer sampling, delivery, storage or price: everything else a model reads as prompt. */
export const CHAT_CONTROL_FIELDS: ReadonlySet<string> = new Set([
  "model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens", "n", "parallel_tool_calls",
  "temperature", "top_p", "frequency_penalty", "presence_penalty", "logit_bias", "logprobs", "top_logprobs", "stop", "seed",
  "user", "metadata", "safety_identifier", "prompt_cache_key", "prompt_cache_retention", "prompt_cache_options",
  "moderation", "reasoning_effort", "verbosity", "service_tier", "store", "modalities", "audio",
]);

type Message = Readonly<Record<string, unknown>>;

/** UTF-8 bytes of a message's text and name when they are its whole prompt (role, name, a string or text parts), else -1. */
function plainMessageBytes(message: Message): number {
  for (const field in message) if (field !== "role" && field !== "content" && field !== "name") return -1;
  let bytes = typeof message.name === "string" ? utf8Bytes(message.name) : 0;
  const content = message.content;
  if (typeof content === "string") return bytes + utf8Bytes(content);
  if (!Array.isArray(content)) return bytes;
  for (const part of content) {
    const p = part as { type?: unknown; text?: unknown };
    if (p.type !== "text" || typeof p.text !== "string") return -1;
    bytes += utf8Bytes(p.text);
  }
  return bytes;
}

/**
 * An upper bound on the prompt's tokens in O(bytes), with no tokeniser: the bytes of what the
 * model reads plus the allowances. A plain body (text messages and control fields) is measured by
 * its texts and names alone; any other is measured whole, by `bodyBytes`, the size of the body
 * as received (route.ts measures the text it parsed, only when asked), or without it by
 * serializing the body once.
 * @example promptTokensUpperBound({ messages: [{ role: "user", content: "hi" }] }) // 8 + 8 + 2 = 18
 * @example promptTokensUpperBound({ messages: [{ role: "user", content: "hi" }], tools: [] }, () => 52) // 8 + 8 + 52 = 68
 */
export function promptTokensUpperBound(request: { messages: readonly Message[] }, bodyBytes?: () => number): number {
  let plain = true;
  for (const field in request) if (!CHAT_CONTROL_FIELDS.has(field)) plain = false;
  let allowances = REQUEST_ALLOWANCE_TOKENS;
  let textBytes = 0;
  for (const message of request.messages) {
    allowances += messageAllowanceTokens(message);
    if (!plain) continue;
    const bytes = plainMessageBytes(message);
    if (bytes < 0) plain = false;
    textBytes += bytes;
  }
  return allowances + (plain ? textBytes : (bodyBytes?.() ?? utf8Bytes(JSON.stringify(request))));
}

/** Counts waiting for the tokenizer thread at once; more is refused rather than queued unbounded. */
export const TOKEN_COUNTS_PENDING_MAX = 10_000;

let worker: Worker | null = null;
let nextId = 0;
const pending = new Map<number, { resolve: (counts: number[]) => void; reject: (error: Error) => void }>();

function tokenizer(): Worker {
  if (worker) return worker;
  const started = new Worker(new URL("./worker.ts", import.meta.url).href);
  started.onmessage = (event: MessageEvent<{ id: number; counts: number[] }>) => {
    const waiter = pending.get(event.data.id);
    pending.delete(event.data.id);
    waiter?.resolve(event.data.counts);
  };
  started.onerror = (event) => {
    for (const waiter of pending.values()) waiter.reject(new Error(`tokenizer failed: ${event.message}`));
    pending.clear();
    worker = null;
  };
  started.unref(); // never keeps a process alive on its own
  worker = started;
  return started;
}

/** Starts the tokenizer thread so that its 0.4 s load is not paid by the first request that needs it. */
export function warmTokenizer(): void {
  tokenizer();
}

/** Exact o200k_base token counts of several texts, counted on the tokenizer thread. */
export function countTokensMany(texts: string[]): Promise<number[]> {
  if (texts.every((t) => t.length === 0)) return Promise.resolve(texts.map(() => 0));
  if (pending.size >= TOKEN_COUNTS_PENDING_MAX) return Promise.reject(new Error("the tokenizer is saturated"));
  const id = nextId++;
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject });
    tokenizer().postMessage({ id, texts });
  });
}

/** The exact o200k_base token count of `text`. */
export async function countTokens(text: string): Promise<number> {
  return (await countTokensMany([text]))[0]!;
}

/** Tokens a chat template adds per message and to prime the reply (OpenAI's published counts). */
export const EXACT_MESSAGE_TOKENS = 3;
export const EXACT_REPLY_TOKENS = 3;

/**
 * Exact prompt tokens (o200k_base) with OpenAI's template counts: used at the wallet's edge,
 * where the cheap bound would refuse, and for billing when the upstream reports no usage.
 */
export async function countPromptTokens(messages: readonly Record<string, unknown>[]): Promise<number> {
  const texts = messages.map((message) => {
    const content = message.content;
    if (typeof content === "string") return content;
    if (!Array.isArray(content)) return "";
    return content.map((p) => (typeof (p as { text?: unknown })?.text === "string" ? (p as { text: string }).text : "")).join("");
  });
  const counts = await countTokensMany(texts);
  let total = EXACT_REPLY_TOKENS;
  messages.forEach((message, i) => {
    total += EXACT_MESSAGE_TOKENS + counts[i]!;
    if (typeof message.name === "string") total += 1;
  });
  return total;
}
