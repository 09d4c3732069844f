/**
 * The gateway's operations for internal services over NATS, through the `nats` service
 * framework (so `$SRV.PING`, `$SRV.INFO` and `$SRV.STATS` list them). Each request calls the
 * operation itself with the same OperationInput the HTTP edge builds, its body read within the
 * same bounds (BODY_BYTES_MAX, JSON_DEPTH_MAX), and sends its result: a whole reply, or a chat
 * stream's relay events as NATS messages. Authentication, limits, billing and errors are
 * identical. The wire is described in wire.ts.
 *
 * Bounds: a stream sends chunks only against the caller's credit (core NATS has no flow
 * control), so a slow caller pauses the relay, whose queue pauses the upstream; a caller that
 * grants nothing for STREAM_CREDIT_WAIT_MS_MAX is taken for gone; at most STREAMS_OPEN_MAX
 * streams are open at once.
 */
import { headers as natsHeaders, type MsgHdrs, type NatsConnection, type Service, type ServiceMsg, type Subscription } from "nats";
import type { Subjects } from "../../actors/subjects.ts";
import { every } from "../background.ts";
import { errorBody, errorHeaders, fail, type Failure, describe } from "../errors.ts";
import type { OperationResult } from "../operations/run.ts";
import type { Relay } from "../operations/chat/relay.ts";
import { chunkJson } from "../providers/chunk.ts";
import { newRequestId, type OperationInput, parseForm, parseJsonText, presentedKey, tooLarge } from "../operations/input.ts";
import type { Credentials } from "../admission/caller.ts";
import { newId } from "../ids.ts";
import type { Logger } from "../log.ts";
import {
  HEADER_CANCEL_SUBJECT,
  HEADER_CREDIT,
  HEADER_CREDIT_SUBJECT,
  HEADER_ERROR,
  HEADER_ERROR_CODE,
  HEADER_HEARTBEAT,
  HEADER_PART,
  HEADER_PARTS,
  HEADER_SEQ,
  HEADER_STATUS,
  HEADERS_BYTES_ALLOWANCE,
  type Operation,
  OPERATIONS,
  operationPath,
  REPLY_PARTS_MAX,
  STREAM_CREDIT_DEFAULT,
  STREAM_CREDIT_MAX,
  STREAM_CREDIT_WAIT_MS_MAX,
  STREAM_HEARTBEAT_MS,
  STREAMS_OPEN_MAX,
} from "./wire.ts";

/** A paid operation with the gateway's services, for any transport (src/operations/paid.ts). */
export type OperationHandler = (input: OperationInput) => Promise<OperationResult>;

export interface InternalServiceOptions {
  nc: NatsConnection;
  /** The paid operations by their wire name; an operation missing here is not served. */
  operations: Partial<Record<Operation, OperationHandler>>;
  /** This gateway's origin as clients reach it, for links to its own media. */
  origin: string;
  subjects: Subjects;
  log: Logger;
  version?: string;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const EMPTY = new Uint8Array(0);

/** Streams' counts for `$SRV.STATS` (the framework counts requests and time per endpoint). */
interface StreamStats {
  open: number;
  total: number;
  cancelled: number;
  creditWaits: number;
  errors: number;
}

/** The service's handlers and its streams' bookkeeping. */
class InternalService {
  readonly stats: StreamStats = { open: 0, total: 0, cancelled: 0, creditWaits: 0, errors: 0 };
  /** Cancels the open streams (at stop). */
  readonly cancels = new Set<() => void>();
  private readonly nc: NatsConnection;
  private readonly subjects: Subjects;
  private readonly log: Logger;

  constructor(private readonly options: InternalServiceOptions) {
    this.nc = options.nc;
    this.subjects = options.subjects;
    this.log = options.log;
  }

  /** One request of any operation: the operation itself, its result sent as one message, ordered parts or a stream. */
  async handle(msg: ServiceMsg, operation: Operation): Promise<void> {
    if (!msg.reply) return; // nobody to answer
    const payloadMax = this.nc.info?.max_payload ?? 1_048_576;
    if (msg.data.length > payloadMax) {
      return this.replyFailure(msg, fail("request_too_large", `The request is larger than the NATS payload limit of ${payloadMax} bytes.`));
    }
    const requestId = newRequestId();
    // The caller's cancel aborts it: the upstream call is cut at once and billed once.
    const controller = new AbortController();
    const result = await this.options.operations[operation]!(natsInput(msg, requestId, this.options.origin, controller.signal));
    const h = natsHeaders();
    h.set("x-request-id", requestId);
    for (const [name, value] of Object.entries(result.headers)) h.set(name, value);
    if (result.kind === "refused") return this.replyRefused(msg, result.failure, h, payloadMax);
    if (result.kind === "stream") {
      if (this.stats.open >= STREAMS_OPEN_MAX) {
        controller.abort();
        return this.replyFailure(
          msg,
          fail("concurrency_limit_exceeded", `Too many streams open to internal services (${STREAMS_OPEN_MAX}).`, { retryAfterS: 1 }),
        );
      }
      return this.stream(msg, result.relay, h, controller);
    }
    h.set("Content-Type", result.contentType);
    const body =
      typeof result.body === "string" ? encoder.encode(result.body) : new Uint8Array(await new Response(result.body).arrayBuffer());
    this.replyBody(msg, body, h, 200, payloadMax);
  }

  /** A refusal: the OpenAI error body, its status and retry headers. */
  private replyRefused(msg: ServiceMsg, failure: Failure, h: MsgHdrs, payloadMax: number): void {
    h.set("Content-Type", "application/json");
    for (const [name, value] of Object.entries(errorHeaders(failure))) h.set(name, value);
    this.replyBody(msg, encoder.encode(JSON.stringify(errorBody(failure))), h, describe(failure.code).status, payloadMax);
  }

  /** A whole reply: one message, or ordered parts when larger than one message holds. */
  private replyBody(msg: ServiceMsg, body: Uint8Array, h: MsgHdrs, status: number, payloadMax: number): void {
    const partBytes = payloadMax - HEADERS_BYTES_ALLOWANCE;
    const parts = Math.max(1, Math.ceil(body.length / partBytes));
    if (parts > REPLY_PARTS_MAX) {
      return this.replyFailure(
        msg,
        fail(
          "request_too_large",
          `The reply (${body.length} bytes) is larger than ${REPLY_PARTS_MAX} NATS messages of ${payloadMax} bytes; call this over HTTP.`,
        ),
      );
    }
    h.set(HEADER_STATUS, String(status));
    if (status >= 400) {
      this.stats.errors++;
      h.set(HEADER_ERROR_CODE, String(status));
      h.set(HEADER_ERROR, errorMessage(body));
    }
    if (parts === 1) return void msg.respond(body, { headers: h });
    for (let i = 0; i < parts; i++) {
      const ph = i === 0 ? h : natsHeaders();
      ph.set(HEADER_PARTS, String(parts));
      ph.set(HEADER_PART, String(i));
      this.nc.publish(msg.reply!, body.subarray(i * partBytes, (i + 1) * partBytes), { headers: ph });
    }
  }

  private replyFailure(msg: ServiceMsg, failure: Failure): void {
    this.stats.errors++;
    const status = describe(failure.code).status;
    const h = natsHeaders();
    h.set(HEADER_STATUS, String(status));
    h.set("Content-Type", "application/json");
    msg.respondError(status, failure.message, encoder.encode(JSON.stringify(errorBody(failure))), { headers: h });
  }

  private async stream(msg: ServiceMsg, relay: Relay, opening: MsgHdrs, controller: AbortController): Promise<void> {
    const streamId = newId("str");
    this.stats.open++;
    this.stats.total++;
    const out = new StreamOut(this.nc, msg.reply!, Number(msg.headers?.get(HEADER_CREDIT)), () => {
      this.stats.cancelled++;
      controller.abort(); // the relay's client signal: cut the upstream at once, bill once
    });
    this.cancels.add(out.cancel);
    const subs: Subscription[] = [
      this.nc.subscribe(this.subjects.streamCredit(streamId), { callback: (_, m) => out.grant(Number(decoder.decode(m.data))) }),
      this.nc.subscribe(this.subjects.streamCancel(streamId), { callback: () => out.cancel() }),
    ];
    // A publish on a closed connection throws: the task catches it, and the stream's end stops it.
    const stopHeartbeat = every("internal_stream_heartbeat", STREAM_HEARTBEAT_MS / 2, this.log, () => out.heartbeat());
    try {
      opening.set(HEADER_STATUS, "200");
      opening.set("Content-Type", "text/event-stream");
      opening.set(HEADER_CREDIT_SUBJECT, this.subjects.streamCredit(streamId));
      opening.set(HEADER_CANCEL_SUBJECT, this.subjects.streamCancel(streamId));
      out.send(encoder.encode("{}"), opening);
      await this.relayEvents(relay, out);
      if (!out.cancelled) out.send(EMPTY, natsHeaders());
    } finally {
      stopHeartbeat();
      for (const sub of subs) sub.unsubscribe();
      this.cancels.delete(out.cancel);
      this.stats.open--;
      if (out.cancelled) relay.leave();
    }
  }

  /** The relay's events as NATS messages, each chunk against a credit; an error event ends the stream with its status. */
  private async relayEvents(relay: Relay, out: StreamOut): Promise<void> {
    for (let events = await relay.take(); events && !out.cancelled; events = await relay.take()) {
      for (const event of events) {
        if (event.kind === "keepAlive") continue; // our heartbeats do that
        if (event.kind === "done") return;
        if (event.kind === "error") {
          this.stats.errors++;
          const status = String(describe(event.failure.code).status);
          const h = natsHeaders();
          h.set(HEADER_STATUS, status);
          h.set(HEADER_ERROR_CODE, status);
          h.set(HEADER_ERROR, oneLine(event.failure.message));
          out.send(encoder.encode(JSON.stringify(errorBody(event.failure))), h);
          return;
        }
        if (out.credit <= 0) this.stats.creditWaits++;
        await out.waitForCredit();
        if (out.cancelled) return;
        out.credit--;
        out.send(encoder.encode(chunkJson(event)), natsHeaders());
      }
    }
  }
}

/**
 * One stream's way out: its messages in order (HEADER_SEQ), the caller's credit (granted on the
 * credit subject, at most STREAM_CREDIT_MAX), a heartbeat after STREAM_HEARTBEAT_MS of silence,
 * and its cancel (the caller's, the service's stop, or no credit for STREAM_CREDIT_WAIT_MS_MAX).
 */
class StreamOut {
  credit: number;
  cancelled = false;
  private seq = 0;
  private lastSentMs = performance.now();
  private wakeCredit: (() => void) | null = null;

  constructor(
    private readonly nc: NatsConnection,
    private readonly reply: string,
    asked: number,
    private readonly onCancel: () => void,
  ) {
    this.credit = Math.min(STREAM_CREDIT_MAX, Math.max(1, asked || STREAM_CREDIT_DEFAULT));
  }

  readonly cancel = (): void => {
    if (this.cancelled) return;
    this.cancelled = true;
    this.onCancel();
    this.wakeCredit?.();
  };

  grant(n: number): void {
    if (Number.isFinite(n) && n > 0) this.credit = Math.min(STREAM_CREDIT_MAX, this.credit + Math.floor(n));
    this.wakeCredit?.();
  }

  send(body: Uint8Array, h: MsgHdrs): void {
    h.set(HEADER_SEQ, String(this.seq++));
    this.nc.publish(this.reply, body, { headers: h });
    this.lastSentMs = performance.now();
  }

  heartbeat(): void {
    if (performance.now() - this.lastSentMs < STREAM_HEARTBEAT_MS) return;
    const h = natsHeaders();
    h.set(HEADER_HEARTBEAT, "1");
    this.nc.publish(this.reply, EMPTY, { headers: h });
    this.lastSentMs = performance.now();
  }

  /** Waits while no credit is left; cancels the stream when none comes within STREAM_CREDIT_WAIT_MS_MAX. */
  async waitForCredit(): Promise<void> {
    const startedMs = performance.now();
    while (this.credit <= 0 && !this.cancelled) {
      const waitedMs = performance.now() - startedMs;
      if (waitedMs >= STREAM_CREDIT_WAIT_MS_MAX) return this.cancel();
      let timer: ReturnType<typeof setTimeout> | undefined;
      await new Promise<void>((resolve) => {
        this.wakeCredit = resolve;
        timer = setTimeout(resolve, STREAM_CREDIT_WAIT_MS_MAX - waitedMs);
      });
      clearTimeout(timer);
      this.wakeCredit = null;
    }
  }
}

/**
 * Starts the service on `nc`; resolves to a stop function that ends it (open streams are cancelled).
 * @example const stop = await serveInternal({ nc, chat, operations, origin, subjects, log }); … await stop();
 */
export async function serveInternal(options: InternalServiceOptions): Promise<() => Promise<void>> {
  const { nc, subjects, log } = options;
  const internal = new InternalService(options);
  const stats = internal.stats;
  const service: Service = await nc.services.add({
    name: "darvaze",
    version: options.version ?? "0.1.0",
    description: "OpenAI-compatible operations of the Darvaze gateway (same JSON as /v1, Authorization header)",
    queue: "darvaze",
    statsHandler: async () => ({
      streams_open: stats.open,
      streams_total: stats.total,
      streams_cancelled: stats.cancelled,
      credit_waits: stats.creditWaits,
      replies_failed: stats.errors,
    }),
  });
  for (const operation of OPERATIONS) {
    const path = operationPath(operation);
    if (!options.operations[operation]) continue;
    service.addEndpoint(operation.replaceAll(".", "_"), {
      subject: subjects.operation(operation),
      metadata: { path },
      handler: (error, msg) => {
        if (error) return log("error", "internal_endpoint_failed", { operation, error: error.message });
        void internal.handle(msg, operation).catch((e: Error) => {
          stats.errors++;
          log("error", "internal_request_failed", { operation, error: e.message });
        });
      },
    });
  }

  return async () => {
    for (const cancel of [...internal.cancels]) cancel();
    await service.stop();
  };
}

function errorMessage(body: Uint8Array): string {
  try {
    const parsed = JSON.parse(decoder.decode(body)) as { error?: { message?: unknown } };
    if (typeof parsed.error?.message === "string") return oneLine(parsed.error.message);
  } catch {}
  return "error";
}

/** Header values are one line, and short. */
function oneLine(message: string): string {
  return message.replace(/[\r\n]+/g, " ").slice(0, 512);
}

/** What an internal caller presented: its key and residency (never a browser origin). */
function credentialsOfMsg(msg: ServiceMsg): Credentials {
  return { key: presentedKey(msg.headers?.get("Authorization")), origin: null, residency: msg.headers?.get("x-darvaze-residency") || null };
}

/** A NATS request as an operation's input: the message's headers and payload, read within the same bounds as over HTTP. */
function natsInput(msg: ServiceMsg, requestId: string, origin: string, signal: AbortSignal): OperationInput {
  return {
    requestId,
    credentials: credentialsOfMsg(msg),
    json: async ({ bytesMax, depthMax }) =>
      msg.data.length > bytesMax ? tooLarge(bytesMax) : parseJsonText(decoder.decode(msg.data), depthMax),
    form: async (bytesMax) => (msg.data.length > bytesMax ? null : parseForm(msg.data, msg.headers?.get("Content-Type") || null)),
    origin,
    signal,
  };
}
