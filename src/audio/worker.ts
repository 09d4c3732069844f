/**
 * The audio thread: reading a 25 MB file's frames takes milliseconds when honest and up to about
 * a second when crafted to be slow (a sync pattern every other byte), so it runs here, off the
 * event loop that serves requests. The bytes are transferred in and back, never copied.
 * Message in: `{ id, bytes }`; out: `{ id, duration, bytes }`.
 */
import { audioDuration } from "./duration.ts";

declare const self: Worker;

self.onmessage = (event: MessageEvent<{ id: number; bytes: Uint8Array }>) => {
  const { id, bytes } = event.data;
  self.postMessage({ id, duration: audioDuration(bytes), bytes }, [bytes.buffer as ArrayBuffer]);
};
