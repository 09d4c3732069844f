/**
 * Reads an upload's duration on the audio thread (worker.ts) and hands the bytes back, so a file
 * that is slow to walk never stalls the requests being served. Files are measured one at a time,
 * each in time linear in its bytes; at most AUDIO_MEASURES_PENDING_MAX wait, more are refused.
 */
import type { AudioDuration } from "./duration.ts";

/**
 * Files waiting for the audio thread at once: each holds up to the 25 MB upload limit in memory
 * (400 MB for all), and each waits at most the others' reads (about 0.3 s each at worst).
 */
export const AUDIO_MEASURES_PENDING_MAX = 16;

interface Measured {
  duration: AudioDuration | null;
  /** The same bytes, back from the thread. */
  bytes: Uint8Array;
}

let worker: Worker | null = null;
let nextId = 0;
const pending = new Map<number, { resolve: (m: Measured) => void; reject: (error: Error) => void }>();

function audioThread(): Worker {
  if (worker) return worker;
  const started = new Worker(new URL("./worker.ts", import.meta.url).href);
  started.onmessage = (event: MessageEvent<{ id: number } & Measured>) => {
    const waiter = pending.get(event.data.id);
    pending.delete(event.data.id);
    waiter?.resolve({ duration: event.data.duration, bytes: event.data.bytes });
  };
  started.onerror = (event) => {
    for (const waiter of pending.values()) waiter.reject(new Error(`the audio thread failed: ${event.message}`));
    pending.clear();
    worker = null;
  };
  started.unref(); // never keeps a process alive on its own
  worker = started;
  return started;
}

/**
 * The duration of `bytes`, read from its audio data (see duration.ts). The buffer is moved to
 * the thread while it is read: use the `bytes` returned, not the ones passed in.
 */
export function measureAudio(bytes: Uint8Array): Promise<Measured> {
  if (pending.size >= AUDIO_MEASURES_PENDING_MAX) return Promise.reject(new Error("the audio thread is saturated"));
  const id = nextId++;
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject });
    audioThread().postMessage({ id, bytes }, [bytes.buffer as ArrayBuffer]);
  });
}
