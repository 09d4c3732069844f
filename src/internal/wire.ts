/**
 * The wire of the gateway's operations over NATS, shared by the service (service.ts) and the
 * client helper (client.ts).
 *
 * Request: a message on `<prefix>.v1.<operation>` (e.g. `gw.v1.chat.completions`) with a reply
 * subject, an `Authorization: Bearer <key>` header and the same JSON body as over HTTP
 * (`Content-Type` and `x-darvaze-residency` pass through too).
 *
 * Whole reply: one message, headers `Status` (the HTTP status), `Content-Type`, `x-request-id`,
 * and a paid operation's `x-darvaze-cost` and `x-ratelimit-*` (the operation's own headers);
 * errors also carry `Nats-Service-Error-Code` / `Nats-Service-Error` and the OpenAI error body.
 * A reply larger than one NATS message (many embeddings, a large image as b64_json) comes in
 * parts: each message carries `Darvaze-Parts: <n>` and `Darvaze-Part: <i>` (0-based, in order)
 * and a slice of the body; the first also carries the headers above. The caller joins them.
 * Above REPLY_PARTS_MAX parts the reply is a 413 naming the limit (the operation was not lost:
 * it ran and is billed, as over HTTP; call it over HTTP instead).
 *
 * Stream (`"stream": true`): messages to the reply subject, in order:
 *   opening   seq 0: `Status: 200`, `Darvaze-Credit-Subject`, `Darvaze-Cancel-Subject`, body `{}`
 *   chunks    seq 1, 2, …: one chat.completion.chunk JSON each (what follows `data: ` over HTTP),
 *             sent only while the caller has credit: the request's `Darvaze-Credit` header grants
 *             the first window (messages), and the caller adds more by publishing a number to the
 *             credit subject. Without credit the gateway stops reading, so the upstream pauses.
 *   heartbeat no seq, empty body, `Darvaze-Heartbeat: 1`, after each STREAM_HEARTBEAT_MS without
 *             a message, so the caller can tell a slow upstream from a dead gateway.
 *   error     a seq, `Status` and `Nats-Service-Error-Code` headers, the OpenAI error body.
 *   end       the last seq, empty body (after the last chunk or the error).
 * Anything published to the cancel subject stops the stream: the upstream is aborted and the
 * tokens it generated are billed, as when an HTTP client goes away.
 *
 * Accounts: every subject a caller publishes to lies under `<prefix>.v1.` — the operations, and
 * the credit and cancel subjects `<prefix>.v1.streams.<stream id>.credit|cancel` — so a NATS
 * server with an account per caller exports them as services (`<prefix>.v1.streams.*.credit`)
 * and nothing else; replies go to the caller's own reply subject, which the server maps across
 * accounts (docs/nats/darvaze.conf).
 */
import { OPERATIONS as CATALOG_OPERATIONS, type Operation as PaidOperation } from "../catalog/file.ts";

export const HEADER_STATUS = "Status";
export const HEADER_SEQ = "Darvaze-Seq";
export const HEADER_CREDIT = "Darvaze-Credit";
export const HEADER_CREDIT_SUBJECT = "Darvaze-Credit-Subject";
export const HEADER_CANCEL_SUBJECT = "Darvaze-Cancel-Subject";
export const HEADER_HEARTBEAT = "Darvaze-Heartbeat";
export const HEADER_PARTS = "Darvaze-Parts";
export const HEADER_PART = "Darvaze-Part";
export const HEADER_ERROR_CODE = "Nats-Service-Error-Code";
export const HEADER_ERROR = "Nats-Service-Error";

/** Credit window when the request names none, in chunk messages. */
export const STREAM_CREDIT_DEFAULT = 64;
/** The most credit a caller may hold at once, in chunk messages. */
export const STREAM_CREDIT_MAX = 1_024;
/** A heartbeat after this long without a message to the caller. */
export const STREAM_HEARTBEAT_MS = 2_000;
/** A stream whose caller grants no credit for this long is cancelled (the caller is gone). */
export const STREAM_CREDIT_WAIT_MS_MAX = 30_000;
/** Streams open to internal services at once on one node; more get 429. */
export const STREAMS_OPEN_MAX = 20_000;
/** The most messages one whole reply may take (about 64 MiB at NATS's default 1 MiB payload). */
export const REPLY_PARTS_MAX = 64;
/** Room kept for headers when a whole reply is checked against the NATS payload limit. */
export const HEADERS_BYTES_ALLOWANCE = 4_096;

/** The HTTP path an operation is served on: `chat.completions` → `/v1/chat/completions`. */
export function operationPath(operation: string): string {
  return `/v1/${operation.replaceAll(".", "/")}`;
}

/** Each paid operation's name on the wire: its HTTP path's, dotted (`gw.v1.<name>`). */
export const OPERATION_NAMES = {
  chat: "chat.completions",
  embeddings: "embeddings",
  images: "images.generations",
  speech: "audio.speech",
  transcription: "audio.transcriptions",
} as const satisfies Record<PaidOperation, string>;

/** The operations internal services may call: every paid operation (src/catalog/file.ts `OPERATIONS`), by its wire name. */
export const OPERATIONS = CATALOG_OPERATIONS.map((operation) => OPERATION_NAMES[operation]);
export type Operation = (typeof OPERATION_NAMES)[PaidOperation];
