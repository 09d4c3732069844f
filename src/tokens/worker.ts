/**
 * A tokenizer thread: loading o200k_base takes ~0.2–0.8 s and tens of MB, and counting is CPU
 * work, so it runs here, off the event loop that serves requests.
 *
 * Fair by construction: each fairness key (an API key's id, or "billing") has a queue of its own,
 * and the thread serves the keys in turn, SLICE_BYTES of merge work at a time, so a key with many
 * or long counts delays another key's count by at most one slice per other waiting key.
 *
 * A thread may be told to run below the request thread (`{ nice }`, count.ts does so for the
 * thread clients' own counts run on): when the cores are contended, the event loop that serves
 * every key is then scheduled first and the counting waits, rather than every request waiting
 * for the counts.
 *
 * Message in: `{ id, fairnessKey, texts, limits }` or `{ nice }`; out: `{ id, counts, ms }` or `{ id, error }`.
 */
import o200k from "js-tiktoken/ranks/o200k_base";
import { setThreadNice } from "../db/thread-priority.ts";
import { TokenCounter, type CountJob, type CountLimits, type TokenCount } from "./bpe.ts";

declare const self: Worker;

/** Merge work per turn: ~5–20 ms on one core, the most one key's turn delays another's. */
export const SLICE_BYTES = 32 * 1024;

export interface CountRequest {
  id: number;
  fairnessKey: string;
  texts: string[];
  limits: CountLimits;
}
export type CountReply = { id: number; counts: TokenCount[]; ms: number } | { id: number; error: string };

interface Queued {
  id: number;
  job: CountJob;
  ms: number;
}

const counter = new TokenCounter(o200k);
/** Per fairness key, in turn order: a key goes to the back after its turn (Map keeps insertion order). */
const queues = new Map<string, Queued[]>();
let scheduled = false;

function turn(): void {
  scheduled = false;
  const first = queues.entries().next();
  if (first.done) return;
  const [key, queue] = first.value;
  const item = queue[0]!;
  queues.delete(key);
  const started = performance.now();
  try {
    const done = counter.step(item.job, SLICE_BYTES);
    item.ms += performance.now() - started;
    if (done) {
      queue.shift();
      self.postMessage({ id: item.id, counts: item.job.counts, ms: item.ms } satisfies CountReply);
    }
  } catch (error) {
    queue.shift();
    self.postMessage({ id: item.id, error: (error as Error).message } satisfies CountReply);
  }
  if (queue.length > 0) queues.set(key, queue);
  schedule();
}

/** The next turn after pending messages, so a new key's count joins the rotation at once. */
function schedule(): void {
  if (scheduled || queues.size === 0) return;
  scheduled = true;
  setImmediate(turn);
}

self.onmessage = (event: MessageEvent<CountRequest | { nice: number }>) => {
  if ("nice" in event.data) {
    setThreadNice(event.data.nice);
    return;
  }
  const { id, fairnessKey, texts, limits } = event.data;
  const queue = queues.get(fairnessKey) ?? [];
  queue.push({ id, job: counter.start(texts, limits), ms: 0 });
  queues.set(fairnessKey, queue);
  schedule();
};
