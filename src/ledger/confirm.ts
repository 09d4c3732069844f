/**
 * Usage kept by the node until PostgreSQL has it. JetStream's acknowledgement is not enough: a
 * nats-server killed with -9 loses the messages it had not yet written out, and on restart it may
 * hand the same stream sequences to new messages (and its consumer may count them as already
 * acknowledged). So the node that published a batch keeps its records after the acknowledgement
 * and checks by request id, every USAGE_CONFIRM_INTERVAL_MS, which ones the ledger has (posted,
 * or dead-lettered): those of messages at or below the consumer's acknowledgement floor, and
 * those older than USAGE_REPUBLISH_AFTER_MS whatever the floor says. A record still missing
 * USAGE_REPUBLISH_AFTER_MS after its publish is published again unless its message still sits in
 * the stream ahead of the consumer (same message id at its sequence); past
 * USAGE_REPUBLISH_AFTER_MS_MAX it is published again whatever the stream shows. Posting is
 * idempotent by request id, so a second copy bills nothing twice.
 *
 * In full, with the reasoning: docs/internals.md#usage-confirmations.
 */
import { sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { taskFailed } from "../background.ts";
import type { Logger } from "../log.ts";
import type { UsageRecord } from "./usage.ts";
import { TIMED_OUT, within } from "../within.ts";

export const USAGE_UNCONFIRMED_RECORDS_MAX = 200_000;
export const USAGE_CONFIRM_INTERVAL_MS = 1_000;
/** Long enough for a healthy consumer to post a batch; shorter than any outage worth surviving. */
export const USAGE_REPUBLISH_AFTER_MS = 5_000;
/** Beyond the consumer's ack wait (30 s): a message still unposted then is published again regardless. */
export const USAGE_REPUBLISH_AFTER_MS_MAX = 60_000;
/** Request ids asked about in one query. */
const CONFIRM_QUERY_IDS_MAX = 10_000;

/** One published message of usage records, kept until the ledger has them all. */
export interface Published {
  msgId: string;
  seq: number;
  records: UsageRecord[];
  publishedAtMs: number;
}

/** What the keeper needs of the stream: publishing, and whether a message still waits in it. */
export interface UsageStreamPort {
  publish(records: UsageRecord[], msgId: string): Promise<number>;
  /** The message id stored at `seq`, or null when the stream has none there. */
  messageIdAt(seq: number): Promise<string | null>;
  /** The consumer's acknowledgement floor (every message up to it is acknowledged). */
  ackFloor(): Promise<number>;
}

export interface ConfirmCounts {
  /** Records the ledger was found to have. */
  confirmed: number;
  /** Records published again because the stream had lost or skipped them. */
  republished: number;
}

export class UsageConfirmations {
  private kept = new Map<string, Published>();
  private keptRecords = 0;
  private checking: Promise<void> | null = null;
  private timer: ReturnType<typeof setInterval> | null = null;
  private republishes = 0;
  readonly counts: ConfirmCounts = { confirmed: 0, republished: 0 };

  private readonly republishAfterMs: number;
  private readonly republishAfterMsMax: number;
  /** Monotonic milliseconds: a message's age is measured on it. */
  private readonly now: () => number;

  constructor(
    private readonly db: Db,
    private readonly stream: UsageStreamPort,
    private readonly log: Logger,
    /** Tests shorten the waits and age messages on a fake clock; nodes use the defaults. */
    timing: { republishAfterMs?: number; republishAfterMsMax?: number; now?: () => number } = {},
  ) {
    this.republishAfterMs = timing.republishAfterMs ?? USAGE_REPUBLISH_AFTER_MS;
    this.republishAfterMsMax = timing.republishAfterMsMax ?? USAGE_REPUBLISH_AFTER_MS_MAX;
    this.now = timing.now ?? (() => performance.now());
  }

  start(): void {
    this.timer ??= setInterval(
      () => void this.check().catch((error: unknown) => taskFailed("usage_confirm", this.log, error)),
      USAGE_CONFIRM_INTERVAL_MS,
    );
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** True when no more may be kept: the writer must stop accepting. */
  get full(): boolean {
    return this.keptRecords >= USAGE_UNCONFIRMED_RECORDS_MAX;
  }

  get records(): number {
    return this.keptRecords;
  }

  keep(published: Published): void {
    const before = this.kept.get(published.msgId);
    if (before) this.keptRecords -= before.records.length;
    this.kept.set(published.msgId, published);
    this.keptRecords += published.records.length;
  }

  /**
   * Resolves once the ledger has every record kept at the call (checking every `pollMs`), or
   * rejects after `waitMsMax`.
   */
  async confirmed(options: { pollMs: number; waitMsMax: number }): Promise<void> {
    // By message, not by id: a message published again keeps its object under a new id.
    const waiting = new Set(this.kept.values());
    const deadline = performance.now() + options.waitMsMax;
    while (waiting.size > 0) {
      // The bound holds even while a pass is slow (many messages to publish again, NATS slow to answer).
      if ((await within(this.check(), deadline - performance.now())) === TIMED_OUT) {
        throw new Error(`usage not in the ledger after ${options.waitMsMax} ms`);
      }
      for (const published of waiting) if (this.kept.get(published.msgId) !== published) waiting.delete(published);
      if (waiting.size === 0) return;
      if (performance.now() > deadline) throw new Error(`usage not in the ledger after ${options.waitMsMax} ms`);
      await Bun.sleep(options.pollMs);
    }
  }

  /** One pass (shared by concurrent callers): drop what the ledger has, publish again what it lost. */
  check(): Promise<void> {
    this.checking ??= this.checkOnce().finally(() => {
      this.checking = null;
    });
    return this.checking;
  }

  private async checkOnce(): Promise<void> {
    if (this.kept.size === 0) return;
    const nowMs = this.now();
    const floor = await this.ackFloorOrNull();
    // Only what the consumer has acknowledged (so the ledger should have it) or what is old enough
    // to call lost is asked about: each record is looked up about once, not at every pass while
    // it waits in the stream.
    const old = (p: Published) => nowMs - p.publishedAtMs >= this.republishAfterMs;
    const due = [...this.kept.values()].filter((p) => (floor !== null && p.seq <= floor) || old(p));
    if (due.length === 0) return;
    const present = await this.inLedger(due.flatMap((p) => p.records.map((r) => r.requestId)));
    const missing: Published[] = [];
    for (const published of due) {
      const remaining = published.records.filter((r) => !present.has(r.requestId));
      this.counts.confirmed += published.records.length - remaining.length;
      this.keptRecords -= published.records.length - remaining.length;
      if (remaining.length === 0) this.kept.delete(published.msgId);
      else {
        published.records = remaining;
        if (old(published)) missing.push(published);
      }
    }
    // Without the floor, whether a message still waits in the stream cannot be told: next pass.
    if (floor === null) return;
    for (const published of missing) {
      if (await this.waitsInStream(published, floor, nowMs)) continue;
      await this.republish(published);
    }
  }

  /** The consumer's acknowledgement floor; null while NATS cannot say (then only messages old enough to call lost are checked). */
  private async ackFloorOrNull(): Promise<number | null> {
    try {
      return await this.stream.ackFloor();
    } catch {
      return null;
    }
  }

  /** The message is still stored at its sequence, not yet acknowledged, and not too old: the consumer will post it. */
  private async waitsInStream(published: Published, floor: number, nowMs: number): Promise<boolean> {
    if (nowMs - published.publishedAtMs >= this.republishAfterMsMax) return false;
    if (published.seq <= floor) return false;
    return (await this.stream.messageIdAt(published.seq)) === published.msgId;
  }

  private async republish(published: Published): Promise<void> {
    // A new message id: the stream may still hold the old one within its duplicate window.
    const msgId = `${published.msgId.split(":")[0]}:r${++this.republishes}`;
    const seq = await this.stream.publish(published.records, msgId);
    const oldSeq = published.seq;
    this.kept.delete(published.msgId);
    // The same object under its new id, so that whoever waits for it (confirmed) still does.
    Object.assign(published, { msgId, seq, publishedAtMs: this.now() });
    this.kept.set(msgId, published);
    this.counts.republished += published.records.length;
    this.log("warn", "usage_republished", { records: published.records.length, seq: oldSeq, newSeq: seq });
  }

  /** The request ids, of those given, that the ledger has posted or dead-lettered. */
  private async inLedger(requestIds: string[]): Promise<Set<string>> {
    const present = new Set<string>();
    for (let i = 0; i < requestIds.length; i += CONFIRM_QUERY_IDS_MAX) {
      const ids = JSON.stringify(requestIds.slice(i, i + CONFIRM_QUERY_IDS_MAX));
      const rows = await this.db.rows<{ request_id: string }>(sql`
        SELECT request_id FROM usage_records WHERE request_id IN (SELECT json_array_elements_text(${ids}::json))
        UNION ALL
        SELECT request_id FROM usage_dead_letters WHERE request_id IN (SELECT json_array_elements_text(${ids}::json))`);
      for (const row of rows) present.add(row.request_id);
    }
    return present;
  }
}
