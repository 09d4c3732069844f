/**
 * A node's part in running batches: it takes work items (queue.ts) and settles each one so that
 * taking it again changes nothing:
 *
 *   validate → the file checked whole (lines.ts), its lines stored and queued, in_progress (or failed)
 *   line     → run once through the operation (line.ts) as the batch's key, its result stored once;
 *              a line already done is not run again; one found running (its node died) runs again
 *              under the same request id, so the ledger bills it once (the rerun's cost is counted
 *              as the operator's loss, darvaze_batch_rerun_cost_micro_toman_total)
 *   finish   → once no line runs: the output and error files written, the final state
 *
 * Lines yield to live traffic: at most BATCH_LINES_IN_FLIGHT_MAX run on a node, and at most
 * BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX of one account's. Cancel stops new lines at once; the window's
 * end (the sweep, every BATCH_SWEEP_INTERVAL_MS) expires a batch, billed only for lines run.
 */
import { and, eq, inArray, isNull, or, sql } from "drizzle-orm";
import { Counter, Gauge } from "prom-client";
import type { GatewayDeps } from "../admission/deps.ts";
import type { KeyRecord } from "../keys/store.ts";
import { batches, batchLines } from "../db/schema.ts";
import { errorBody, fail, type Failure } from "../errors.ts";
import { type FileRecord, fileContent } from "../files/files.ts";
import { finishBatch } from "./finish.ts";
import { type BatchEndpoint, checkLines } from "./lines.ts";
import { type LineReply, runLine } from "./line.ts";
import { atBatchPriceLine, type BatchEstimate, batchEstimate, batchOnlyRefusal, linesByModel } from "./pricing.ts";
import { BATCH_ACK_WAIT_MS, type Verdict, type WorkItem, type WorkQueue } from "./queue.ts";
import { type BatchRow, findBatch, insertBatch, lineRequestId, moveBatch, OPEN_STATUSES, overdueBatches } from "./store.ts";

/** Lines a node runs at once, all accounts together: batches never take more of a node than this from live traffic. */
export const BATCH_LINES_IN_FLIGHT_MAX = 4;
/** Lines of one account a node runs at once. */
export const BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX = 2;
/** How often a node looks for batches past their window. */
export const BATCH_SWEEP_INTERVAL_MS = 10_000;
/** How often a node renews its claim on a line it runs (three times within the ack wait). */
export const BATCH_LINE_BEAT_MS = BATCH_ACK_WAIT_MS / 3;
/** Line items published at a time. */
const PUSH_CHUNK = 1_000;

export interface BatchWorkerOptions {
  deps: GatewayDeps;
  queue: WorkQueue;
  /** The clock batches are stamped and expired by (tests move it). */
  now?: () => number;
}

export class BatchWorker {
  readonly deps: GatewayDeps;
  readonly queue: WorkQueue;
  readonly now: () => number;
  private readonly byAccount = new Map<string, number>();
  private readonly reruns: Counter<"endpoint">;
  private readonly outcomes: Counter<"outcome">;
  /** Aborts the lines running on this node at stop. */
  private readonly stopping = new AbortController();

  constructor(options: BatchWorkerOptions) {
    this.deps = options.deps;
    this.queue = options.queue;
    this.now = options.now ?? Date.now;
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
    new Gauge({
      name: "darvaze_batch_oldest_item_age_seconds",
      help: "Age of the oldest batch work item this node holds.",
      registers,
      collect() {
        this.set(queue.oldestAgeMs() / 1000);
      },
    });
  }

  start(): void {
    this.queue.start((item) => this.handle(item), BATCH_LINES_IN_FLIGHT_MAX);
  }

  async stop(): Promise<void> {
    this.stopping.abort();
    await this.queue.stop();
  }

  /**
   * How a batch of these lines is priced (pricing.ts), or, where BATCH_PRICING is `batch_only`,
   * the refusal of one with lines that cannot get the batch price.
   */
  async price(text: string): Promise<BatchEstimate | Failure> {
    const byModel = await linesByModel(this.deps.catalog, text);
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
    const content = await fileContent(db, batch.accountId, batch.inputFileId);
    const key = await this.deps.keys.get(batch.keyId);
    const gone = { code: "file_not_found", message: `The input file ${batch.inputFileId} is gone.`, param: "input_file_id", line: null };
    const checked = content && key ? await this.checked(batch, content, key) : { errors: [gone] };
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
  private async checked(batch: BatchRow, content: Uint8Array, key: KeyRecord): ReturnType<typeof checkLines> {
    try {
      return await checkLines(this.deps, batch.endpoint as BatchEndpoint, new TextDecoder().decode(content), key);
    } catch (error) {
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
    if (held >= BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX) return "later";
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
    row: { state: string; customId: string; body: string; keyId: string; endpoint: string; residency: string | null; estimate: unknown },
  ): Promise<Verdict> {
    const rerun = row.state === "running";
    if (!(await this.claim(batchId, line))) return "later"; // another node runs it now
    const beat = setInterval(() => void this.claim(batchId, line, true).catch(() => {}), BATCH_LINE_BEAT_MS);
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
    }
    if (this.stopping.signal.aborted) return "later";
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

  /**
   * Takes the line to run on this node: a line queued, or one whose claim is older than
   * BATCH_ACK_WAIT_MS (its node died); `beat`: this node's claim renewed while it runs.
   */
  private async claim(batchId: string, line: number, beat = false): Promise<boolean> {
    // The database's clock, so that nodes' clocks need not agree.
    const stale = sql`${batchLines.claimedAt} < now() - make_interval(secs => ${BATCH_ACK_WAIT_MS / 1000})`;
    const free = beat
      ? eq(batchLines.state, "running")
      : sql`(${batchLines.state} = 'queued' OR (${batchLines.state} = 'running' AND (${batchLines.claimedAt} IS NULL OR ${stale})))`;
    const claimed = await this.deps.db.orm
      .update(batchLines)
      .set(beat ? { claimedAt: sql`now()` } : { state: "running", claimedAt: sql`now()`, attempts: sql`${batchLines.attempts} + 1` })
      .where(and(eq(batchLines.batchId, batchId), eq(batchLines.line, line), free))
      .returning({ line: batchLines.line });
    return claimed.length > 0;
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
