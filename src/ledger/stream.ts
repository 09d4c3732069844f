/**
 * Durable usage over NATS: each group-committed batch of usage records is appended to a
 * JetStream stream and acknowledged there (file storage) before it counts as written, so a
 * gateway killed after the acknowledgement loses nothing; a durable consumer, shared by every
 * node, posts the batches to PostgreSQL (postUsageBatch, idempotent by request id; the batches
 * that arrived while it posted, together) and acknowledges them only then. A redelivered batch
 * posts nothing twice.
 *
 * In full, with the reasoning: docs/internals.md#the-usage-stream.
 */
import {
  AckPolicy,
  DeliverPolicy,
  StorageType,
  nanos,
  type ConsumerMessages,
  type JetStreamClient,
  type ConsumerInfo,
  type JetStreamManager,
  type JsMsg,
  type NatsConnection,
} from "nats";
import type { Db } from "../db/client.ts";
import type { Logger } from "../log.ts";
import { encodeJson } from "../json.ts";
import { runTask } from "../background.ts";
import { sqlReason } from "../db/client.ts";
import { deadLetterMalformed, deadLetterRecords, ledgerSink, postOrDeadLetter, type DeadLetter } from "./deadletter.ts";
import { UsageConfirmations } from "./confirm.ts";
import { recordRow, rowsJson, USAGE_BATCH_MAX, usageRecordSchema, type UsageRecord, type UsageSink } from "./usage.ts";
import { TIMED_OUT, within } from "../within.ts";

/** The NATS server here refuses payloads over 1 MiB; a batch message stays well under it. */
export const USAGE_MESSAGE_BYTES_MAX = 512 * 1024;
export const USAGE_STREAM_MAX_AGE_MS = 7 * 24 * 3_600_000;
/**
 * The stream is bounded by age and message count, not bytes: JetStream reserves a stream's
 * max_bytes up front, and a few such reservations exhaust a server's storage however empty the
 * streams are (one message is one node's batch of up to 2,000 records).
 */
export const USAGE_STREAM_MESSAGES_MAX = 10_000_000;
export const USAGE_PUBLISH_TIMEOUT_MS = 5_000;
/**
 * A publish not acknowledged this long means the usage log is hung (a stopped server, a link the
 * client has not yet found dead): the batch is posted straight to PostgreSQL and admission stops
 * until NATS answers again. Far above a healthy acknowledgement (milliseconds; tens on a
 * replicated stream under load), far below USAGE_PUBLISH_TIMEOUT_MS: a hung log holds a batch in
 * memory for a fraction of the publish timeout, not all of it.
 */
export const USAGE_ACK_OVERDUE_MS = 250;
/** Messages the consumer keeps pulled ahead. */
const PULL_MESSAGES_MAX = 64;
const REDELIVER_DELAY_MS = 1_000;
/** Deliveries of one message before its records are dead-lettered unposted (the consumer's max_deliver). */
export const USAGE_DELIVERIES_MAX = 10;
/** A message is held this long unacknowledged before another consumer gets it. */
export const USAGE_ACK_WAIT_MS = 30_000;
const RETRY_MS_FIRST = 100;
const RETRY_MS_MAX = 5_000;
export const DEAD_STREAM_MAX_AGE_MS = 90 * 24 * 3_600_000;
export const DEAD_STREAM_MESSAGES_MAX = 1_000_000;
/** Longest `posted()` waits for the consumer to catch up. */
export const POSTED_WAIT_MS_MAX = 10_000;
const POSTED_POLL_MS = 20;
const CONSUMER = "usage-ledger";

export function usageStreamName(prefix: string): string {
  return `${prefix.replace(/[^A-Za-z0-9_-]/g, "_")}_USAGE`;
}

/** Dead letters of the usage stream, for operators to watch (the database table is what replay reads). */
export function deadLetterStreamName(prefix: string): string {
  return `${usageStreamName(prefix)}_DEAD`;
}

/** Creates a file-backed stream of batch-sized messages, or brings an existing one to this configuration. */
async function ensureFileStream(
  jsm: JetStreamManager,
  limits: { name: string; subject: string; maxAgeMs: number; messagesMax: number; replicas?: number },
): Promise<void> {
  const config = {
    num_replicas: limits.replicas ?? 1,
    name: limits.name,
    subjects: [limits.subject],
    storage: StorageType.File,
    max_age: nanos(limits.maxAgeMs),
    max_msgs: limits.messagesMax,
    max_msg_size: USAGE_MESSAGE_BYTES_MAX * 2,
    duplicate_window: nanos(120_000),
  };
  try {
    await jsm.streams.info(limits.name);
    await jsm.streams.update(limits.name, config);
  } catch {
    await jsm.streams.add(config);
  }
}

export function ensureDeadLetterStream(jsm: JetStreamManager, stream: string, subject: string, replicas?: number): Promise<void> {
  return ensureFileStream(jsm, {
    name: stream,
    subject,
    maxAgeMs: DEAD_STREAM_MAX_AGE_MS,
    messagesMax: DEAD_STREAM_MESSAGES_MAX,
    replicas,
  });
}

/** The operator's choices for the usage stream (USAGE_STREAM_REPLICAS, USAGE_STREAM_MESSAGES_MAX). */
export interface UsageStreamLimits {
  replicas?: number;
  messagesMax?: number;
}

export async function ensureUsageStream(
  jsm: JetStreamManager,
  stream: string,
  subject: string,
  limits: UsageStreamLimits = {},
): Promise<void> {
  await ensureFileStream(jsm, {
    name: stream,
    subject,
    maxAgeMs: USAGE_STREAM_MAX_AGE_MS,
    messagesMax: limits.messagesMax ?? USAGE_STREAM_MESSAGES_MAX,
    replicas: limits.replicas,
  });
  const consumer = {
    durable_name: CONSUMER,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: nanos(USAGE_ACK_WAIT_MS),
    max_ack_pending: 10_000,
    max_deliver: USAGE_DELIVERIES_MAX,
  };
  let existing: ConsumerInfo;
  try {
    existing = await jsm.consumers.info(stream, CONSUMER);
  } catch {
    await jsm.consumers.add(stream, consumer);
    return;
  }
  // A consumer made by an older release has no delivery bound.
  if (existing.config.max_deliver !== USAGE_DELIVERIES_MAX) {
    await jsm.consumers.update(stream, CONSUMER, { max_deliver: USAGE_DELIVERIES_MAX, ack_wait: nanos(USAGE_ACK_WAIT_MS) });
  }
}

/** Splits a batch so that every message stays under USAGE_MESSAGE_BYTES_MAX; each record is encoded once. */
function messages(batch: UsageRecord[]): { data: string; records: UsageRecord[] }[] {
  const out: { data: string; records: UsageRecord[] }[] = [];
  let part: UsageRecord[] = [];
  let encoded: string[] = [];
  let bytes = 2;
  const close = () => out.push({ data: `[${encoded.join(",")}]`, records: part });
  for (const record of batch) {
    const json = JSON.stringify(recordRow(record));
    if (part.length > 0 && bytes + json.length + 1 > USAGE_MESSAGE_BYTES_MAX) {
      close();
      part = [];
      encoded = [];
      bytes = 2;
    }
    part.push(record);
    encoded.push(json);
    bytes += json.length + 1;
  }
  if (part.length > 0) close();
  return out;
}

/** What the sink does when the usage log cannot take a batch: post it itself, noticed at once. */
export interface UsageLogFallback {
  /** Writes a batch straight to the ledger. */
  direct: UsageSink;
  /** Calls its argument at the next NATS disconnect (at once while disconnected); returns what stops the watch (NatsBus.whenDisconnected). */
  whenDisconnected: (watcher: () => void) => () => void;
  /** NatsBus.connected now. */
  connected: () => boolean;
  /** Resolves once NATS answers a ping again (NatsBus.answering). */
  answering: () => Promise<void>;
}

export class JetStreamUsageSink implements UsageSink {
  /** Published records kept until the ledger has them (confirm.ts). */
  readonly confirmations: UsageConfirmations;
  /** Records posted straight to the ledger because the usage log could not take them (metrics). */
  directRecords = 0;
  /** A publish went unacknowledged past USAGE_ACK_OVERDUE_MS, and NATS has not answered since. */
  private hung = false;

  constructor(
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly stream: string,
    private readonly subject: string,
    db: Db,
    private readonly log: Logger,
    private readonly fallback?: UsageLogFallback,
  ) {
    this.confirmations = new UsageConfirmations(
      db,
      {
        publish: (records, msgId) => this.publish(rowsJson(records), msgId),
        messageIdAt: async (seq) => {
          const stored = await this.jsm.streams.getMessage(this.stream, { seq }).catch(() => null);
          return stored?.header?.get("Nats-Msg-Id") ?? null;
        },
        ackFloor: async () => (await this.jsm.consumers.info(this.stream, CONSUMER)).ack_floor.stream_seq,
      },
      log,
    );
    this.confirmations.start();
  }

  /** Also while NATS is disconnected: admission stops at once rather than serve usage the log cannot take. */
  get full(): boolean {
    return this.confirmations.full || this.hung || (this.fallback !== undefined && !this.fallback.connected());
  }

  async write(batch: UsageRecord[]): Promise<void> {
    for (const { data, records } of messages(batch)) {
      // The msgID makes a retried publish of the same message a no-op in the stream.
      const msgId = Bun.hash(data).toString(36);
      const seq = await this.publishOrNull(data, msgId);
      if (seq === null) await this.writeDirect(records);
      else this.confirmations.keep({ msgId, seq, records, publishedAtMs: performance.now() });
    }
  }

  /** The stream sequence, or null when the usage log cannot take it now and a fallback can (throws without one). */
  private async publishOrNull(data: string, msgId: string): Promise<number | null> {
    if (!this.fallback) return this.publish(data, msgId);
    if (this.hung) return null;
    const gone = Promise.withResolvers<null>();
    // Stopped when this wait ends (finally): a watch left behind would keep this call's frame,
    // the message's text included, until NATS next disconnects.
    const stopWatching = this.fallback.whenDisconnected(() => gone.resolve(null));
    const publishing = this.publish(data, msgId);
    publishing.catch(() => {}); // once a disconnect or the overdue mark won the race, its outcome no longer matters
    const answered = Promise.race([publishing, gone.promise]);
    try {
      let answer = await within(answered, USAGE_ACK_OVERDUE_MS);
      // Past the bound, one more look a timer later: a turn of the event loop that ran long (a
      // collection, a burst) ends with the bound's timer before the socket is read, so an
      // acknowledgement that arrived in time would otherwise count as none (measured: 19 of 20).
      if (answer === TIMED_OUT) answer = await within(answered, 1);
      if (answer !== TIMED_OUT) return answer;
      this.markHung(publishing);
      return null;
    } catch (error) {
      this.log("warn", "usage_publish_failed", { error: (error as Error).message });
      return null;
    } finally {
      stopWatching();
    }
  }

  /** Admission stops and batches go straight to the ledger until the overdue publish has settled and NATS answers a ping. */
  private markHung(publishing: Promise<number>): void {
    if (this.hung) return;
    this.hung = true;
    this.log("warn", "usage_log_hung", { ackOverdueMs: USAGE_ACK_OVERDUE_MS });
    const hungAtMs = performance.now();
    runTask("usage_log_answering", this.log, async () => {
      try {
        await publishing.catch(() => {});
        await this.fallback!.answering();
      } finally {
        this.hung = false;
        this.log("info", "usage_log_answering", { hungMs: Math.round(performance.now() - hungAtMs) });
      }
    });
  }

  private async writeDirect(records: UsageRecord[]): Promise<void> {
    await this.fallback!.direct.write(records);
    this.directRecords += records.length;
    this.log("warn", "usage_written_direct", { records: records.length });
  }

  private async publish(data: string, msgId: string): Promise<number> {
    return (await this.js.publish(this.subject, data, { msgID: msgId, timeout: USAGE_PUBLISH_TIMEOUT_MS })).seq;
  }

  /** Messages of the stream the ledger consumer has not acknowledged yet (metrics). */
  async lag(): Promise<number> {
    const info = await this.jsm.consumers.info(this.stream, CONSUMER);
    return info.num_pending + info.num_ack_pending;
  }

  /** Waits until the ledger has every record this node published, checked by request id. */
  posted(): Promise<void> {
    return this.confirmations.confirmed({ pollMs: POSTED_POLL_MS, waitMsMax: POSTED_WAIT_MS_MAX });
  }

  /** At shutdown: waits (bounded) for the ledger to have what this node published, then stops checking. */
  async stop(log: Logger): Promise<void> {
    await this.posted().catch((error: Error) =>
      log("warn", "usage_unconfirmed_at_stop", { records: this.confirmations.records, error: error.message }),
    );
    this.confirmations.stop();
  }
}

/** Posts the stream's batches to the ledger; every node runs one, sharing the durable consumer. */
export class UsageConsumer {
  private stopped = false;
  private loop: Promise<void> | null = null;
  private messages: ConsumerMessages | null = null;

  constructor(
    private readonly db: Db,
    private readonly js: JetStreamClient,
    private readonly stream: string,
    private readonly log: Logger,
    private readonly dead: { subject: string; onDeadLetter?: (letter: DeadLetter) => void },
  ) {}

  start(): void {
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      try {
        const consumer = await this.js.consumers.get(this.stream, CONSUMER);
        const messages = await consumer.consume({ max_messages: PULL_MESSAGES_MAX });
        this.messages = messages;
        // What has arrived while the last post ran is posted together.
        const arrivals = new Arrivals(messages);
        for (let taken = await arrivals.next(); taken !== null; taken = await arrivals.next()) await this.postTaken(taken);
      } catch (error) {
        if (this.stopped) return;
        this.log("warn", "usage_consume_failed", { error: (error as Error).message });
      }
      if (!this.stopped) await Bun.sleep(REDELIVER_DELAY_MS);
    }
  }

  /**
   * Posts the records of messages taken together in one transaction per USAGE_CONSUMER_POST_RECORDS_MAX
   * (idempotent by request id: a record in two messages posts once), then acknowledges them. Each
   * message is one node's batch, written every USAGE_FLUSH_MS: a transaction per message fell behind
   * a node at full load, its usage reaching the ledger later and later. A malformed message, and one
   * on its last delivery, is handled on its own.
   */
  private async postTaken(taken: JsMsg[]): Promise<void> {
    let group: { messages: JsMsg[]; records: UsageRecord[] } = { messages: [], records: [] };
    const post = async () => {
      if (group.messages.length === 0) return;
      const { messages, records } = group;
      group = { messages: [], records: [] };
      if (await this.handle(messages, records)) for (const message of messages) message.ack();
    };
    for (const message of taken) {
      const parsed = await parseBatch(jsonOrUndefined(message));
      if ("invalid" in parsed) {
        if (await this.fileMalformed(message, `not a batch of usage records: ${parsed.invalid}`)) message.term();
        continue;
      }
      if (message.info.deliveryCount >= USAGE_DELIVERIES_MAX) {
        if (await this.handle([message], parsed.records)) message.ack();
        continue;
      }
      if (group.records.length + parsed.records.length > USAGE_CONSUMER_POST_RECORDS_MAX) await post();
      group.messages.push(message);
      for (const record of parsed.records) group.records.push(record);
    }
    await post();
  }

  /**
   * Posts the records of `messages` (dead-lettering those the database refuses), or, when they are
   * one message on its last delivery, dead-letters them unposted. Retries other failures in place;
   * false when stopped first.
   */
  private async handle(messages: JsMsg[], records: UsageRecord[]): Promise<boolean> {
    const deliveries = Math.max(...messages.map((message) => message.info.deliveryCount));
    const onDeadLetter = (letter: DeadLetter) => this.deadLettered(letter);
    let retryMs = RETRY_MS_FIRST;
    while (!this.stopped) {
      try {
        if (deliveries >= USAGE_DELIVERIES_MAX) {
          const reason = `delivered ${deliveries} times without being posted (max_deliver ${USAGE_DELIVERIES_MAX})`;
          const letters = await deadLetterRecords(this.db, records, { reason, sqlState: null, source: "deliveries" });
          for (const letter of letters) onDeadLetter(letter);
        } else {
          await postOrDeadLetter(this.db, records, { source: "consumer", onDeadLetter });
        }
        return true;
      } catch (error) {
        const seqs = messages.map((message) => message.seq);
        this.log("error", "usage_post_failed", { seq: seqs[0], messages: seqs.length, deliveries, error: sqlReason(error), retryMs });
        // Still ours: no other consumer gets them while the database is away.
        for (const message of messages) message.working();
        await Bun.sleep(retryMs);
        retryMs = Math.min(retryMs * 2, RETRY_MS_MAX);
      }
    }
    return false;
  }

  /**
   * A message that is no batch of records: filed in the dead-letters table (counted, listed,
   * audited) and the dead-letter stream. Retried in place while the database is away; false when
   * stopped first.
   */
  private async fileMalformed(message: JsMsg, reason: string): Promise<boolean> {
    const data = message.string();
    this.log("error", "usage_message_invalid", { seq: message.seq, reason });
    let retryMs = RETRY_MS_FIRST;
    while (!this.stopped) {
      try {
        const letter = await deadLetterMalformed(this.db, { seq: message.seq, data, reason });
        if (letter) this.dead.onDeadLetter?.(letter);
        this.publishDead({ reason, seq: message.seq, data }, `dead-seq:${message.seq}`);
        return true;
      } catch (error) {
        this.log("error", "usage_post_failed", { seq: message.seq, error: sqlReason(error), retryMs });
        message.working();
        await Bun.sleep(retryMs);
        retryMs = Math.min(retryMs * 2, RETRY_MS_MAX);
      }
    }
    return false;
  }

  private deadLettered(letter: DeadLetter): void {
    this.dead.onDeadLetter?.(letter);
    this.publishDead(letter, `dead:${letter.requestId}`);
  }

  /** Best effort: the database table is what replay reads; the stream is for operators watching NATS. */
  private publishDead(body: unknown, msgID: string): void {
    this.js
      .publish(this.dead.subject, encodeJson(body), { msgID, timeout: USAGE_PUBLISH_TIMEOUT_MS })
      .catch((error: Error) => this.log("warn", "dead_letter_publish_failed", { msgID, error: error.message }));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.messages?.stop();
    await this.loop?.catch(() => {});
  }
}

/** What a read found when nothing more was waiting. */
const NOTHING_WAITING = Symbol("nothing waiting");

/**
 * The consumer's messages as they arrive: `next` waits for one and takes with it every other one
 * already received, up to PULL_MESSAGES_MAX; null once the messages have ended. A read that finds
 * nothing within a turn of the event loop is kept for the next call: no message is lost, and none
 * is waited for while the ones in hand could be posted.
 */
class Arrivals {
  private readonly iterator: AsyncIterator<JsMsg>;
  private unfinished: Promise<IteratorResult<JsMsg>> | null = null;

  constructor(messages: AsyncIterable<JsMsg>) {
    this.iterator = messages[Symbol.asyncIterator]();
  }

  private read(): Promise<IteratorResult<JsMsg>> {
    const unfinished = this.unfinished;
    this.unfinished = null;
    return unfinished ?? this.iterator.next();
  }

  async next(): Promise<JsMsg[] | null> {
    const first = await this.read();
    if (first.done) return null;
    const taken = [first.value];
    while (taken.length < PULL_MESSAGES_MAX) {
      const reading = this.read();
      const turn = new Promise<typeof NOTHING_WAITING>((resolve) => setImmediate(() => resolve(NOTHING_WAITING)));
      const more = await Promise.race([reading, turn]);
      if (more === NOTHING_WAITING || more.done) {
        this.unfinished = reading;
        break;
      }
      taken.push(more.value);
    }
    return taken;
  }
}

/**
 * Records posted in one transaction by the consumer, from the messages it took together: two of a
 * writer's batches. Measured at chat c=64 on one node (bench/RESULTS.md): with one batch's worth the
 * stream's unposted messages still grew (19 → 44 in 50 s), with two they held at 7–12. A transaction
 * this large is only put together when the consumer is behind.
 */
export const USAGE_CONSUMER_POST_RECORDS_MAX = 2 * USAGE_BATCH_MAX;

/**
 * Records validated at a time; once slices have taken USAGE_PARSE_TURN_MS the event loop runs
 * before the next, so a message of a thousand records never holds it for long (and a busy loop,
 * whose turns take tens of milliseconds, is not waited on after every slice).
 */
export const USAGE_PARSE_SLICE_RECORDS = 100;
export const USAGE_PARSE_TURN_MS = 1;
const usageBatchSchema = usageRecordSchema.array();

/**
 * A message's records, validated a slice at a time, or what makes it no batch of usage records
 * (`path: message` of the first problem).
 */
export async function parseBatch(value: unknown, turnMs = USAGE_PARSE_TURN_MS): Promise<{ records: UsageRecord[] } | { invalid: string }> {
  if (!Array.isArray(value)) {
    const issue = usageBatchSchema.safeParse(value).error?.issues[0];
    return { invalid: `${issue?.path.join(".")}: ${issue?.message}` };
  }
  const records: UsageRecord[] = [];
  let turnStartedMs = performance.now();
  for (let from = 0; from < value.length; from += USAGE_PARSE_SLICE_RECORDS) {
    if (from > 0 && performance.now() - turnStartedMs >= turnMs) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      turnStartedMs = performance.now();
    }
    const parsed = usageBatchSchema.safeParse(value.slice(from, from + USAGE_PARSE_SLICE_RECORDS));
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const [index, ...rest] = issue?.path ?? [];
      return { invalid: `${[typeof index === "number" ? index + from : index, ...rest].join(".")}: ${issue?.message}` };
    }
    for (const record of parsed.data) records.push(record);
  }
  return { records };
}

function jsonOrUndefined(message: JsMsg): unknown {
  try {
    return message.json();
  } catch {
    return undefined; // not JSON: refused by the schema like any other non-batch
  }
}

/** The NATS usage path of a node: the streams and consumer ensured, a sink for the writer. */
export async function startUsageStream(
  nc: NatsConnection,
  db: Db,
  options: {
    prefix: string;
    subject: string;
    deadSubject: string;
    log: Logger;
    onDeadLetter?: (letter: DeadLetter) => void;
    limits?: UsageStreamLimits;
    /** The bus's connection: with it, a batch the usage log cannot take is posted straight to PostgreSQL. */
    connection?: Pick<UsageLogFallback, "connected" | "whenDisconnected" | "answering">;
  },
) {
  const jsm = await nc.jetstreamManager();
  const stream = usageStreamName(options.prefix);
  await ensureUsageStream(jsm, stream, options.subject, options.limits);
  await ensureDeadLetterStream(jsm, deadLetterStreamName(options.prefix), options.deadSubject, options.limits?.replicas);
  const js = nc.jetstream();
  const consumer = new UsageConsumer(db, js, stream, options.log, { subject: options.deadSubject, onDeadLetter: options.onDeadLetter });
  consumer.start();
  const fallback = options.connection && { ...options.connection, direct: ledgerSink(db, { onDeadLetter: options.onDeadLetter }) };
  const sink = new JetStreamUsageSink(js, jsm, stream, options.subject, db, options.log, fallback);
  return {
    sink,
    consumer,
    stream,
    /** After the writer's last flush: the ledger has this node's usage (bounded wait), then the consumer stops. */
    stop: async () => {
      await sink.stop(options.log);
      await consumer.stop();
    },
  };
}
