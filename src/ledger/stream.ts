/**
 * Durable usage over NATS: each group-committed batch of usage records is appended to a
 * JetStream stream and acknowledged there (file storage) before it counts as written, so a
 * gateway killed after the acknowledgement loses nothing; a durable consumer, shared by every
 * node, posts the batches to PostgreSQL (postUsageBatch, idempotent by request id) and
 * acknowledges them only then. A redelivered batch posts nothing twice.
 *
 *   edge → UsageWriter (≤ USAGE_FLUSH_MS) → stream `<PREFIX>_USAGE` (ack) → consumer → ledger
 */
import { AckPolicy, DeliverPolicy, StorageType, nanos, type ConsumerMessages, type JetStreamClient, type JetStreamManager, type NatsConnection } from "nats";
import type { Db } from "../db/client.ts";
import type { Logger } from "../log.ts";
import { encodeJson } from "../json.ts";
import { postUsageBatch, usageRecordSchema, type UsageRecord, type UsageSink } from "./usage.ts";

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
/** Longest `posted()` waits for the consumer to catch up. */
export const POSTED_WAIT_MS_MAX = 10_000;
const POSTED_POLL_MS = 20;
const CONSUMER = "usage-ledger";

export function usageStreamName(prefix: string): string {
  return `${prefix.replace(/[^A-Za-z0-9_-]/g, "_")}_USAGE`;
}

export async function ensureUsageStream(jsm: JetStreamManager, stream: string, subject: string): Promise<void> {
  const config = {
    name: stream,
    subjects: [subject],
    storage: StorageType.File,
    max_age: nanos(USAGE_STREAM_MAX_AGE_MS),
    max_msgs: USAGE_STREAM_MESSAGES_MAX,
    max_msg_size: USAGE_MESSAGE_BYTES_MAX * 2,
    duplicate_window: nanos(120_000),
  };
  try {
    await jsm.streams.info(stream);
    await jsm.streams.update(stream, config);
  } catch {
    await jsm.streams.add(config);
  }
  try {
    await jsm.consumers.info(stream, CONSUMER);
  } catch {
    await jsm.consumers.add(stream, {
      durable_name: CONSUMER,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      ack_wait: nanos(30_000),
      max_ack_pending: 10_000,
    });
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
          try {
            await postUsageBatch(this.db, parsed.data);
            message.ack();
          } catch (error) {
            this.log("error", "usage_post_failed", { seq: message.seq, error: (error as Error).message });
            message.nak(REDELIVER_DELAY_MS);
          }
        }
      } catch (error) {
        if (this.stopped) return;
        this.log("warn", "usage_consume_failed", { error: (error as Error).message });
      }
      if (!this.stopped) await Bun.sleep(REDELIVER_DELAY_MS);
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.messages?.stop();
    await this.loop?.catch(() => {});
  }
}

/** The NATS usage path of a node: the stream and consumer ensured, a sink for the writer. */
export async function startUsageStream(nc: NatsConnection, db: Db, prefix: string, subject: string, log: Logger) {
  const jsm = await nc.jetstreamManager();
  const stream = usageStreamName(prefix);
  await ensureUsageStream(jsm, stream, subject);
  const js = nc.jetstream();
  const consumer = new UsageConsumer(db, js, stream, log);
  consumer.start();
  return { sink: new JetStreamUsageSink(js, jsm, stream, subject), consumer, stream };
}
