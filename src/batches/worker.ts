/**
 * A node's part in running batches: it takes work items (queue.ts) and settles each one so that
 * taking it again changes nothing:
 *
 *   validate → the file checked whole, read a slice at a time (lines.ts), its lines stored and queued, in_progress (or failed)
 *   line     → run once through the operation (line.ts) as the batch's key, its result stored once;
 *              a line already done is not run again; one found running (its node died) runs again
 *              under the same request id, so the ledger bills it once (the rerun's cost is counted
 *              as the operator's loss, darvaze_batch_rerun_cost_micro_toman_total)
 *   finish   → once no line runs: the output and error files written, the final state
 *
 * Lines yield to live traffic (priority.ts): at most BATCH_LINES_IN_FLIGHT_MAX run on a node, one
 * while live requests are in flight on it, and at most BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX of one
 * account's on the whole cluster (the claim counts the account's fresh claims in the database).
 * These are a line's limits: it takes none of the key's live slots, rpm or tpm (Credentials.batch).
 * Cancel stops new lines at once; the window's
 * end (the sweep, every BATCH_SWEEP_INTERVAL_MS) expires a batch, billed only for lines run.
 */
import { and, eq, inArray, isNull, or, sql } from "drizzle-orm";
import { Counter, Gauge } from "prom-client";
import type { GatewayDeps } from "../admission/deps.ts";
import type { KeyRecord } from "../keys/store.ts";
import { batches, batchLines } from "../db/schema.ts";
import { errorBody, fail, type Failure } from "../errors.ts";
import { FileGone, type FileRecord, fileSlices } from "../files/files.ts";
import { BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX, claimLine, restampLine } from "./claims.ts";
import { finishBatch } from "./finish.ts";
import { type BatchEndpoint, type ByteSource, checkLines } from "./lines.ts";
import { type LineReply, runLine } from "./line.ts";
import { BATCH_LINES_IN_FLIGHT_MAX, LivePriority } from "./priority.ts";
import { atBatchPriceLine, type BatchEstimate, batchEstimate, batchOnlyRefusal, byCatalogModel, type LineModels } from "./pricing.ts";
import { BATCH_ACK_WAIT_MS, BATCH_RETRY_DELAY_MS, type Verdict, type WorkItem, type WorkQueue } from "./queue.ts";
import { type BatchRow, findBatch, insertBatch, lineRequestId, moveBatch, OPEN_STATUSES, overdueBatches } from "./store.ts";

/** How often a node looks for batches past their window. */
export const BATCH_SWEEP_INTERVAL_MS = 10_000;
/** How often a node renews its claim on a line it runs (three times within the ack wait). */
export const BATCH_LINE_BEAT_MS = BATCH_ACK_WAIT_MS / 3;
/** The error of a batch whose input file is gone (deleted, or expired), before its validation or during it. */
function inputGone(batch: BatchRow) {
  return { code: "file_not_found", message: `The input file ${batch.inputFileId} is gone.`, param: "input_file_id", line: null };
}

/** Line items published at a time. */
const PUSH_CHUNK = 1_000;

export interface BatchWorkerOptions {
  deps: GatewayDeps;
  queue: WorkQueue;
  /** The clock batches are stamped and expired by (tests move it). */
  now?: () => number;
  /** Live requests in flight on this node now (the HTTP server's pending requests); lines yield to them. */
  liveInFlight?: () => number;
}

export class BatchWorker {
  readonly deps: GatewayDeps;
  readonly queue: WorkQueue;
  readonly now: () => number;
  private readonly byAccount = new Map<string, number>();
  /** Lines claimed and running on this node (darvaze_batch_lines_in_flight). */
  private running = 0;
  private readonly reruns: Counter<"endpoint">;
  private readonly outcomes: Counter<"outcome">;
  /** Aborts the lines running on this node at stop. */
  private readonly stopping = new AbortController();
  private readonly priority: LivePriority;

  constructor(options: BatchWorkerOptions) {
    this.deps = options.deps;
    this.queue = options.queue;
    this.now = options.now ?? Date.now;
    this.priority = new LivePriority({ liveInFlight: options.liveInFlight ?? (() => 0), nowMs: () => performance.now() });
    const registers = [this.deps.metrics.registry];
    this.reruns = new Counter({
      name: "darvaze_batch_rerun_cost_micro_toman_total",
      help: "Upstream cost of batch lines run again after their node died mid-line (billed once by the line's id): the operator's loss.",
      labelNames: ["endpoint"],
      registers,
    });
    this.outcomes = new Counter({
      name: "darvaze_batch_lines_total",
      help: "Batch lines settled on this node, by outcome (completed, failed, skipped: cancelled or expired before they ran).",
      labelNames: ["outcome"],
      registers,
    });
    const queue = this.queue;
    new Gauge({
      name: "darvaze_batch_queue_depth",
      help: "Batch work items waiting or running (the cluster's with NATS).",
      registers,
      async collect() {
        this.set(await queue.depth().catch(() => 0));
      },
    });
    const worker = this;
    new Gauge({
      name: "darvaze_batch_lines_in_flight",
      help: "Batch lines this node has claimed and runs now (at most BATCH_LINES_IN_FLIGHT_MAX).",
      registers,
      collect() {
        this.set(worker.running);
      },
    });
    new Gauge({
      name: "darvaze_batch_oldest_item_age_seconds",
      help: "Age of the oldest batch work item this node holds.",
      registers,
      collect() {
        this.set(queue.oldestAgeMs() / 1000);
      },
    });
  }

  /** This node's part of the queue: the lines it runs now and the age of the oldest item it holds. */
  nodeFigures(): { linesInFlight: number; oldestItemAgeS: number } {
    return { linesInFlight: this.running, oldestItemAgeS: this.queue.oldestAgeMs() / 1000 };
  }

  start(): void {
    const handle = (item: WorkItem) => this.handle(item).finally(() => this.priority.ended());
    this.queue.start(handle, { max: BATCH_LINES_IN_FLIGHT_MAX, now: () => this.priority.slots() });
  }

  async stop(): Promise<void> {
    this.stopping.abort();
    await this.queue.stop();
  }

  /**
   * How a batch of lines naming these models is priced (pricing.ts), or, where BATCH_PRICING is `batch_only`,
   * the refusal of one with lines that cannot get the batch price.
   */
  async price(models: LineModels): Promise<BatchEstimate | Failure> {
    const byModel = await byCatalogModel(this.deps.catalog, models);
    const estimate = batchEstimate(this.deps, byModel);
    const refused = this.deps.env.BATCH_PRICING === "batch_only" ? batchOnlyRefusal(estimate, byModel) : null;
    return refused ?? estimate;
  }

  /**
   * A new batch of the key's account on its file, queued for validation, priced as `estimate`
   * says; `residency`: its lines stay in the country (a batch all at the batch price does).
   */
  async create(
    key: { id: string; accountId: string },
    b: {
      endpoint: BatchEndpoint;
      inputFile: FileRecord;
      metadata: Record<string, string> | null;
      residency?: "in-country" | null;
      estimate: BatchEstimate;
    },
  ) {
    const { endpoint, inputFile, metadata, estimate } = b;
    const residency = estimate.pricing === "batch" ? "in-country" : (b.residency ?? null);
    const row = await insertBatch(
      this.deps.db,
      {
        ...{ accountId: key.accountId, keyId: key.id, endpoint, inputFileId: inputFile.id, metadata, residency },
        ...{ pricing: estimate.pricing, estimate: { models: estimate.models } },
      },
      this.now(),
    );
    await this.queue.push([{ kind: "validate", batchId: row.id }]);
    return row;
  }

  /** Cancels an open batch: no new line starts; it is cancelled once its running lines end. */
  async cancel(accountId: string, id: string): Promise<BatchRow | Failure> {
    const batch = await findBatch(this.deps.db, id, accountId);
    if (!batch) return fail("not_found", `No batch found with id '${id}'.`, { param: "batch_id" });
    const moved = await moveBatch(this.deps.db, id, OPEN_STATUSES, "cancelling", this.now());
    if (!moved) {
      if (batch.status === "cancelling" || batch.status === "cancelled") return batch;
      return fail("invalid_request", `Cannot cancel a batch with status '${batch.status}'.`, { param: "batch_id" });
    }
    await this.queue.push([{ kind: "finish", batchId: id }]);
    return moved;
  }

  /** Expires the open batches past their window by this clock; their finished lines stay billed, the rest never run. */
  async sweep(nowMs = this.now()): Promise<number> {
    const overdue = await overdueBatches(this.deps.db, nowMs);
    for (const id of overdue) {
      if (await moveBatch(this.deps.db, id, OPEN_STATUSES, "expired", nowMs)) await this.queue.push([{ kind: "finish", batchId: id }]);
    }
    return overdue.length;
  }

  /**
   * Embedded: the queue lived in memory, so a start queues again what the open batches still
   * need; the lines the last process ran are this one's to run again at once (the data folder
   * has one process, so no other node holds their claims).
   */
  async recover(): Promise<void> {
    await this.deps.db.orm.update(batchLines).set({ claimedAt: null }).where(eq(batchLines.state, "running"));
    // An expired batch is unfinished until its result files are written (finish.ts).
    const unfinishedExpiry = and(eq(batches.status, "expired"), isNull(batches.outputFileId), isNull(batches.errorFileId));
    const open = await this.deps.db.orm
      .select({ id: batches.id, status: batches.status })
      .from(batches)
      .where(or(inArray(batches.status, ["validating", "in_progress", "finalizing", "cancelling"]), unfinishedExpiry));
    for (const b of open) {
      if (b.status === "validating") await this.queue.push([{ kind: "validate", batchId: b.id }]);
      else if (b.status === "in_progress") await this.queueLines(b.id);
      else await this.queue.push([{ kind: "finish", batchId: b.id }]);
    }
  }

  private async queueLines(batchId: string): Promise<void> {
    const rows = await this.deps.db.orm
      .select({ line: batchLines.line })
      .from(batchLines)
      .where(and(eq(batchLines.batchId, batchId), inArray(batchLines.state, ["queued", "running"])));
    for (let i = 0; i < rows.length; i += PUSH_CHUNK) {
      await this.queue.push(rows.slice(i, i + PUSH_CHUNK).map((r) => ({ kind: "line" as const, batchId, line: r.line })));
    }
    // The last line's run queues the finish; a batch whose lines all ended before a restart needs it now.
    if (rows.length === 0) await this.queue.push([{ kind: "finish", batchId }]);
  }

  handle(item: WorkItem): Promise<Verdict> {
    if (item.kind === "validate") return this.validate(item.batchId);
    if (item.kind === "line") return this.line(item.batchId, item.line);
    return finishBatch(this.deps.db, item.batchId, this.now());
  }

  private async validate(batchId: string): Promise<Verdict> {
    const { db } = this.deps;
    const batch = await findBatch(db, batchId);
    if (batch?.status !== "validating") return "settled";
    const read = await fileSlices(db, batch.accountId, batch.inputFileId);
    const key = await this.deps.keys.get(batch.keyId);
    const checked = read && key ? await this.checked(batch, read.slices, key) : { errors: [inputGone(batch)] };
    if ("errors" in checked) {
      await moveBatch(db, batchId, ["validating"], "failed", this.now(), { errors: checked.errors });
      return "settled";
    }
    const rows = checked.lines.map((l) => ({ batchId, line: l.line, customId: l.customId, body: JSON.stringify(l.body) }));
    for (let i = 0; i < rows.length; i += PUSH_CHUNK) {
      await db.orm
        .insert(batchLines)
        .values(rows.slice(i, i + PUSH_CHUNK))
        .onConflictDoNothing();
    }
    // Queued before the move: a node that dies between them leaves the validation to run again, not lines unqueued.
    await this.queueLines(batchId);
    await moveBatch(db, batchId, ["validating"], "in_progress", this.now(), { total: rows.length });
    return "settled";
  }

  /** The file's lines checked; a check that throws (a fault of the gateway's) fails the batch rather than retry without end. */
  private async checked(batch: BatchRow, content: ByteSource, key: KeyRecord): ReturnType<typeof checkLines> {
    try {
      return await checkLines(this.deps, batch.endpoint as BatchEndpoint, content, key);
    } catch (error) {
      if (error instanceof FileGone) return { errors: [inputGone(batch)] };
      this.deps.log("error", "batch_validation_failed", { batchId: batch.id, error: (error as Error).message });
      return { errors: [{ code: "internal_error", message: "The gateway failed to check the input file.", param: null, line: null }] };
    }
  }

  private async line(batchId: string, line: number): Promise<Verdict> {
    const { db } = this.deps;
    const [row] = await db.orm
      .select({
        state: batchLines.state,
        customId: batchLines.customId,
        body: batchLines.body,
        status: batches.status,
        accountId: batches.accountId,
        keyId: batches.keyId,
        endpoint: batches.endpoint,
        residency: batches.residency,
        estimate: batches.estimate,
      })
      .from(batchLines)
      .innerJoin(batches, eq(batches.id, batchLines.batchId))
      .where(and(eq(batchLines.batchId, batchId), eq(batchLines.line, line)));
    if (!row || row.state === "done" || row.state === "skipped") return "settled";
    if (row.status === "validating") return "later";
    if (row.status !== "in_progress") return "settled"; // the finish marks it skipped once no line runs
    const held = this.byAccount.get(row.accountId) ?? 0;
    if (held >= BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX) {
      // Held in its slot before it is put back: a queue of one account's lines is not read again and again meanwhile.
      await Bun.sleep(BATCH_RETRY_DELAY_MS);
      return "later";
    }
    this.byAccount.set(row.accountId, held + 1);
    try {
      return await this.runOne(batchId, line, row);
    } finally {
      const left = (this.byAccount.get(row.accountId) ?? 1) - 1;
      if (left > 0) this.byAccount.set(row.accountId, left);
      else this.byAccount.delete(row.accountId);
    }
  }

  /** Runs the line and stores its result; a line cut by this node's stop is left running, to run again elsewhere. */
  private async runOne(
    batchId: string,
    line: number,
    row: {
      state: string;
      customId: string;
      body: string;
      accountId: string;
      keyId: string;
      endpoint: string;
      residency: string | null;
      estimate: unknown;
    },
  ): Promise<Verdict> {
    const rerun = row.state === "running";
    // Another node runs it now, or the account has its lines in flight on the cluster.
    if (!(await claimLine(this.deps.db, batchId, line, row.accountId))) return "later";
    this.running++;
    const beat = setInterval(() => void restampLine(this.deps.db, batchId, line, sql`now()`).catch(() => {}), BATCH_LINE_BEAT_MS);
    const requestId = lineRequestId(batchId, line);
    const endpoint = row.endpoint as BatchEndpoint;
    const body = JSON.parse(row.body) as Record<string, unknown>;
    let reply: LineReply;
    try {
      const { keyId, residency } = row;
      const batchPrice = atBatchPriceLine(row.estimate, this.deps.catalog, body);
      reply = await runLine(this.deps, { endpoint, requestId, keyId, residency, batchPrice, body, signal: this.stopping.signal });
    } catch (error) {
      // A fault of the gateway's: the line fails (500) rather than run again without end; a paid run was settled by the runner.
      this.deps.log("error", "batch_line_failed", { batchId, line, error: (error as Error).message });
      const failure = fail("internal_error", "The gateway failed to run this line.");
      reply = { statusCode: 500, body: errorBody(failure), costMicro: 0n };
    } finally {
      clearInterval(beat);
      this.running--;
    }
    if (this.stopping.signal.aborted) {
      // Cut by this node's stop: the line is free to run again at once, and its place is its account's again.
      await restampLine(this.deps.db, batchId, line, null).catch(() => {});
      return "later";
    }
    const isError = reply.statusCode !== 200;
    const result = JSON.stringify({
      id: `batch_req_${requestId.slice(4)}`,
      custom_id: row.customId,
      response: { status_code: reply.statusCode, request_id: requestId, body: reply.body },
      error: null,
    });
    const settled = await this.record(batchId, line, { result, isError, costMicro: reply.costMicro });
    if (!settled) return "settled";
    this.outcomes.inc({ outcome: isError ? "failed" : "completed" });
    if (rerun) this.reruns.inc({ endpoint }, Number(reply.costMicro));
    if (settled.status !== "in_progress" || settled.completed + settled.failed >= settled.total) {
      await this.queue.push([{ kind: "finish", batchId }]);
    }
    return "settled";
  }

  /** A line's result, stored once with its batch's counts and cost; the batch as it then is, or null when it was stored before. */
  private async record(batchId: string, line: number, r: { result: string; isError: boolean; costMicro: bigint }) {
    return this.deps.db.orm.transaction(async (tx) => {
      const done = await tx
        .update(batchLines)
        .set({ state: "done", result: r.result, isError: r.isError, costMicro: r.costMicro })
        .where(and(eq(batchLines.batchId, batchId), eq(batchLines.line, line), sql`${batchLines.state} <> 'done'`))
        .returning({ line: batchLines.line });
      if (done.length === 0) return null;
      const [batch] = await tx
        .update(batches)
        .set({
          completed: r.isError ? batches.completed : sql`${batches.completed} + 1`,
          failed: r.isError ? sql`${batches.failed} + 1` : batches.failed,
          costMicro: sql`${batches.costMicro} + ${r.costMicro}`,
        })
        .where(eq(batches.id, batchId))
        .returning();
      return batch ?? null;
    });
  }
}
