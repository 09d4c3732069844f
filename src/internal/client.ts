/**
 * A small client for the gateway's operations over NATS (wire.ts): whole replies, and streams
 * with sequence checks, credit grants, heartbeats and a stall timer.
 *
 * @example
 * const gw = new InternalClient(nc, { apiKey: process.env.DARVAZE_KEY! });
 * for await (const chunk of gw.stream("chat.completions", { model: "gpt-4o-mini", messages, stream: true })) {
 *   process.stdout.write(chunk.choices[0]?.delta?.content ?? "");
 * }
 */
import { createInbox, headers as natsHeaders, type Msg, type NatsConnection } from "nats";
import { subjects as buildSubjects, type Subjects } from "../../actors/subjects.ts";
import {
  HEADER_CANCEL_SUBJECT,
  HEADER_CREDIT,
  HEADER_CREDIT_SUBJECT,
  HEADER_ERROR_CODE,
  HEADER_HEARTBEAT,
  HEADER_PART,
  HEADER_PARTS,
  HEADER_SEQ,
  HEADER_STATUS,
  REPLY_PARTS_MAX,
  STREAM_CREDIT_DEFAULT,
} from "./wire.ts";
import { TIMED_OUT, within } from "../within.ts";

export interface InternalClientOptions {
  apiKey: string;
  /** The gateway's DARVAZE_SUBJECT_PREFIX. */
  prefix?: string;
  /** Chunks granted at a time; more is granted when half of it was consumed. */
  creditWindow?: number;
  /** A stream silent this long (no chunk, no heartbeat) is cancelled and fails. */
  stallMs?: number;
  /** Bound on a whole reply. */
  timeoutMs?: number;
}

/** The gateway's error: its HTTP status and the OpenAI error body. */
export class InternalError extends Error {
  constructor(
    readonly status: number,
    readonly body: { error: { message: string; type: string; param: string | null; code: string } },
  ) {
    super(body.error.message);
  }
}

export interface InternalReply {
  status: number;
  headers: Record<string, string>;
  body: Uint8Array;
  json<T = unknown>(): T;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export class InternalClient {
  private readonly subjects: Subjects;
  private readonly creditWindow: number;
  private readonly stallMs: number;
  private readonly timeoutMs: number;

  constructor(
    private readonly nc: NatsConnection,
    private readonly options: InternalClientOptions,
  ) {
    this.subjects = buildSubjects(options.prefix ?? "gw");
    this.creditWindow = options.creditWindow ?? STREAM_CREDIT_DEFAULT;
    this.stallMs = options.stallMs ?? 30_000;
    this.timeoutMs = options.timeoutMs ?? 120_000;
  }

  private encode(body: unknown): Uint8Array {
    const data = body instanceof Uint8Array ? body : encoder.encode(JSON.stringify(body));
    const payloadMax = this.nc.info?.max_payload ?? 1_048_576;
    if (data.length > payloadMax) {
      throw new InternalError(413, {
        error: {
          message: `The request is ${data.length} bytes, more than the NATS payload limit of ${payloadMax} bytes; send it over HTTP.`,
          type: "invalid_request_error",
          param: null,
          code: "request_too_large",
        },
      });
    }
    return data;
  }

  private requestHeaders(credit?: number, contentType = "application/json") {
    const h = natsHeaders();
    h.set("Authorization", `Bearer ${this.options.apiKey}`);
    h.set("Content-Type", contentType);
    if (credit !== undefined) h.set(HEADER_CREDIT, String(credit));
    return h;
  }

  /**
   * One whole reply (a non-streamed operation); an error status throws InternalError. The body
   * is JSON, or FormData for `audio.transcriptions` (sent as multipart, as over HTTP).
   */
  async request(operation: string, body: unknown): Promise<InternalReply> {
    if ((body as { stream?: unknown } | null)?.stream === true)
      throw new TypeError("a streamed request goes through stream(), not request()");
    let data: Uint8Array;
    let contentType = "application/json";
    if (body instanceof FormData) {
      const multipart = new Response(body);
      contentType = multipart.headers.get("content-type")!;
      data = this.encode(new Uint8Array(await multipart.arrayBuffer()));
    } else data = this.encode(body);
    const reply = await this.whole(operation, data, contentType);
    if (reply.status >= 400) throw new InternalError(reply.status, reply.json());
    return reply;
  }

  /** Sends one request and gathers its reply, joining the parts of a reply that came in several messages. */
  private async whole(operation: string, data: Uint8Array, contentType: string): Promise<InternalReply> {
    const inbox = createInbox();
    const sub = this.nc.subscribe(inbox, { max: REPLY_PARTS_MAX });
    const timer = setTimeout(() => sub.unsubscribe(), this.timeoutMs);
    try {
      this.nc.publish(this.subjects.operation(operation), data, { reply: inbox, headers: this.requestHeaders(undefined, contentType) });
      let first: Msg | null = null;
      const parts: Uint8Array[] = [];
      for await (const msg of sub) {
        if (msg.headers?.code === 503 && msg.data.length === 0 && !msg.headers.get(HEADER_STATUS)) {
          throw failure(503, "service_unavailable", "No gateway serves this operation on NATS.");
        }
        const count = Number(msg.headers?.get(HEADER_PARTS) || 1);
        const index = Number(msg.headers?.get(HEADER_PART) || 0);
        if (index !== parts.length) throw failure(502, "upstream_error", `Reply part ${parts.length} was lost (got ${index}).`);
        first ??= msg;
        parts.push(msg.data);
        if (parts.length === count) {
          const body = parts.length === 1 ? msg.data : Buffer.concat(parts);
          return { ...toReply(first), body, json: <T>() => JSON.parse(decoder.decode(body)) as T };
        }
      }
      throw failure(504, "upstream_timeout", `The gateway did not reply within ${this.timeoutMs} ms.`);
    } finally {
      clearTimeout(timer);
      sub.unsubscribe();
    }
  }

  /**
   * A streamed operation: yields each chunk's JSON in order. Throws InternalError on the
   * gateway's error (before or during the stream), and when the stream stalls for `stallMs`
   * or loses a message. Leaving the loop early cancels the stream (the upstream is aborted).
   */
  // biome-ignore lint/suspicious/noExplicitAny: a caller names the chunk type it expects; untyped callers read chunks as JSON
  async *stream<T = any>(operation: string, body: unknown): AsyncGenerator<T> {
    const data = this.encode(body);
    const inbox = createInbox();
    const sub = this.nc.subscribe(inbox);
    const iterator = sub[Symbol.asyncIterator]();
    let cancelSubject: string | null = null;
    let creditSubject: string | null = null;
    let finished = false;
    let expected = 0;
    let consumed = 0;
    try {
      this.nc.publish(this.subjects.operation(operation), data, { reply: inbox, headers: this.requestHeaders(this.creditWindow) });
      for (;;) {
        const next = await within(iterator.next(), this.stallMs);
        if (next === TIMED_OUT) throw failure(504, "upstream_timeout", `The gateway sent nothing for ${this.stallMs} ms.`);
        if (next.done) throw failure(503, "service_unavailable", "The connection to NATS closed during the stream.");
        const msg = next.value;
        if (msg.headers?.get(HEADER_HEARTBEAT)) continue;
        const seq = Number(msg.headers?.get(HEADER_SEQ) ?? NaN);
        const status = Number(msg.headers?.get(HEADER_STATUS) || 200);
        if (Number.isNaN(seq)) {
          // A whole reply: the gateway refused before streaming (or a NATS no-responders status).
          const reply = toReply(msg);
          if (msg.headers?.code === 503 && msg.data.length === 0)
            throw failure(503, "service_unavailable", "No gateway serves this operation on NATS.");
          finished = true;
          throw new InternalError(reply.status, reply.json());
        }
        if (seq !== expected) throw failure(502, "upstream_error", `Stream message ${expected} was lost (got ${seq}).`);
        expected++;
        if (seq === 0) {
          if (status >= 400 || msg.headers?.get(HEADER_ERROR_CODE)) {
            finished = true;
            throw new InternalError(status, toReply(msg).json());
          }
          cancelSubject = msg.headers?.get(HEADER_CANCEL_SUBJECT) || null;
          creditSubject = msg.headers?.get(HEADER_CREDIT_SUBJECT) || null;
          continue;
        }
        if (msg.data.length === 0) {
          finished = true;
          return;
        }
        if (msg.headers?.get(HEADER_ERROR_CODE)) {
          finished = true;
          throw new InternalError(status, JSON.parse(decoder.decode(msg.data)));
        }
        consumed++;
        if (creditSubject && consumed >= Math.ceil(this.creditWindow / 2)) {
          this.nc.publish(creditSubject, encoder.encode(String(consumed)));
          consumed = 0;
        }
        yield JSON.parse(decoder.decode(msg.data)) as T;
      }
    } finally {
      if (!finished && cancelSubject) this.nc.publish(cancelSubject, new Uint8Array(0));
      sub.unsubscribe();
    }
  }
}

function failure(status: number, code: string, message: string): InternalError {
  return new InternalError(status, { error: { message, type: status === 504 ? "timeout" : "api_error", param: null, code } });
}

function toReply(msg: Msg): InternalReply {
  const headers: Record<string, string> = {};
  for (const [name, values] of msg.headers ?? []) headers[name] = values[0] ?? "";
  return {
    status: Number(msg.headers?.get(HEADER_STATUS) || 200),
    headers,
    body: msg.data,
    json: <T>() => JSON.parse(decoder.decode(msg.data)) as T,
  };
}
