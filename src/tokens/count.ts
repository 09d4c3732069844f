/**
 * Token counting. The hot path uses a cheap upper bound: byte-level BPE never makes more tokens
 * than UTF-8 bytes, so bytes plus fixed allowances per message, image and tool bound the prompt
 * without tokenising it. The exact js-tiktoken count (o200k_base) runs on a thread of its own
 * (worker.ts), used at the wallet's edge, for the context window, and for billing when an
 * upstream reports no usage.
 */

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
