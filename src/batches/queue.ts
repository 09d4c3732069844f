/**
 * Batches' work items, taken by any node: with NATS a JetStream work-queue stream (`<PREFIX>_BATCHES`)
 * and one durable consumer every node pulls from; embedded, an in-process queue with the same
 * interface. An item is acknowledged once its handler has settled it; a node that dies holding
 * one leaves it to be delivered again after BATCH_ACK_WAIT_MS (the handler makes that safe:
 * worker.ts). At most `slots.max` items run at once on a node, and at any moment no more than
 * `slots.now()` (fewer while live traffic is in flight: priority.ts).
 */
import { AckPolicy, DiscardPolicy, type JsMsg, type NatsConnection, nanos, RetentionPolicy, StorageType } from "nats";
import { z } from "zod";
import type { Logger } from "../log.ts";
import { BATCH_GATE_POLL_MS } from "./priority.ts";

export const workItem = z.discriminatedUnion("kind", [
  z.object({ kind: z.literal("validate"), batchId: z.string() }),
  z.object({ kind: z.literal("line"), batchId: z.string(), line: z.number().int().min(1) }),
  z.object({ kind: z.literal("finish"), batchId: z.string() }),
]);
export type WorkItem = z.infer<typeof workItem>;

/** What a handler made of an item: settled (acknowledged), or to be tried again after BATCH_RETRY_DELAY_MS. */
export type Verdict = "settled" | "later";
export type WorkHandler = (item: WorkItem) => Promise<Verdict>;

/** How many items a node may run: `max` at most (the prefetch), `now()` of them at this moment (0 ≤ now() ≤ max; 0: wait). */
export interface Slots {
  max: number;
  now(): number;
}

/** An item put back (its account at its batch concurrency, a batch still running lines) waits this long. */
export const BATCH_RETRY_DELAY_MS = 250;
/** An item held this long unacknowledged (its node died) is delivered to another; a running one says it is alive more often. */
export const BATCH_ACK_WAIT_MS = 30_000;
/** Longest a stopping node waits for the items it runs (their lines cut by the stop) to end. */
export const BATCH_STOP_WAIT_MS = 5_000;
/** Items the work-queue stream keeps at once: every line of BATCHES_OPEN_MAX batches of the largest file. */
export const BATCH_STREAM_MESSAGES_MAX = 5_000_000;

export interface WorkQueue {
  push(items: WorkItem[]): Promise<void>;
  /** Starts taking items: at most `slots.now()` handled at once. */
  start(handle: WorkHandler, slots: Slots): void;
  /** Items waiting and running (the whole cluster's with NATS). */
  depth(): Promise<number>;
  /** Age in ms of the oldest item this node holds (running or waiting), 0 when none. */
  oldestAgeMs(): number;
  stop(): Promise<void>;
}

/** The slots of a node and the ages of what it holds, shared by both queues. */
class Holding {
  inFlight = 0;
  private readonly since = new Map<number, number>();
  private next = 0;
  private wake: (() => void) | null = null;

  enter(): number {
    this.inFlight++;
    const id = this.next++;
    this.since.set(id, performance.now());
    return id;
  }

  leave(id: number): void {
    this.inFlight--;
    this.since.delete(id);
    this.wake?.();
  }

  /** Resolves once fewer than `slots.now()` items are held (looked at again every BATCH_GATE_POLL_MS, as the slots change). */
  async free(slots: Slots): Promise<void> {
    while (this.inFlight >= slots.now()) {
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        setTimeout(resolve, BATCH_GATE_POLL_MS);
      });
    }
  }

  /** Resolves once nothing is held, or after `waitMs`. */
  async idle(waitMs: number): Promise<void> {
    const deadline = performance.now() + waitMs;
    while (this.inFlight > 0 && performance.now() < deadline) await Bun.sleep(10);
  }

  oldestAgeMs(): number {
    const first = this.since.values().next();
    return first.done ? 0 : performance.now() - first.value;
  }
}

function runItem(holding: Holding, handle: WorkHandler, item: WorkItem, log: Logger): Promise<Verdict> {
  const id = holding.enter();
  return handle(item)
    .catch((error: Error): Verdict => {
      log("error", "batch_item_failed", { kind: item.kind, batchId: item.batchId, error: error.message });
      return "later";
    })
    .finally(() => holding.leave(id));
}

/** The embedded queue: items in memory, in order; an item put back returns after the delay. */
export class LocalWorkQueue implements WorkQueue {
  private readonly items: { item: WorkItem; atMs: number }[] = [];
  private readonly holding = new Holding();
  private readonly timers = new Set<ReturnType<typeof setTimeout>>();
  private handle: WorkHandler | null = null;
  private slots: Slots = { max: 1, now: () => 1 };
  /** Set while items wait for a slot that the gate may open (priority.ts). */
  private gateTimer: ReturnType<typeof setTimeout> | null = null;
  private stopped = false;

  constructor(private readonly log: Logger) {}

  async push(items: WorkItem[]): Promise<void> {
    for (const item of items) this.items.push({ item, atMs: performance.now() });
    this.pump();
  }

  start(handle: WorkHandler, slots: Slots): void {
    this.handle = handle;
    this.slots = slots;
    this.pump();
  }

  private pump(): void {
    const handle = this.handle;
    while (handle && !this.stopped && this.items.length > 0 && this.holding.inFlight < this.slots.now()) {
      const { item } = this.items.shift()!;
      void runItem(this.holding, handle, item, this.log).then((verdict) => {
        if (verdict === "later" && !this.stopped) {
          const timer = setTimeout(() => {
            this.timers.delete(timer);
            void this.push([item]);
          }, BATCH_RETRY_DELAY_MS);
          this.timers.add(timer);
        }
        this.pump();
      });
    }
    // Items wait on the gate alone: look again once it may have opened.
    const gated = this.items.length > 0 && this.holding.inFlight < this.slots.max;
    if (handle && !this.stopped && gated && !this.gateTimer) {
      this.gateTimer = setTimeout(() => {
        this.gateTimer = null;
        this.pump();
      }, BATCH_GATE_POLL_MS);
    }
  }

  async depth(): Promise<number> {
    return this.items.length + this.holding.inFlight + this.timers.size;
  }

  oldestAgeMs(): number {
    const waiting = this.items[0] ? performance.now() - this.items[0].atMs : 0;
    return Math.max(waiting, this.holding.oldestAgeMs());
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.gateTimer) clearTimeout(this.gateTimer);
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    await this.holding.idle(BATCH_STOP_WAIT_MS);
  }
}

export function batchStreamName(prefix: string): string {
  return `${prefix.replace(/[^A-Za-z0-9_-]/g, "_")}_BATCHES`;
}

const CONSUMER = "batch-workers";

/** The cluster's queue: a JetStream work-queue stream and one durable consumer shared by every node. */
export class JetStreamWorkQueue implements WorkQueue {
  private readonly holding = new Holding();
  private loop: Promise<void> | null = null;
  private stopped = false;
  private messages: { stop(): void } | null = null;

  private constructor(
    private readonly nc: NatsConnection,
    private readonly stream: string,
    private readonly subject: string,
    private readonly log: Logger,
  ) {}

  /** The stream and its consumer, made or brought to this configuration. */
  static async open(
    nc: NatsConnection,
    options: { prefix: string; subject: string; log: Logger; replicas?: number },
  ): Promise<JetStreamWorkQueue> {
    const jsm = await nc.jetstreamManager();
    const stream = batchStreamName(options.prefix);
    const config = {
      name: stream,
      subjects: [options.subject],
      retention: RetentionPolicy.Workqueue,
      storage: StorageType.File,
      max_msgs: BATCH_STREAM_MESSAGES_MAX,
      // Full, it refuses new items (their batch's validation is tried again) rather than drop queued lines.
      discard: DiscardPolicy.New,
      duplicate_window: nanos(120_000),
      // As many copies as the usage stream (USAGE_STREAM_REPLICAS): losing a server of a cluster loses no queued line.
      num_replicas: options.replicas ?? 1,
    };
    try {
      await jsm.streams.info(stream);
    } catch {
      await jsm.streams.add(config);
    }
    try {
      await jsm.consumers.info(stream, CONSUMER);
    } catch {
      await jsm.consumers.add(stream, {
        durable_name: CONSUMER,
        ack_policy: AckPolicy.Explicit,
        ack_wait: nanos(BATCH_ACK_WAIT_MS),
        // Unbounded: an item put back waits its turn (its account at its concurrency) as often as it
        // must; dropping it would leave its line never run. Handlers turn their faults into results.
        max_deliver: -1,
      });
    }
    return new JetStreamWorkQueue(nc, stream, options.subject, options.log);
  }

  async push(items: WorkItem[]): Promise<void> {
    const js = this.nc.jetstream();
    await Promise.all(items.map((item) => js.publish(this.subject, JSON.stringify(item), itemId(item))));
  }

  start(handle: WorkHandler, slots: Slots): void {
    this.loop = this.take(handle, slots).catch((error: Error) => {
      if (!this.stopped) this.log("error", "batch_queue_stopped", { error: error.message });
    });
  }

  private async take(handle: WorkHandler, slots: Slots): Promise<void> {
    const consumer = await this.nc.jetstream().consumers.get(this.stream, CONSUMER);
    const messages = await consumer.consume({ max_messages: slots.max });
    this.messages = messages;
    for await (const message of messages) {
      if (this.stopped) break;
      const parsed = workItem.safeParse(jsonOf(message));
      if (!parsed.success) {
        message.term();
        continue;
      }
      await this.holding.free(slots);
      if (this.stopped) {
        message.nak();
        break;
      }
      void this.settle(message, handle, parsed.data);
    }
  }

  private async settle(message: JsMsg, handle: WorkHandler, item: WorkItem): Promise<void> {
    // Alive while it runs, so a line longer than the ack wait is not given to another node.
    const alive = setInterval(() => message.working(), BATCH_ACK_WAIT_MS / 3);
    try {
      const verdict = await runItem(this.holding, handle, item, this.log);
      if (verdict === "settled") message.ack();
      else message.nak(BATCH_RETRY_DELAY_MS);
    } finally {
      clearInterval(alive);
    }
  }

  async depth(): Promise<number> {
    const info = await (await this.nc.jetstreamManager()).consumers.info(this.stream, CONSUMER);
    return info.num_pending + info.num_ack_pending;
  }

  oldestAgeMs(): number {
    return this.holding.oldestAgeMs();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.messages?.stop();
    await this.loop;
    await this.holding.idle(BATCH_STOP_WAIT_MS);
  }
}

/** A line's deduplication id: the same line published twice within the window is kept once (the others' handlers are idempotent). */
function itemId(item: WorkItem): { msgID: string } | undefined {
  return item.kind === "line" ? { msgID: `${item.batchId}.${item.line}` } : undefined;
}

function jsonOf(message: JsMsg): unknown {
  try {
    return message.json();
  } catch {
    return undefined;
  }
}
