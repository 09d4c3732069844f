/**
 * The tokenizer thread: js-tiktoken's o200k_base takes ~0.4 s and ~150 MB to load and ~135 µs per
 * KB to count, so it lives here, off the event loop that serves requests.
 * Message in: `{ id, texts }`; out: `{ id, counts }`.
 */
import { Tiktoken } from "js-tiktoken/lite";
import o200k from "js-tiktoken/ranks/o200k_base";

declare const self: Worker;

const encoder = new Tiktoken(o200k);

/**
 * BPE over one long run without white space is quadratic (10,000 × "x" takes seconds), so such
 * runs are counted in slices of this many characters; the slices' count can exceed the true one
 * by at most one token per slice, and ordinary text is never cut.
 */
export const RUN_CHARS_MAX = 256;
const LONG_RUN = new RegExp(`\\S{${RUN_CHARS_MAX},}`, "g");

function count(text: string): number {
  if (text.length < RUN_CHARS_MAX) return text.length === 0 ? 0 : encoder.encode(text).length;
  let total = 0;
  let from = 0;
  for (const match of text.matchAll(LONG_RUN)) {
    if (match.index > from) total += encoder.encode(text.slice(from, match.index)).length;
    for (let i = 0; i < match[0].length; i += RUN_CHARS_MAX) total += encoder.encode(match[0].slice(i, i + RUN_CHARS_MAX)).length;
    from = match.index + match[0].length;
  }
  if (from < text.length) total += encoder.encode(text.slice(from)).length;
  return total;
}

self.onmessage = (event: MessageEvent<{ id: number; texts: string[] }>) => {
  const { id, texts } = event.data;
  self.postMessage({ id, counts: texts.map(count) });
};
