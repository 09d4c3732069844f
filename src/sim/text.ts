/**
 * Deterministic output text. The same (seed, prompt text) always yields the same words, so a
 * streamed reply equals the non-streamed one, and a reply cut by `max_tokens` is a prefix of the
 * uncut one. Every word is one token by `simCountTokens`.
 */
import { simMessageText, type SimMessage } from "./tokens.ts";

/** Plain lowercase words: each is exactly one simulator token, with or without a leading space. */
export const simVocabulary: readonly string[] = [
  "the",
  "model",
  "answer",
  "is",
  "simple",
  "and",
  "clear",
  "we",
  "can",
  "see",
  "data",
  "flow",
  "through",
  "a",
  "gateway",
  "to",
  "each",
  "host",
  "with",
  "care",
  "tokens",
  "arrive",
  "in",
  "order",
  "while",
  "time",
  "passes",
  "quietly",
  "between",
  "them",
  "every",
  "request",
  "gets",
  "one",
  "reply",
  "that",
  "stays",
  "on",
  "same",
  "for",
  "seed",
  "prompt",
  "light",
  "river",
  "stone",
  "green",
  "window",
  "north",
  "paper",
  "signal",
];

/** A 32-bit PRNG: tiny, fast and good enough to pick words and roll failures. Returns [0, 1). */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** FNV-1a over UTF-16 code units, started from the seed so different seeds diverge. */
function hashText(seed: number, text: string): number {
  let hash = (0x811c9dc5 ^ Math.imul(seed | 0, 0x9e3779b1)) >>> 0;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return hash >>> 0;
}

/**
 * The text that keys the output: message texts (see `simMessageText`) joined with "\n".
 * @example simPromptText([{ role: "user", content: "Hi" }]) // "Hi"
 */
export function simPromptText(messages: readonly SimMessage[]): string {
  return messages.map((message) => simMessageText(message.content)).join("\n");
}

export type SimCompletionOptions = { seed: number; promptText: string; tokens: number };

/**
 * The per-token deltas of a reply: the first word bare, later words with one leading space.
 * @example simCompletion({ seed: 1, promptText: "Hi", tokens: 3 }).join("") // e.g. "stone to the"
 */
export function simCompletion({ seed, promptText, tokens }: SimCompletionOptions): string[] {
  const random = mulberry32(hashText(seed, promptText));
  const deltas: string[] = new Array(tokens);
  for (let i = 0; i < tokens; i++) {
    const word = simVocabulary[Math.floor(random() * simVocabulary.length)] ?? "the";
    deltas[i] = i === 0 ? word : ` ${word}`;
  }
  return deltas;
}
