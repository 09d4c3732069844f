/**
 * Token counting. The hot path uses a cheap upper bound: byte-level BPE never makes more tokens
 * than the UTF-8 bytes of the text it reads, and every string an upstream reads as prompt (message
 * text, names, tool calls, tools, schemas, any part's data) is inside the request body, whose JSON
 * bytes are never fewer than the bytes of the strings in it (escapes only add). So the body's bytes
 * (for a plain body of text messages, just its texts' and names' bytes) plus fixed allowances per
 * message and for what a model reads beyond the bytes (an image, audio, a file, a tool result's
 * repeated function name) bound the prompt without tokenising it. The o200k_base count (bpe.ts:
 * linear in bytes for any text) runs on tokenizer threads (worker.ts), used at the wallet's edge,
 * for the context window, and for
 * billing when an upstream reports no usage.
 */

import { O200K_TOKEN_BYTES_MAX, type TokenCount } from "./bpe.ts";
import type { CountReply, CountRequest } from "./worker.ts";

export type { TokenCount } from "./bpe.ts";
import { imageTypeOfUrl } from "./media.ts";

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

/**
 * What a model reads from a content part beyond its bytes: text and refusals are all bytes; an
 * image URL that shows an image (media.ts) IMAGE_ALLOWANCE_TOKENS; one that does not,
 * `mediaUrlTokens` (a vendor that fetches it may read a video or a PDF: chatBudget sets it).
 */
export function partAllowanceTokens(part: unknown, mediaUrlTokens = IMAGE_ALLOWANCE_TOKENS): number {
  const p = part as { type?: unknown; image_url?: { url?: unknown } } | null;
  if (p?.type === "text" || p?.type === "refusal") return 0;
  if (p?.type !== "image_url") return FILE_ALLOWANCE_TOKENS;
  const url = p.image_url?.url;
  return typeof url === "string" && imageTypeOfUrl(url) === null
    ? Math.max(mediaUrlTokens, IMAGE_ALLOWANCE_TOKENS)
    : IMAGE_ALLOWANCE_TOKENS;
}

/** The allowances of one message: its template, a tool result's repeated name, its images, audio and files. */
export function messageAllowanceTokens(
  message: Readonly<Record<string, unknown>>,
  templateTokens = MESSAGE_ALLOWANCE_TOKENS,
  mediaUrlTokens = IMAGE_ALLOWANCE_TOKENS,
): number {
  let allowance = templateTokens;
  if (message.role === "tool" || message.role === "function") allowance += TOOL_RESULT_ALLOWANCE_TOKENS;
  if (message.audio !== undefined && message.audio !== null) allowance += FILE_ALLOWANCE_TOKENS;
  if (Array.isArray(message.content)) for (const part of message.content) allowance += partAllowanceTokens(part, mediaUrlTokens);
  return allowance;
}

/** Chat fields that steer sampling, delivery, storage or price: everything else a model reads as prompt. */
export const CHAT_CONTROL_FIELDS: ReadonlySet<string> = new Set([
  "model",
  "messages",
  "stream",
  "stream_options",
  "max_tokens",
  "max_completion_tokens",
  "n",
  "parallel_tool_calls",
  "temperature",
  "top_p",
  "frequency_penalty",
  "presence_penalty",
  "logit_bias",
  "logprobs",
  "top_logprobs",
  "stop",
  "seed",
  "user",
  "metadata",
  "safety_identifier",
  "prompt_cache_key",
  "prompt_cache_retention",
  "prompt_cache_options",
  "moderation",
  "reasoning_effort",
  "verbosity",
  "service_tier",
  "store",
  "modalities",
  "audio",
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
export function promptTokensUpperBound(
  request: { messages: readonly Message[] },
  bodyBytes?: () => number,
  mediaUrlTokens = IMAGE_ALLOWANCE_TOKENS,
): number {
  let plain = true;
  for (const field in request) if (!CHAT_CONTROL_FIELDS.has(field)) plain = false;
  let allowances = REQUEST_ALLOWANCE_TOKENS;
  let textBytes = 0;
  for (const message of request.messages) {
    allowances += messageAllowanceTokens(message, MESSAGE_ALLOWANCE_TOKENS, mediaUrlTokens);
    if (!plain) continue;
    const bytes = plainMessageBytes(message);
    if (bytes < 0) plain = false;
    textBytes += bytes;
  }
  return allowances + (plain ? textBytes : (bodyBytes?.() ?? utf8Bytes(JSON.stringify(request))));
}

/**
 * JavaScript's `\s`: the whitespace that separates words. A loop over char codes rather than
 * `/\S+/g`, whose match objects made the count a few percent of a whole request's CPU.
 */
export function isJsWhitespace(c: number): boolean {
  if (c <= 0x20) return c === 0x20 || (c >= 0x09 && c <= 0x0d);
  if (c < 0xa0) return false;
  return (
    c === 0xa0 ||
    c === 0x1680 ||
    (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 ||
    c === 0x2029 ||
    c === 0x202f ||
    c === 0x205f ||
    c === 0x3000 ||
    c === 0xfeff
  );
}

/**
 * A lower bound of any vendor's token count of `text`, with no tokenizer: its whitespace-separated
 * words, each at least one token (byte-level BPE's regex pre-tokenizers and SentencePiece's
 * whitespace split never join two words into one token). It does not see a chat template's
 * overhead, images, files or the JSON structure of tools: only the words.
 * @example wordsLowerBound("Hello, big world!") // 3
 */
export function wordsLowerBound(text: string): number {
  let words = 0;
  let inWord = false;
  for (let i = 0; i < text.length; i++) {
    const space = isJsWhitespace(text.charCodeAt(i));
    if (!space && !inWord) words++;
    inWord = !space;
  }
  return words;
}

/**
 * A proven lower bound of the prompt's tokens for any vendor: the words of every message's text
 * (a string content or its text parts), name and tool calls' arguments (wordsLowerBound).
 * @example promptTokensLowerBound({ messages: [{ role: "user", content: "Hello, big world!", name: "ali" }] }) // 4
 */
export function promptTokensLowerBound(request: { messages: readonly Readonly<Record<string, unknown>>[] }): number {
  let words = 0;
  for (const message of request.messages) {
    words += wordsLowerBound(messageText(message));
    if (typeof message.name === "string") words += wordsLowerBound(message.name);
    const calls = message.tool_calls;
    if (!Array.isArray(calls)) continue;
    for (const call of calls as { function?: { arguments?: unknown } }[]) {
      const args = call?.function?.arguments;
      if (typeof args === "string") words += wordsLowerBound(args);
    }
  }
  return words;
}

/** Counts waiting for the tokenizer threads at once; more is refused rather than queued unbounded. */
export const TOKEN_COUNTS_PENDING_MAX = 10_000;
/** Tokenizer threads: more than one, so no single count holds every thread (the machine has 2 cores). */
export const TOKENIZER_THREADS = 2;
/**
 * The nice value of the last tokenizer thread, where clients' own counts (count_tokens) run: under
 * contention for the cores the request thread (nice 0) and the first tokenizer thread (billing,
 * admission) are scheduled before it, so counting on demand cannot starve anyone's requests.
 */
export const SERVICE_THREAD_NICE = 10;
/**
 * Bytes one request may have merged exactly before admission (~0.05–0.5 s of one thread,
 * prose to random bytes). Beyond them the prompt is decided by bounds: see TokenCount.
 */
export const ADMISSION_COUNT_BYTES_MAX = 1024 * 1024;
/**
 * Tokenizer time a key may spend on admission counts per window, by default (the node's
 * TOKENIZER_MS_PER_KEY, given to startTokenizer). A key over it is not refused: its prompts are
 * decided by their byte bounds alone (fits when the bytes fit, too long when the bytes ÷ 128 do
 * not), which costs nothing, until the window turns.
 */
export const TOKENIZER_MS_PER_KEY_MAX = 10_000;
export const TOKENIZER_KEY_WINDOW_MS = 60_000;
let keyMsMax = TOKENIZER_MS_PER_KEY_MAX;
/**
 * Admission counts one key may have queued at once; more are decided by byte bounds. Time is
 * charged when a count ends, so without this a key could queue many before its budget showed it.
 */
export const TOKENIZER_COUNTS_PER_KEY_MAX = 4;
/** Keys whose tokenizer time is remembered; the table is cleared when a window turns. */
const TOKENIZER_KEYS_TRACKED_MAX = 100_000;

/**
 * Who a count is for. Admission counts (before a request is admitted) are capped per request and
 * per key and take turns by key; billing counts (after the upstream replied without usage) are
 * uncapped, one queue of their own, and only ever on the first thread, so they never hold more
 * than one thread and alternate with admission counts there. Service counts (a client asked for
 * the count: count_tokens) are exact and uncapped, but only ever on the last thread, take the
 * key's own turn there, as its admission counts do, and spend its tokenizer time: however much a
 * key counts, it holds at most one thread (one core of the machine's), delays other keys' counts
 * there by at most a slice per turn, and its own admission counts fall back to bounds.
 */
export type CountOptions =
  | {
      purpose: "admission";
      fairnessKey: string;
      /** Enough to know: counting may stop once the proven lower bound exceeds this many tokens. */
      lowerEnough?: number;
    }
  | { purpose: "service"; fairnessKey: string }
  | { purpose: "billing" };
const BILLING: CountOptions = { purpose: "billing" };

interface Thread {
  worker: Worker;
  /** Characters of text sent and not yet answered: admission counts go to the least loaded thread. */
  queuedChars: number;
}
interface Waiter {
  resolve: (counts: TokenCount[]) => void;
  reject: (error: Error) => void;
  thread: Thread;
  chars: number;
  /** The key whose tokenizer time this count spends; null for billing. */
  keyId: string | null;
}

const threads: (Thread | null)[] = Array.from({ length: TOKENIZER_THREADS }, () => null);
let nextId = 0;
const pending = new Map<number, Waiter>();
let keyWindowStartedMs = 0;
const keyMs = new Map<string, number>();
/** Admission counts queued per key (bounded by TOKEN_COUNTS_PENDING_MAX in all). */
const keyQueued = new Map<string, number>();

function settleKey(keyId: string | null, ms: number | null): void {
  if (keyId === null) return;
  const queued = (keyQueued.get(keyId) ?? 1) - 1;
  if (queued > 0) keyQueued.set(keyId, queued);
  else keyQueued.delete(keyId);
  if (ms !== null) chargeKey(keyId, ms);
}

function chargeKey(keyId: string, ms: number): void {
  const now = performance.now();
  if (now - keyWindowStartedMs >= TOKENIZER_KEY_WINDOW_MS || keyMs.size >= TOKENIZER_KEYS_TRACKED_MAX) {
    keyMs.clear();
    keyWindowStartedMs = now;
  }
  keyMs.set(keyId, (keyMs.get(keyId) ?? 0) + ms);
}

/** Whether the key has spent its tokenizer time in this window, or has its most counts queued. */
function keyOverBudget(keyId: string): boolean {
  if ((keyQueued.get(keyId) ?? 0) >= TOKENIZER_COUNTS_PER_KEY_MAX) return true;
  if (performance.now() - keyWindowStartedMs >= TOKENIZER_KEY_WINDOW_MS) return false;
  return (keyMs.get(keyId) ?? 0) >= keyMsMax;
}

function startThread(index: number): Thread {
  const thread: Thread = { worker: new Worker(new URL("./worker.ts", import.meta.url).href), queuedChars: 0 };
  thread.worker.onmessage = (event: MessageEvent<CountReply>) => {
    const reply = event.data;
    const waiter = pending.get(reply.id);
    if (!waiter) return;
    pending.delete(reply.id);
    thread.queuedChars -= waiter.chars;
    settleKey(waiter.keyId, "error" in reply ? null : reply.ms);
    if ("error" in reply) return waiter.reject(new Error(`tokenizer failed: ${reply.error}`));
    waiter.resolve(reply.counts);
  };
  thread.worker.onerror = (event) => {
    for (const [id, waiter] of pending) {
      if (waiter.thread !== thread) continue;
      pending.delete(id);
      settleKey(waiter.keyId, null);
      waiter.reject(new Error(`tokenizer failed: ${event.message}`));
    }
    threads[index] = null;
  };
  thread.worker.unref(); // never keeps a process alive on its own
  if (index === TOKENIZER_THREADS - 1) thread.worker.postMessage({ nice: SERVICE_THREAD_NICE });
  threads[index] = thread;
  return thread;
}

const thread = (index: number): Thread => threads[index] ?? startThread(index);

/**
 * Starts the tokenizer threads so that their load is not paid by the first request that needs
 * one, with the node's per-key tokenizer time per window (TOKENIZER_MS_PER_KEY_MAX by default).
 */
export function startTokenizer(options: { msPerKey?: number } = {}): void {
  keyMsMax = options.msPerKey ?? TOKENIZER_MS_PER_KEY_MAX;
  for (let i = 0; i < TOKENIZER_THREADS; i++) thread(i);
}

/** The least loaded thread for an admission count (the last on ties: billing runs on the first). */
function admissionThread(): Thread {
  let best = thread(TOKENIZER_THREADS - 1);
  for (let i = TOKENIZER_THREADS - 2; i >= 0; i--) if (thread(i).queuedChars < best.queuedChars) best = thread(i);
  return best;
}

/** Counts by bounds alone, with no tokenizer work: [bytes ÷ 128, bytes]. */
function byteBounds(texts: string[]): TokenCount[] {
  return texts.map((text) => {
    const bytes = Buffer.byteLength(text, "utf8");
    return { tokens: bytes, lower: Math.floor(bytes / O200K_TOKEN_BYTES_MAX), upper: bytes, bytesCounted: 0 };
  });
}

/**
 * o200k_base counts of several texts, as bounds (see TokenCount): exact for ordinary text;
 * admission counts merge at most ADMISSION_COUNT_BYTES_MAX bytes and fall back to byte bounds for
 * a key over its tokenizer time or when the threads are saturated.
 *
 *   const [count] = await measureTokensMany([prompt], { purpose: "admission", fairnessKey: key.id });
 *   if (count.lower > window) refuse(); // proven too long
 */
export function measureTokensMany(texts: string[], options: CountOptions = BILLING): Promise<TokenCount[]> {
  if (texts.every((t) => t.length === 0)) return Promise.resolve(texts.map(() => ({ tokens: 0, lower: 0, upper: 0, bytesCounted: 0 })));
  const admission = options.purpose === "admission";
  if (admission && (keyOverBudget(options.fairnessKey) || pending.size >= TOKEN_COUNTS_PENDING_MAX))
    return Promise.resolve(byteBounds(texts));
  if (pending.size >= TOKEN_COUNTS_PENDING_MAX) return Promise.reject(new Error("the tokenizer is saturated"));
  const keyId = options.purpose === "billing" ? null : options.fairnessKey;
  const fairnessKey = keyId === null ? "billing" : `key:${keyId}`;
  const target = keyId === null ? thread(0) : admission ? admissionThread() : thread(TOKENIZER_THREADS - 1);
  const chars = texts.reduce((sum, t) => sum + t.length, 0);
  const id = nextId++;
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject, thread: target, chars, keyId });
    if (keyId !== null) keyQueued.set(keyId, (keyQueued.get(keyId) ?? 0) + 1);
    target.queuedChars += chars;
    const limits = admission
      ? { bytesMax: ADMISSION_COUNT_BYTES_MAX, lowerEnough: options.lowerEnough }
      : { bytesMax: Number.POSITIVE_INFINITY };
    const request: CountRequest = { id, fairnessKey, texts, limits };
    target.worker.postMessage(request);
  });
}

/** o200k_base token counts of several texts (exact for ordinary text; see TokenCount.tokens). */
export async function countTokensMany(texts: string[], options: CountOptions = BILLING): Promise<number[]> {
  return (await measureTokensMany(texts, options)).map((c) => c.tokens);
}

/** The o200k_base token count of `text`. */
export async function countTokens(text: string, options: CountOptions = BILLING): Promise<number> {
  return (await countTokensMany([text], options))[0]!;
}

/** Tokens a chat template adds per message and to prime the reply (OpenAI's published counts). */
export const EXACT_MESSAGE_TOKENS = 3;
export const EXACT_REPLY_TOKENS = 3;

function messageText(message: Record<string, unknown>): string {
  const content = message.content;
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map((p) => (typeof (p as { text?: unknown })?.text === "string" ? (p as { text: string }).text : "")).join("");
}

/**
 * Prompt tokens (o200k_base) with OpenAI's template counts, as bounds: `lower` proves a prompt
 * too long, `upper` proves it fits, `tokens` is the count (exact for ordinary text).
 */
export async function measurePromptTokens(
  messages: readonly Record<string, unknown>[],
  options: CountOptions = BILLING,
): Promise<TokenCount> {
  let template = EXACT_REPLY_TOKENS;
  for (const message of messages) template += EXACT_MESSAGE_TOKENS + (typeof message.name === "string" ? 1 : 0);
  const textOptions =
    options.purpose === "admission" && options.lowerEnough !== undefined
      ? { ...options, lowerEnough: options.lowerEnough - template }
      : options;
  const counts = await measureTokensMany(messages.map(messageText), textOptions);
  const sum = (field: "tokens" | "lower" | "upper") => counts.reduce((total, c) => total + c[field], template);
  return { tokens: sum("tokens"), lower: sum("lower"), upper: sum("upper"), bytesCounted: counts.reduce((t, c) => t + c.bytesCounted, 0) };
}

/**
 * Prompt tokens (o200k_base) with OpenAI's template counts: used at the wallet's edge, where the
 * cheap bound would refuse, and for billing when the upstream reports no usage.
 */
export async function countPromptTokens(messages: readonly Record<string, unknown>[], options: CountOptions = BILLING): Promise<number> {
  return (await measurePromptTokens(messages, options)).tokens;
}
