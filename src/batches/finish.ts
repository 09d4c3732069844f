/**
 * A batch's end, once no line of it runs: the lines not run are marked skipped, the output file
 * (lines that got a 200) and the error file (the others, and on expiry the lines not run, as
 * OpenAI's `batch_expired`) written with the move to the final state in one transaction, so a
 * finish taken twice writes them once.
 */
import { and, eq, inArray } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { batchLines, files } from "../db/schema.ts";
import { newFileRow } from "../files/files.ts";
import type { Verdict } from "./queue.ts";
import { type BatchRow, type BatchStatus, findBatch, lineRequestId, lineResults, moveBatch, runningLines } from "./store.ts";

const FINAL_OF: Partial<Record<BatchStatus, BatchStatus>> = { finalizing: "completed", cancelling: "cancelled", expired: "expired" };

/** The output and error files' text from the lines' results; `expired`: the lines not run are errors too. */
export async function resultFiles(db: Db, batch: BatchRow): Promise<{ output: string; errors: string }> {
  const output: string[] = [];
  const errors: string[] = [];
  for (const l of await lineResults(db, batch.id)) {
    if (l.result) (l.isError ? errors : output).push(l.result);
    else if (batch.status === "expired") {
      const requestId = lineRequestId(batch.id, l.line);
      const error = { code: "batch_expired", message: "This request could not be executed before the completion window expired." };
      errors.push(JSON.stringify({ id: `batch_req_${requestId.slice(4)}`, custom_id: l.customId, response: null, error }));
    }
  }
  const text = (lines: string[]) => (lines.length > 0 ? `${lines.join("\n")}\n` : "");
  return { output: text(output), errors: text(errors) };
}

/** Finishes the batch when its lines allow: settled, or later while some line still runs. */
export async function finishBatch(db: Db, batchId: string, nowMs: number): Promise<Verdict> {
  let batch = await findBatch(db, batchId);
  if (!batch) return "settled";
  if (batch.status === "in_progress") {
    if (batch.completed + batch.failed < batch.total) return "settled"; // the last line queues the finish again
    batch = (await moveBatch(db, batchId, ["in_progress"], "finalizing", nowMs)) ?? (await findBatch(db, batchId));
    if (!batch) return "settled";
  }
  const final = FINAL_OF[batch.status as BatchStatus];
  if (!final || batch.outputFileId || batch.errorFileId) return "settled";
  if ((await runningLines(db, batchId)) > 0) return "later";
  await db.orm
    .update(batchLines)
    .set({ state: "skipped" })
    .where(and(eq(batchLines.batchId, batchId), inArray(batchLines.state, ["queued"])));
  const texts = await resultFiles(db, batch);
  const encoder = new TextEncoder();
  const make = (text: string, kind: string) =>
    text
      ? newFileRow(
          { accountId: batch.accountId, purpose: "batch_output", filename: `${batchId}_${kind}.jsonl`, content: encoder.encode(text) },
          nowMs,
        )
      : null;
  const output = make(texts.output, "output");
  const errors = make(texts.errors, "error");
  const set = {
    outputFileId: output?.id ?? null,
    errorFileId: errors?.id ?? null,
    ...(final === "expired" ? { expiredAt: batch.expiredAt } : {}),
  };
  await db.orm.transaction(async (tx) => {
    // The move first, only while no file was written: of two finishes at once, one writes them.
    const moved = await moveBatch(tx, batchId, [batch.status as BatchStatus], final, nowMs, set, { unfinished: true });
    if (moved) for (const file of [output, errors]) if (file) await tx.insert(files).values(file);
  });
  return "settled";
}
