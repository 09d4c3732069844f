/**
 * Anthropic's Message Batches on the Messages wire: the requests come inline (`requests`, each
 * `{custom_id, params}`), are checked at once (a bad one is the 400 naming it, as Anthropic
 * answers), and run as a batch of `/v1/messages` lines like any other (worker.ts). Its object
 * and results are Anthropic's: `processing_status` in_progress, canceling or ended;
 * `request_counts` processing, succeeded, errored, canceled, expired; results as JSONL of
 * `{custom_id, result: {type: succeeded|errored|canceled|expired, …}}`.
 */
import { z } from "zod";
import { fail, type Failure, isFailure, zodFailure } from "../errors.ts";
import type { KeyRecord } from "../keys/store.ts";
import { FILE_LINES_MAX, storeFile } from "../files/files.ts";
import { batchNotFound } from "./api.ts";
import { checkLines, inOnePiece } from "./lines.ts";
import { lineModels, toStoredLineModels } from "./pricing.ts";
import { BATCHES_LIST_LIMIT_MAX, type BatchRow, batchPricingFields, findBatch, lineResults, listBatches } from "./store.ts";
import type { BatchWorker } from "./worker.ts";

const createBody = z.strictObject({
  requests: z
    .array(z.strictObject({ custom_id: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/), params: z.record(z.string(), z.unknown()) }))
    .min(1)
    .max(FILE_LINES_MAX),
});

const iso = (d: Date | null) => (d ? d.toISOString() : null);
const ENDED = new Set(["failed", "completed", "expired", "cancelled"]);

/** A batch as Anthropic's wire shows it; `origin`: this gateway's, for `results_url`. */
export function messageBatchObject(b: BatchRow, origin: string) {
  const ended = ENDED.has(b.status);
  const unrun = b.total - b.completed - b.failed;
  const endedAt = b.completedAt ?? b.cancelledAt ?? b.expiredAt ?? b.failedAt;
  return {
    id: b.id,
    type: "message_batch" as const,
    processing_status: ended ? "ended" : b.status === "cancelling" ? "canceling" : "in_progress",
    request_counts: {
      processing: ended ? 0 : unrun,
      succeeded: b.completed,
      errored: b.failed,
      canceled: b.status === "cancelled" ? unrun : 0,
      expired: b.status === "expired" ? unrun : 0,
    },
    ended_at: ended ? iso(endedAt) : null,
    created_at: iso(b.createdAt),
    expires_at: iso(b.expiresAt),
    archived_at: null,
    cancel_initiated_at: iso(b.cancellingAt),
    results_url: ended ? `${origin}/v1/messages/batches/${b.id}/results` : null,
    // The gateway's own: its pricing and estimate, what the requests run were billed (docs/batches.md#money).
    ...batchPricingFields(b),
  };
}

/** POST /v1/messages/batches: every request checked now, then the batch of the key's account. */
export async function createMessageBatch(worker: BatchWorker, key: KeyRecord, raw: unknown, origin: string) {
  const parsed = createBody.safeParse(raw);
  if (!parsed.success) return zodFailure(parsed.error);
  const lines = parsed.data.requests.map((r) =>
    JSON.stringify({ custom_id: r.custom_id, method: "POST", url: "/v1/messages", body: r.params }),
  );
  const content = new TextEncoder().encode(`${lines.join("\n")}\n`);
  const checked = await checkLines(worker.deps, "/v1/messages", inOnePiece(content), key);
  if ("errors" in checked) {
    const first = checked.errors[0]!;
    const at = first.line === null ? "requests" : `requests.${first.line - 1}`;
    return fail("invalid_request", first.message.replace(/^Line \d+/, at), {
      param: first.param ? `${at}.${first.param.replace(/^body/, "params")}` : at,
    });
  }
  const models = await lineModels(inOnePiece(content));
  const estimate = await worker.price(models);
  if (isFailure(estimate)) return estimate;
  const file = await storeFile(worker.deps.db, {
    accountId: key.accountId,
    purpose: "batch",
    filename: "message_batch.jsonl",
    content,
    lineModels: toStoredLineModels(models),
  });
  if ("code" in file) return file;
  const row = await worker.create(key, { endpoint: "/v1/messages", inputFile: file, metadata: null, estimate });
  return messageBatchObject(row, origin);
}

/** The account's Messages batch (another endpoint's batch is not one). */
export async function findMessageBatch(worker: BatchWorker, accountId: string, id: string): Promise<BatchRow | Failure> {
  const row = await findBatch(worker.deps.db, id, accountId);
  return row && row.endpoint === "/v1/messages" ? row : batchNotFound(id);
}

const listQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(BATCHES_LIST_LIMIT_MAX).default(20),
  after_id: z.string().max(64).optional(),
});

/** GET /v1/messages/batches: the account's batches, newest first. */
export async function messageBatchList(worker: BatchWorker, accountId: string, query: Record<string, string>, origin: string) {
  const q = listQuery.safeParse(query);
  if (!q.success) return zodFailure(q.error);
  const { data, hasMore } = await listBatches(worker.deps.db, accountId, { limit: q.data.limit, after: q.data.after_id });
  const objects = data.filter((b) => b.endpoint === "/v1/messages").map((b) => messageBatchObject(b, origin));
  return { data: objects, has_more: hasMore, first_id: objects[0]?.id ?? null, last_id: objects.at(-1)?.id ?? null };
}

/** GET /v1/messages/batches/{id}/results: one JSONL line per request, once the batch has ended. */
export async function messageBatchResults(worker: BatchWorker, accountId: string, id: string): Promise<string | Failure> {
  const batch = await findMessageBatch(worker, accountId, id);
  if ("code" in batch) return batch;
  // An expired batch's results are written by its finish, after the expiry itself (finish.ts).
  const expiring = batch.status === "expired" && batch.total > 0 && !batch.outputFileId && !batch.errorFileId;
  if (!ENDED.has(batch.status) || expiring) {
    return fail("invalid_request", `Batch ${id} has not ended yet: its results are available once its processing_status is ended.`);
  }
  const out: string[] = [];
  for (const l of await lineResults(worker.deps.db, id)) {
    out.push(JSON.stringify({ custom_id: l.customId, result: resultOf(l, batch.status) }));
  }
  return out.length > 0 ? `${out.join("\n")}\n` : "";
}

function resultOf(l: { result: string | null; isError: boolean }, status: string): Record<string, unknown> {
  if (!l.result) return { type: status === "expired" ? "expired" : "canceled" };
  const line = JSON.parse(l.result) as { response: { body: unknown } };
  return l.isError ? { type: "errored", error: line.response.body } : { type: "succeeded", message: line.response.body };
}
