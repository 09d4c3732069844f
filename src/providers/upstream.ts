/**
 * The only place that talks to upstreams. `sendUpstream` bounds the wait for the reply's
 * headers (and, for a whole JSON reply, its body); `UpstreamStream` bounds the silence
 * between chunks. Either bound aborts the upstream request, so it stops generating.
 *
 * Upstreams never redirect the gateway: a 3xx is an upstream error (another backend may be
 * tried), never a hop to follow. A backend that redirects could otherwise send a prompt, and
 * the backend's own key in `x-api-key` or `x-goog-api-key` (fetch strips only `Authorization`
 * across origins), to any server, or point the gateway at its own private network and have the
 * reply billed as the backend's. Only a file an upstream points to (fetchUpstreamFile) follows
 * redirects, each hop judged again.
 */
import { taskFailed } from "../background.ts";
import { createLogger } from "../log.ts";
import { fileTarget, systemLookup, type Lookup } from "./fileUrl.ts";
import type { ChatStreamDecoder, StreamPiece, UpstreamFailure, UpstreamRequest } from "./types.ts";

export interface UpstreamCall {
  /** The backend's base URL, e.g. `http://10.0.0.5:8000/v1`. */
  baseUrl: string;
  request: UpstreamRequest;
  requestId: string;
  /** Aborted when the client goes away. */
  signal?: AbortSignal;
  timeoutMs: number;
}

/**
 * How an accepted reply ended, for its backend: `done` (read to its end: its timing is learnt),
 * `failed` (it broke off or sent an error: counts against the backend), `abandoned` (we stopped
 * it: the client left, the budget ran out, it was too large; nothing is learnt).
 */
export type ReplyEnd = "done" | "failed" | "abandoned";

/** What a reply read to its end teaches its backend's estimates. */
export interface ReplyTiming {
  ttftMs?: number;
  outputTokens: number;
  durationMs: number;
}

/**
 * An accepted upstream reply, owned by whoever reads it until `close`. One close ends it
 * whatever happened: the headers timeout and the client's abort listener are cleared, the
 * upstream request is aborted unless its body was read to its end, and `onClose` (the pool:
 * the backend's slot and estimates) learns how it ended. Later calls do nothing.
 */
export class UpstreamReply {
  /** Set by the pool before the reply is handed over. */
  onClose: ((end: ReplyEnd, timing?: ReplyTiming) => void) | null = null;
  private closed = false;

  constructor(
    readonly response: Response,
    private readonly controller: AbortController,
    private readonly cleanup: () => void,
  ) {}

  get isClosed(): boolean {
    return this.closed;
  }

  /**
   * The body is being streamed to a client: the headers timeout no longer applies, and the
   * client's signal no longer aborts the upstream at once (the stream's owner decides when).
   */
  streaming(): void {
    this.cleanup();
  }

  /** Ends the reply (see the class); `timing` for a reply read to its end. */
  close(end: ReplyEnd, timing?: ReplyTiming): void {
    if (this.closed) return;
    this.closed = true;
    this.cleanup();
    if (end !== "done") this.controller.abort();
    this.onClose?.(end, timing);
  }
}

export type UpstreamResult =
  | { ok: true; reply: UpstreamReply }
  /** `redirect`: the upstream answered with a redirect, which was not followed (see the module). */
  | { ok: false; failure: UpstreamFailure; redirect?: UpstreamRedirect };

/** A redirect an upstream answered with: its status and the origin it pointed to (never its path or query). */
export interface UpstreamRedirect {
  status: number;
  /** `https://host:port` of the `location` header; null when absent or not a URL. */
  locationOrigin: string | null;
}

/** Whether a status is a redirect, which no upstream call follows. */
export function isRedirect(status: number): boolean {
  return status >= 300 && status <= 399;
}

/** The redirect a response is, for logs and metrics; null when it is not one. */
export function redirectOf(response: Response, base: string): UpstreamRedirect | null {
  if (!isRedirect(response.status)) return null;
  const location = response.headers.get("location");
  const target = location === null ? null : URL.parse(location, base);
  return { status: response.status, locationOrigin: target && target.origin !== "null" ? target.origin : null };
}

/** A redirect as the failure it is: worth another backend, since this one cannot answer here. */
export function redirectFailure(redirect: UpstreamRedirect): UpstreamFailure {
  return {
    code: "upstream_error",
    message: `The upstream answered with a redirect (status ${redirect.status}), which the gateway does not follow.`,
    retryable: true,
  };
}

export async function sendUpstream(call: UpstreamCall): Promise<UpstreamResult> {
  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort();
  }, call.timeoutMs);
  const onClientAbort = () => controller.abort();
  call.signal?.addEventListener("abort", onClientAbort, { once: true });
  const cleanup = () => {
    clearTimeout(timer);
    call.signal?.removeEventListener("abort", onClientAbort);
  };
  try {
    const url = call.baseUrl.replace(/\/+$/, "") + call.request.path;
    const response = await fetch(url, {
      method: "POST",
      body: call.request.body,
      headers: { ...call.request.headers, "x-request-id": call.requestId },
      redirect: "manual",
      signal: controller.signal,
    });
    const redirect = redirectOf(response, url);
    if (redirect) {
      cleanup();
      controller.abort(); // the redirect's body is not read
      return { ok: false, failure: redirectFailure(redirect), redirect };
    }
    return { ok: true, reply: new UpstreamReply(response, controller, cleanup) };
  } catch (error) {
    cleanup();
    if (timedOut)
      return { ok: false, failure: { code: "upstream_timeout", message: "The upstream did not answer in time.", retryable: true } };
    if (call.signal?.aborted) return { ok: false, failure: { code: "upstream_error", message: "The client went away.", retryable: false } };
    return {
      ok: false,
      failure: { code: "upstream_error", message: `Could not reach the upstream: ${(error as Error).message}`, retryable: true },
    };
  }
}

/** An upstream's error body is read up to this many bytes (the rest is dropped): enough for any vendor's error JSON. */
export const UPSTREAM_ERROR_BODY_BYTES_MAX = 64 * 1024;
/** A whole (non-streamed) chat reply larger than this is refused as an upstream error. */
export const CHAT_REPLY_BYTES_MAX = 16 * 1024 * 1024;

/**
 * Reads a body within `bytesMax`. Past the bound it stops reading, cancels the body and returns
 * its first `bytesMax` bytes with `truncated` set, so a misbehaving upstream can never make the
 * gateway buffer more. A body that breaks off throws. A body whose declared, uncompressed length
 * fits (the usual whole reply) is read in one native call: its framing already bounds it.
 */
export async function readBounded(response: Response, bytesMax: number): Promise<{ bytes: Uint8Array; truncated: boolean }> {
  if (declaredWithin(response, bytesMax)) return { bytes: new Uint8Array(await response.arrayBuffer()), truncated: false };
  const parts: Uint8Array[] = [];
  let total = 0;
  const reader = response.body?.getReader();
  if (!reader) return { bytes: new Uint8Array(0), truncated: false };
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (total + value.byteLength > bytesMax) {
        parts.push(value.subarray(0, bytesMax - total));
        await reader.cancel().catch(() => {});
        return { bytes: Buffer.concat(parts), truncated: true };
      }
      total += value.byteLength;
      parts.push(value);
    }
    return { bytes: Buffer.concat(parts), truncated: false };
  } finally {
    reader.releaseLock();
  }
}

/** Whether a body's framing bounds it within `bytesMax`: a declared length that fits, not compressed. */
function declaredWithin(response: Response, bytesMax: number): boolean {
  const declared = response.headers.get("content-length");
  const encoding = response.headers.get("content-encoding");
  return declared !== null && Number(declared) <= bytesMax && (encoding === null || encoding === "identity");
}

/** Reads a body as text within `bytesMax` (readBounded). */
export async function readTextBounded(response: Response, bytesMax: number): Promise<{ text: string; truncated: boolean }> {
  if (declaredWithin(response, bytesMax)) return { text: await response.text(), truncated: false };
  const { bytes, truncated } = await readBounded(response, bytesMax);
  return { text: new TextDecoder().decode(bytes), truncated };
}

export class StreamStalled extends Error {}

export interface StreamTiming {
  /** Silence after which the stream's owner is told to send a keep-alive (and again after each further interval). */
  keepAliveMs: number;
  /** Silence after which the read is ended and StreamStalled thrown. */
  stallMsMax: number;
}

/** How many times per keep-alive (or stall) interval the silence of every open stream is checked. */
export const SILENCE_CHECKS_PER_INTERVAL = 10;

type BodyRead = { done: true; value?: undefined } | { done: false; value: Uint8Array };
/** What of a body's reader the stream uses. */
interface BodyReader {
  read(): Promise<BodyRead>;
  cancel(): Promise<void>;
  releaseLock(): void;
}

/** An open upstream stream as the silence watch sees it. */
interface Silence {
  timing: StreamTiming;
  /** How often the watch must look at it: a tenth of its shorter interval. */
  everyMs: number;
  /** A read is pending: only then is the upstream silent (not while the relay waits for its client). */
  waiting: boolean;
  /** Performance-clock time the pending read began, and of its last keep-alive. */
  sinceMs: number;
  keptAliveMs: number;
  onKeepAlive: () => void;
  onStall: () => void;
}

/**
 * The silence of every open upstream stream, checked by one timer for the whole process rather
 * than a timer (and a race of promises) per network read: a slow stream's reads then leave no
 * garbage that outlives them. Silence is counted only while a read is pending, from when it
 * began; a check is at most 1/SILENCE_CHECKS_PER_INTERVAL of an interval late. The timer ticks as
 * often as the most demanding open stream needs (streams of one gateway share one timing).
 */
const silences = new Set<Silence>();
/** Open streams by how often they must be looked at. */
const periods = new Map<number, number>();
let watchTimer: ReturnType<typeof setInterval> | null = null;
let watchEveryMs = 0;

/** The watch now: the open upstream streams it watches (a closed stream is no longer), and how often it ticks (0: stopped). */
export function silenceWatch(): { streams: number; everyMs: number } {
  return { streams: silences.size, everyMs: watchEveryMs };
}

/** Where a failure inside the watch is reported: it has no request, and must not end the process. */
const watchLog = createLogger("error");

function checkSilences(): void {
  const now = performance.now();
  for (const s of silences) {
    if (!s.waiting) continue;
    try {
      if (now - s.sinceMs >= s.timing.stallMsMax) {
        unwatch(s);
        s.onStall();
      } else if (now - s.keptAliveMs >= s.timing.keepAliveMs) {
        s.keptAliveMs = now;
        s.onKeepAlive();
      }
    } catch (error) {
      // One stream's fault stops its own watch, not the others' nor the process.
      unwatch(s);
      taskFailed("stream_silence_watch", watchLog, error);
    }
  }
}

/** Starts, re-times or stops the one timer to suit the open streams. */
function retime(): void {
  const everyMs = periods.size === 0 ? 0 : Math.min(...periods.keys());
  if (everyMs === watchEveryMs) return;
  if (watchTimer) clearInterval(watchTimer);
  watchTimer = null;
  watchEveryMs = everyMs;
  if (everyMs === 0) return;
  watchTimer = setInterval(checkSilences, everyMs);
  watchTimer.unref?.();
}

function watch(s: Silence): void {
  silences.add(s);
  periods.set(s.everyMs, (periods.get(s.everyMs) ?? 0) + 1);
  retime();
}

function unwatch(s: Silence): void {
  if (!silences.delete(s)) return;
  const left = (periods.get(s.everyMs) ?? 1) - 1;
  if (left > 0) periods.set(s.everyMs, left);
  else {
    periods.delete(s.everyMs);
    retime();
  }
}

/**
 * An accepted reply's SSE body, read through the adapter's decoder. Its owner awaits `read()`
 * (the body's own read: nothing of ours is allocated per chunk while it waits), hands the bytes
 * to `piece`, and calls `close` once done. Every `keepAliveMs` a read stays pending calls
 * `onKeepAlive`, so the edge can keep the client's connection alive; a read pending for
 * `stallMsMax` is ended, and `ended` then throws StreamStalled. Time the owner spends elsewhere
 * (waiting for a slow client, for the meter) is not silence. It never ends the reply: its owner
 * closes it, once, saying how it ended.
 */
export class UpstreamStream {
  private readonly reader: BodyReader | null;
  private readonly text = new TextDecoder();
  private readonly silence: Silence;
  private stalled = false;

  constructor(
    reply: UpstreamReply,
    private readonly decoder: ChatStreamDecoder,
    timing: StreamTiming,
    onKeepAlive: () => void,
  ) {
    this.reader = reply.response.body?.getReader() ?? null;
    this.silence = {
      timing,
      everyMs: Math.max(1, Math.min(timing.keepAliveMs, timing.stallMsMax) / SILENCE_CHECKS_PER_INTERVAL),
      waiting: false,
      sinceMs: 0,
      keptAliveMs: 0,
      onKeepAlive,
      onStall: () => {
        this.stalled = true;
        // A pending read resolves as done; the stall is reported by `ended` (or `stall`).
        this.reader?.cancel().catch(() => {});
      },
    };
    if (this.reader) watch(this.silence);
  }

  /**
   * The next network read, or `{ done: true }` at the end. The body's own promise, not wrapped,
   * so that a read waiting for a slow upstream holds nothing of ours; after `done`, call `ended`.
   */
  read(): Promise<BodyRead> {
    if (!this.reader || this.stalled) return Promise.resolve({ done: true, value: undefined });
    const now = performance.now();
    this.silence.waiting = true;
    this.silence.sinceMs = now;
    this.silence.keptAliveMs = now;
    return this.reader.read();
  }

  /** After a read said `done`: throws StreamStalled when it was the stall that ended the body. */
  ended(): void {
    this.silence.waiting = false;
    const stall = this.stall();
    if (stall) throw stall;
  }

  /** The stall that ended the body, if it was one (however the cancelled read then ended). */
  stall(): StreamStalled | null {
    return this.stalled ? new StreamStalled(`no data from the upstream for ${this.silence.timing.stallMsMax} ms`) : null;
  }

  /** A read's bytes, decoded. */
  piece(bytes: Uint8Array): StreamPiece {
    this.silence.waiting = false;
    return this.decoder.push(this.text.decode(bytes, { stream: true }));
  }

  /** Stops watching the silence and lets go of the body. */
  close(): void {
    unwatch(this.silence);
    try {
      this.reader?.releaseLock();
    } catch {}
  }
}

/** Redirects followed for one file download; each hop's URL is judged again (fileTarget). */
export const FILE_REDIRECTS_MAX = 5;

export interface FileFetch {
  /** The backend that pointed to the file: its own origin is fetched as configured. */
  backendUrl: string;
  bytesMax: number;
  /** For the whole download: name lookups, every redirect hop and the body. */
  timeoutMs: number;
  /** Name resolution; tests inject one. Default: the system's (dns.lookup). */
  lookup?: Lookup;
}

/**
 * Downloads a file an upstream pointed to (an image URL), within `bytesMax` and `timeoutMs`,
 * so the gateway can serve it itself and the upstream's URL never reaches a client. Only the
 * backend's own origin, public `https` hosts and `data:` are fetched (src/providers/fileUrl.ts):
 * a compromised backend cannot make the gateway read its own files or its private network.
 */
export async function fetchUpstreamFile(
  url: string,
  fetching: FileFetch,
): Promise<{ bytes: Uint8Array; contentType: string | null } | UpstreamFailure> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), fetching.timeoutMs);
  try {
    const response = await followFile(url, fetching, controller.signal);
    if (!(response instanceof Response)) return response;
    if (!response.ok) {
      await response.body?.cancel().catch(() => {});
      return { code: "upstream_error", message: `The upstream's file could not be fetched (status ${response.status}).`, retryable: false };
    }
    const { bytes, truncated } = await readBounded(response, fetching.bytesMax);
    if (truncated) {
      controller.abort();
      return {
        code: "upstream_error",
        message: `The upstream's file is larger than the limit of ${fetching.bytesMax} bytes.`,
        retryable: false,
      };
    }
    return { bytes, contentType: response.headers.get("content-type") };
  } catch (error) {
    return {
      code: controller.signal.aborted ? "upstream_timeout" : "upstream_error",
      message: `The upstream's file could not be fetched: ${(error as Error).message}`,
      retryable: false,
    };
  } finally {
    clearTimeout(timer);
  }
}

const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);

/** The first non-redirect response for `raw`, every hop judged by fileTarget; or why it was refused. */
async function followFile(raw: string, fetching: FileFetch, signal: AbortSignal): Promise<Response | UpstreamFailure> {
  const refused = (why: string): UpstreamFailure => ({
    code: "upstream_error",
    message: `The upstream's file URL was refused: ${why}.`,
    retryable: false,
  });
  let url = URL.parse(raw);
  if (!url) return refused("it is not a URL");
  // Inline bytes, decoded in-process; only as the URL the upstream gave, never as a redirect's target.
  if (url.protocol === "data:") return fetch(url, { signal });
  const policy = { backendUrl: fetching.backendUrl, lookup: fetching.lookup ?? systemLookup };
  for (let hop = 0; ; hop++) {
    const target = await abortable(fileTarget(url, policy), signal);
    if ("refused" in target) return refused(target.refused);
    const response = await fetch(target.url, { redirect: "manual", signal, headers: target.headers, tls: target.tls });
    if (!REDIRECT_STATUSES.has(response.status)) return response;
    await response.body?.cancel().catch(() => {});
    const location = response.headers.get("location");
    if (location === null) return refused(`a ${response.status} redirect without a location`);
    if (hop >= FILE_REDIRECTS_MAX) return refused(`more than ${FILE_REDIRECTS_MAX} redirects`);
    url = URL.parse(location, url.href);
    if (!url) return refused("a redirect to something that is not a URL");
  }
}

/** A name lookup cannot be cancelled; the download's deadline stops waiting for it. */
function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new Error("timed out"));
    if (signal.aborted) return onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}
