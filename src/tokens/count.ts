/**
 * Token counting. The hot path uses a cheap upper bound: byte-level BPE never makes more tokens
 * than UTF-8 bytes, so bytes plus fixed allowances per message, image and tool bound the prompt
 * without tokenising it. The o200k_base count (bpe.ts: linear in bytes for any text) runs on
 * tokenizer threads (worker.ts), used at the wallet's edge, for the context window, and for
 * billing when an upstream reports no usage.
 */

import { O200K_TOKEN_BYTES_MAX, type TokenCount } from "./bpe.ts";
import type { CountReply, CountRequest } from "./worker.ts";

export type { TokenCount } from "./bpe.ts";

/** Role markers and separators a chat template adds around each message. */
export const MESSAGE_ALLOWANCE_TOKENS = 8;
/** Priming tokens for the assistant's reply. */
export const REQUEST_ALLOWANCE_TOKENS = 8;
/** An image part, at the most detailed tiling any vendor bills for one image. */
export const IMAGE_ALLOWANCE_TOKENS = 6_400;
/** An audio or file part with no text to measure. */
export const FILE_ALLOWANCE_TOKENS = 65_536;

const utf8Bytes = (text: string) => Buffer.byteLength(text, "utf8");

function partBound(part: unknown): number {
  if (typeof part !== "object" || part === null) return utf8Bytes(String(part));
  const p = part as { type?: unknown; text?: unknown };
  if (typeof p.text === "string") return utf8Bytes(p.text);
  if (p.type === "image_url") return IMAGE_ALLOWANCE_TOKENS;
  return FILE_ALLOWANCE_TOKENS;
}

function contentBound(content: unknown): number {
  if (content === null || content === undefined) return 0;
  if (typeof content === "string") return utf8Bytes(content);
  if (Array.isArray(content)) return content.reduce((sum: number, part) => sum + partBound(part), 0);
  return utf8Bytes(JSON.stringify(content));
}

/** An upper bound on the prompt's tokens, in O(bytes) with no tokeniser. */
export function promptTokensUpperBound(request: { messages: readonly Record<string, unknown>[]; tools?: unknown }): number {
  let bound = REQUEST_ALLOWANCE_TOKENS;
  for (const message of request.messages) {
    bound += MESSAGE_ALLOWANCE_TOKENS + contentBound(message.content);
    if (typeof message.name === "string") bound += utf8Bytes(message.name);
    if (message.tool_calls !== undefined) bound += utf8Bytes(JSON.stringify(message.tool_calls));
  }
  if (request.tools !== undefined) bound += utf8Bytes(JSON.stringify(request.tools));
  return bound;
}

/** Counts waiting for the tokenizer threads at once; more is refused rather than queued unbounded. */
export const TOKEN_COUNTS_PENDING_MAX = 10_000;
/** Tokenizer threads: more than one, so no single count holds every thread (the machine has 2 cores). */
export const TOKENIZER_THREADS = 2;
/**
 * Bytes one request may have merged exactly before admission (~0.05–0.5 s of one thread,
 * prose to random bytes). Beyond them the prompt is decided by bounds: see TokenCount.
 */
export const ADMISSION_COUNT_BYTES_MAX = 1024 * 1024;
/**
 * Tokenizer time a key may spend on admission counts per window. A key over it is not refused:
 * its prompts are decided by their byte bounds alone (fits when the bytes fit, too long when the
 * bytes ÷ 128 do not), which costs nothing, until the window turns.
 */
export const TOKENIZER_MS_PER_KEY_MAX = 10_000;
export const TOKENIZER_KEY_WINDOW_MS = 60_000;
let keyMsMax = TOKENIZER_MS_PER_KEY_MAX;

/** Sets the per-key tokenizer time budget (TOKENIZER_MS_PER_KEY_MAX unless set): for tests. */
export function setTokenizerMsPerKeyMax(ms: number): void {
  keyMsMax = ms;
}
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
 * than one thread and alternate with admission counts there.
 */
export type CountOptions =
  | {
      purpose: "admission";
      fairnessKey: string;
      /** Enough to know: counting may stop once the proven lower bound exceeds this many tokens. */
      lowerEnough?: number;
    }
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
  threads[index] = thread;
  return thread;
}

const thread = (index: number): Thread => threads[index] ?? startThread(index);

/** Starts the tokenizer threads so that their load is not paid by the first request that needs one. */
export function warmTokenizer(): void {
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
  if (admission && (keyOverBudget(options.fairnessKey) || pending.size >= TOKEN_COUNTS_PENDING_MAX)) return Promise.resolve(byteBounds(texts));
  if (pending.size >= TOKEN_COUNTS_PENDING_MAX) return Promise.reject(new Error("the tokenizer is saturated"));
  const fairnessKey = admission ? `key:${options.fairnessKey}` : "billing";
  const target = admission ? admissionThread() : thread(0);
  const chars = texts.reduce((sum, t) => sum + t.length, 0);
  const id = nextId++;
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject, thread: target, chars, keyId: admission ? options.fairnessKey : null });
    if (admission) keyQueued.set(options.fairnessKey, (keyQueued.get(options.fairnessKey) ?? 0) + 1);
    target.queuedChars += chars;
    const limits = admission ? { bytesMax: ADMISSION_COUNT_BYTES_MAX, lowerEnough: options.lowerEnough } : { bytesMax: Number.POSITIVE_INFINITY };
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
export async function measurePromptTokens(messages: readonly Record<string, unknown>[], options: CountOptions = BILLING): Promise<TokenCount> {
  let template = EXACT_REPLY_TOKENS;
  for (const message of messages) template += EXACT_MESSAGE_TOKENS + (typeof message.name === "string" ? 1 : 0);
  const textOptions = options.purpose === "admission" && options.lowerEnough !== undefined ? { ...options, lowerEnough: options.lowerEnough - template } : options;
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
