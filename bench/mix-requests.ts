/**
 * The mixed workload's requests, a pure function of (seed, index): request `i` of a seed is the
 * same on every run and for every target, so the gateway and the bare proxy are sent the same
 * bodies in the same order (only the bearer key's text differs: the proxy has no keys).
 *
 * The mix, per request: its kind (non-streamed chat, streamed chat, embeddings, or a stream its
 * client leaves after a few chunks), which of the run's keys sends it, its prompt's size (1–30 KB,
 * log-normal around a few KB, as chat prompts with some history are), and its output limit.
 *
 * @example const r = mixRequest(1, 0, 1000); const { path, body } = mixBody(1, r);
 */
import { mulberry32 } from "../src/sim/text.ts";

export type MixKind = "chat" | "stream" | "embeddings" | "leave";

export interface MixRequest {
  index: number;
  kind: MixKind;
  /** Index into the run's keys. */
  keyIndex: number;
  /** UTF-8 bytes of the prompt's text (every message's content, or every embedding input). */
  promptBytes: number;
  /** Chat only: `max_tokens`. */
  maxTokens: number;
  /** `leave` only: the client stops reading and closes after this many `data:` frames. */
  leaveAfterFrames: number;
}

/** Shares of the kinds, in 1/1000: mostly chat, a third streamed, a few embeddings and walk-aways. */
const KIND_SHARES_PER_1K: [MixKind, number][] = [
  ["chat", 550],
  ["stream", 350],
  ["embeddings", 50],
  ["leave", 50],
];
export const PROMPT_BYTES_MIN = 1024;
export const PROMPT_BYTES_MAX = 30 * 1024;
/** Median of the prompt size's log-normal draw and its spread (sigma of ln bytes). */
const PROMPT_BYTES_MEDIAN = 4 * 1024;
const PROMPT_LN_SIGMA = 0.9;
const MAX_TOKENS_CHOICES = [16, 64, 128, 256];
export const OUTPUT_TOKENS_MAX = Math.max(...MAX_TOKENS_CHOICES);
const LEAVE_AFTER_FRAMES_MAX = 8;
const EMBEDDING_INPUTS_MAX = 8;
export const CHAT_MODEL = "gpt-4o-mini";
export const EMBEDDING_MODEL = "text-embedding-3-small";

/** mulberry32 seeded from (seed, index) through a 32-bit mix, so any request is drawn on its own. */
function randomFor(seed: number, index: number): () => number {
  const state = Math.imul(seed ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(index + 1, 0xc2b2ae35);
  return mulberry32(Math.imul(state ^ (state >>> 16), 0x7feb352d));
}

function kindOf(draw: number): MixKind {
  let at = Math.floor(draw * 1000);
  for (const [kind, share] of KIND_SHARES_PER_1K) {
    if (at < share) return kind;
    at -= share;
  }
  return "chat";
}

function promptBytesOf(random: () => number): number {
  // Box–Muller: one standard normal from two uniforms (1 - u keeps the log away from 0).
  const normal = Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
  const bytes = Math.round(PROMPT_BYTES_MEDIAN * Math.exp(PROMPT_LN_SIGMA * normal));
  return Math.min(PROMPT_BYTES_MAX, Math.max(PROMPT_BYTES_MIN, bytes));
}

/** Request `index` of the mix drawn with `seed`, sent by one of `keys` keys. */
export function mixRequest(seed: number, index: number, keys: number): MixRequest {
  const random = randomFor(seed, index);
  const kind = kindOf(random());
  const keyIndex = Math.floor(random() * keys);
  const promptBytes = promptBytesOf(random);
  const maxTokens = MAX_TOKENS_CHOICES[Math.floor(random() * MAX_TOKENS_CHOICES.length)]!;
  const leaveAfterFrames = 1 + Math.floor(random() * LEAVE_AFTER_FRAMES_MAX);
  return { index, kind, keyIndex, promptBytes, maxTokens, leaveAfterFrames };
}

const WORDS = (
  "the a of to and in is it that for on with as was at by be this from or have an they which one you were her all she " +
  "there would their we him been has when who will more no if out so said what up its about into than them can only " +
  "other new some could time these two may then do first any my now such like our over man me even most made after " +
  "also did many before must through back years where much your way well down should because each just those people " +
  "mr how too little state good very make world still own see men work long get here between both life being under " +
  "never day same another know while last might us great old year off come since against go came right used take " +
  "گزارش فروش ماهانه را خلاصه کن و نکات مهم را بنویس"
).split(" ");
/** The seeded text prompts are cut from: a fixed sequence of words, long enough that prompts start at many places. */
const CORPUS_BYTES = 256 * 1024;
const SPACE = 0x20;
const corpora = new Map<number, Buffer>();
const CORPORA_MAX = 4;

function corpusOf(seed: number): Buffer {
  let corpus = corpora.get(seed);
  if (corpus) return corpus;
  const random = mulberry32(seed ^ 0x7e47);
  const words: string[] = [];
  for (let length = 0; length < CORPUS_BYTES; ) {
    const word = WORDS[Math.floor(random() * WORDS.length)]!;
    words.push(word);
    length += Buffer.byteLength(word) + 1;
  }
  corpus = Buffer.from(words.join(" "));
  if (corpora.size >= CORPORA_MAX) corpora.clear();
  corpora.set(seed, corpus);
  return corpus;
}

/**
 * A seeded text of at most `bytes` UTF-8 bytes (a little less: it starts and ends on whole
 * words), cut from the seed's corpus at a place drawn for (index, part). Cutting, not drawing
 * word by word, keeps a 30 KB prompt at a few microseconds for the load generator.
 */
function textOf(seed: number, index: number, part: number, bytes: number): string {
  const corpus = corpusOf(seed);
  const random = mulberry32(Math.imul(index + 1, 0x9e3779b1) ^ (part * 0x85ebca6b) ^ seed);
  let start = Math.floor(random() * (corpus.length - bytes - 1));
  // A space is never inside a multi-byte character, so cuts at spaces keep the text whole.
  while (start > 0 && corpus[start - 1] !== SPACE) start--;
  let end = Math.min(corpus.length, start + bytes);
  while (end > start && end < corpus.length && corpus[end] !== SPACE) end--;
  return corpus.toString("utf8", start, end);
}

/** The conversation: a short system message, then 1–4 turns sharing the prompt's bytes, ending with the user's. */
function chatMessages(seed: number, r: MixRequest): { role: string; content: string }[] {
  const system = "You are a helpful assistant. Answer in the user's language.";
  const turns = 1 + 2 * (r.index % 2) + (r.promptBytes > 8 * 1024 ? 1 : 0);
  const messages = [{ role: "system", content: system }];
  const rest = Math.max(1, r.promptBytes - system.length);
  for (let turn = 0; turn < turns; turn++) {
    const role = (turns - 1 - turn) % 2 === 0 ? "user" : "assistant";
    messages.push({ role, content: textOf(seed, r.index, turn, Math.floor(rest / turns)) });
  }
  return messages;
}

/** The path and JSON body of `r`. */
export function mixBody(seed: number, r: MixRequest): { path: string; body: string } {
  if (r.kind === "embeddings") {
    const inputs = 1 + (r.index % EMBEDDING_INPUTS_MAX);
    const input = Array.from({ length: inputs }, (_, i) => textOf(seed, r.index, i, Math.floor(r.promptBytes / inputs)));
    return { path: "/v1/embeddings", body: JSON.stringify({ model: EMBEDDING_MODEL, input, encoding_format: "float" }) };
  }
  const streamed = r.kind === "stream" || r.kind === "leave";
  const body = {
    model: CHAT_MODEL,
    messages: chatMessages(seed, r),
    max_tokens: r.maxTokens,
    ...(streamed ? { stream: true, stream_options: { include_usage: r.index % 2 === 0 } } : {}),
  };
  return { path: "/v1/chat/completions", body: JSON.stringify(body) };
}
