/**
 * Durable usage over NATS: each group-committed batch of usage records is appended to a
 * JetStream stream and acknowledged there (file storage) before it counts as written, so a
 * gateway killed after the acknowledgement loses nothing; a durable consumer, shared by every
 * node, posts the batches to PostgreSQL (postUsageBatch, idempotent by request id) and
 * acknowledges them only then. A redelivered batch posts nothing twice.
 *
 *   edge → UsageWriter (≤ USAGE_FLUSH_MS) → stream `<PREFIX>_USAGE` (ack) → consumer → ledger
 *                                                       dead letters → stream `<PREFIX>_USAGE_DEAD`
 *
 * Failures: a record the database refuses for its data is dead-lettered (deadletter.ts) and the
 * rest of its message posted, then acknowledged; any other failure (the database down) is
 * retried in place, the message kept (its ack deadline pushed back), so waiting on the database
 * spends no delivery. A message is redelivered only when its consumer died or hung; the
 * consumer's max_deliver (USAGE_DELIVERIES_MAX) bounds that, and the last delivery dead-letters
 * the message's records unposted instead of running them again.
 */
import {
  AckPolicy,
  DeliverPolicy,
  StorageType,
  nanos,
  type ConsumerMessages,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
  type NatsConnection,
} from "nats";
import type { Db } from "../db/client.ts";
import type { Logger } from "../log.ts";
import { encodeJson } from "../json.ts";
import { deadLetterRecords, postOrDeadLetter, sqlReason, type DeadLetter } from "./deadletter.ts";
import { usageRecordSchema, type UsageRecord, type UsageSink } from "./usage.ts";

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
/** Messages the consumer keeps pulled ahead. */
const PULL_MESSAGES_MAX = 64;
const REDELIVER_DELAY_MS = 1_000;
/** Deliveries of one message before its records are dead-lettered unposted (the consumer's max_deliver). */
export const USAGE_DELIVERIES_MAX = 10;
/** A message is held this long unacknowledged before another consumer gets it. */
const ACK_WAIT_MS = 30_000;
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
async function ensureFileStream(jsm: JetStreamManager, limits: { name: string; subject: string; maxAgeMs: number; messagesMax: number }): Promise<void> {
  const config = {
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

export function ensureDeadLetterStream(jsm: JetStreamManager, stream: string, subject: string): Promise<void> {
  return ensureFileStream(jsm, { name: stream, subject, maxAgeMs: DEAD_STREAM_MAX_AGE_MS, messagesMax: DEAD_STREAM_MESSAGES_MAX });
}

export async function ensureUsageStream(jsm: JetStreamManager, stream: string, subject: string): Promise<void> {
  await ensureFileStream(jsm, { name: stream, subject, maxAgeMs: USAGE_STREAM_MAX_AGE_MS, messagesMax: USAGE_STREAM_MESSAGES_MAX });
  const consumer = {
    durable_name: CONSUMER,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: nanos(ACK_WAIT_MS),
    max_ack_pending: 10_000,
    max_deliver: USAGE_DELIVERIES_MAX,
  };
  let existing;
  try {
    existing = await jsm.consumers.info(stream, CONSUMER);
  } catch {
    await jsm.consumers.add(stream, consumer);
    return;
  }
  // A consumer made by an older release has no delivery bound.
  if (existing.config.max_deliver !== USAGE_DELIVERIES_MAX) {
    await jsm.consumers.update(stream, CONSUMER, { max_deliver: USAGE_DELIVERIES_MAX, ack_wait: nanos(ACK_WAIT_MS) });
  }
}

/** Splits a batch so that every message stays under USAGE_MESSAGE_BYTES_MAX. */
function messages(batch: UsageRecord[]): string[] {
  const out: string[] = [];
  let part: UsageRecord[] = [];
  let bytes = 2;
  for (const record of batch) {
    const size = encodeJson(record).length + 1;
    if (part.length > 0 && bytes + size > USAGE_MESSAGE_BYTES_MAX) {
      out.push(encodeJson(part));
      part = [];
      bytes = 2;
    }
    part.push(record);
    bytes += size;
  }
  if (part.length > 0) out.push(encodeJson(part));
  return out;
}

export class JetStreamUsageSink implements UsageSink {
  private lastSeq = 0;

  constructor(
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly stream: string,
    private readonly subject: string,
  ) {}

  async write(batch: UsageRecord[]): Promise<void> {
    for (const data of messages(batch)) {
      // The msgID makes a retried publish of the same message a no-op in the stream.
      const ack = await this.js.publish(this.subject, data, {
        msgID: Bun.hash(data).toString(36),
        timeout: USAGE_PUBLISH_TIMEOUT_MS,
      });
      if (ack.seq > this.lastSeq) this.lastSeq = ack.seq;
    }
  }

  /** Messages of the stream the ledger consumer has not acknowledged yet (metrics). */
  async lag(): Promise<number> {
    const info = await this.jsm.consumers.info(this.stream, CONSUMER);
    return info.num_pending + info.num_ack_pending;
  }

  /** Waits until the consumer has acknowledged every message this node published. */
  async posted(): Promise<void> {
    const target = this.lastSeq;
    if (target === 0) return;
    const deadline = performance.now() + POSTED_WAIT_MS_MAX;
    while (performance.now() < deadline) {
      const info = await this.jsm.consumers.info(this.stream, CONSUMER);
      if (info.ack_floor.stream_seq >= target) return;
      await Bun.sleep(POSTED_POLL_MS);
    }
    throw new Error(`usage consumer is more than ${POSTED_WAIT_MS_MAX} ms behind`);
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
        // Each message is already one node's group-committed batch: post it as it comes.
        for await (const message of messages) {
          const parsed = usageRecordSchema.array().safeParse(message.json());
          if (!parsed.success) {
            this.log("error", "usage_message_invalid", { seq: message.seq, error: parsed.error.issues[0]?.message });
            message.term();
            continue;
          }
          if (await this.handle(message, parsed.data)) message.ack();
        }
      } catch (error) {
        if (this.stopped) return;
        this.log("warn", "usage_consume_failed", { error: (error as Error).message });
      }
      if (!this.stopped) await Bun.sleep(REDELIVER_DELAY_MS);
    }
  }

  /**
   * Posts one message's records (dead-lettering those the database refuses), or on its last
   * delivery dead-letters them unposted. Retries other failures in place; false when stopped first.
   */
  private async handle(message: JsMsg, records: UsageRecord[]): Promise<boolean> {
    const deliveries = message.info.deliveryCount;
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
        this.log("error", "usage_post_failed", { seq: message.seq, deliveries, error: sqlReason(error), retryMs });
        message.working(); // still ours: no other consumer gets it while the database is away
        await Bun.sleep(retryMs);
        retryMs = Math.min(retryMs * 2, RETRY_MS_MAX);
      }
    }
    return false;
  }

  private deadLettered(letter: DeadLetter): void {
    this.dead.onDeadLetter?.(letter);
    this.log("warn", "usage_dead_lettered", { requestId: letter.requestId, source: letter.source, reason: letter.reason });
    this.js
      .publish(this.dead.subject, encodeJson(letter), { msgID: `dead:${letter.requestId}`, timeout: USAGE_PUBLISH_TIMEOUT_MS })
      .catch((error: Error) => this.log("warn", "dead_letter_publish_failed", { requestId: letter.requestId, error: error.message }));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.messages?.stop();
    await this.loop?.catch(() => {});
  }
}

/** The NATS usage path of a node: the streams and consumer ensured, a sink for the writer. */
export async function startUsageStream(
  nc: NatsConnection,
  db: Db,
  options: { prefix: string; subject: string; deadSubject: string; log: Logger; onDeadLetter?: (letter: DeadLetter) => void },
) {
  const jsm = await nc.jetstreamManager();
  const stream = usageStreamName(options.prefix);
  await ensureUsageStream(jsm, stream, options.subject);
  await ensureDeadLetterStream(jsm, deadLetterStreamName(options.prefix), options.deadSubject);
  const js = nc.jetstream();
  const consumer = new UsageConsumer(db, js, stream, options.log, { subject: options.deadSubject, onDeadLetter: options.onDeadLetter });
  consumer.start();
  return { sink: new JetStreamUsageSink(js, jsm, stream, options.subject), consumer, stream };
}
