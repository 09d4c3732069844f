/**
 * The Batch API's requests, transport-free: a create body checked (its file the account's, of
 * purpose `batch`; its endpoint one a batch runs; the 24h window), a list's query within
 * OpenAI's bounds. Polling reads the database only: it is free.
 */
import { z } from "zod";
import { residencyOf } from "../admission/caller.ts";
import type { KeyRecord } from "../keys/store.ts";
import { fail, type Failure, isFailure, zodFailure } from "../errors.ts";
import type { Db } from "../db/client.ts";
import { FileGone, fileLineModels, type FileRecord, fileNotFound, fileSlices, findFile, keepLineModels } from "../files/files.ts";
import { OPENAI_BATCH_ENDPOINTS } from "./lines.ts";
import { fromStoredLineModels, type LineModels, lineModels, toStoredLineModels } from "./pricing.ts";
import {
  BATCHES_LIST_LIMIT_MAX,
  type BatchRow,
  batchObject,
  findBatch,
  listBatches,
  METADATA_KEY_CHARS_MAX,
  METADATA_PAIRS_MAX,
  METADATA_VALUE_CHARS_MAX,
} from "./store.ts";
import type { BatchWorker } from "./worker.ts";

const createBody = z.strictObject({
  input_file_id: z.string().min(1).max(64),
  endpoint: z.enum(OPENAI_BATCH_ENDPOINTS),
  completion_window: z.literal("24h"),
  metadata: z
    .record(z.string().max(METADATA_KEY_CHARS_MAX), z.string().max(METADATA_VALUE_CHARS_MAX))
    .refine((m) => Object.keys(m).length <= METADATA_PAIRS_MAX, `at most ${METADATA_PAIRS_MAX} pairs`)
    .nullish(),
});

/** The answer of a node that runs no batches (no worker). */
export function batchesUnavailable(): Failure {
  return fail("service_unavailable", "Batches are not running on this node.");
}

export function batchNotFound(id: string): Failure {
  return fail("not_found", `No batch found with id '${id}'.`, { param: "batch_id" });
}

/**
 * The input file's models, as kept at upload; a file kept without them (uploaded before they
 * were, or naming too many) is read and counted now, a slice at a time, and keeps them after.
 * A file deleted meanwhile is not found.
 * @example await inputLineModels(db, file) // Map { "gpt-4o-mini" → { lines: 50000, first: [1, …, 10] } }
 */
export async function inputLineModels(db: Db, file: FileRecord): Promise<LineModels | Failure> {
  const kept = fromStoredLineModels(await fileLineModels(db, file.accountId, file.id));
  if (kept) return kept;
  const read = await fileSlices(db, file.accountId, file.id);
  if (!read) return fileNotFound(file.id);
  let counted: LineModels;
  try {
    counted = await lineModels(read.slices);
  } catch (error) {
    if (error instanceof FileGone) return fileNotFound(file.id);
    throw error;
  }
  const stored = toStoredLineModels(counted);
  if (stored) await keepLineModels(db, file.id, stored);
  return counted;
}

/**
 * POST /v1/batches: a new batch of the key's account, validating; `residencyHeader` its
 * `x-darvaze-residency`, kept for every line (the key's setting applies besides).
 */
export async function createBatch(worker: BatchWorker, key: KeyRecord, raw: unknown, residencyHeader: string | null = null) {
  const region = residencyOf(residencyHeader, { residency: null });
  if (isFailure(region)) return region;
  const parsed = createBody.safeParse(raw);
  if (!parsed.success) return zodFailure(parsed.error);
  const body = parsed.data;
  const inputFile = await findFile(worker.deps.db, key.accountId, body.input_file_id);
  if (!inputFile) return fileNotFound(body.input_file_id);
  if (inputFile.purpose !== "batch") {
    return fail("invalid_request", `File ${inputFile.id} has purpose '${inputFile.purpose}'; a batch needs one of purpose 'batch'.`, {
      param: "input_file_id",
    });
  }
  const residency = region === "in-country" ? region : null;
  // The price is decided now, from the file's models: a batch-only node refuses here (docs/batches.md#money).
  const models = await inputLineModels(worker.deps.db, inputFile);
  if (isFailure(models)) return models;
  const estimate = await worker.price(models);
  if (isFailure(estimate)) return estimate;
  const row = await worker.create(key, { endpoint: body.endpoint, inputFile, metadata: body.metadata ?? null, residency, estimate });
  return batchObject(row);
}

/** GET /v1/batches/{id}: the account's batch. */
export async function batchById(worker: BatchWorker, accountId: string, id: string) {
  const row = await findBatch(worker.deps.db, id, accountId);
  return row ? batchObject(row) : batchNotFound(id);
}

/** POST /v1/batches/{id}/cancel. */
export async function cancelBatch(worker: BatchWorker, accountId: string, id: string) {
  const row: BatchRow | Failure = await worker.cancel(accountId, id);
  return isFailure(row) ? row : batchObject(row);
}

const listQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(BATCHES_LIST_LIMIT_MAX).default(20),
  after: z.string().max(64).optional(),
});

/** GET /v1/batches: the account's batches, newest first. */
export async function batchList(worker: BatchWorker, accountId: string, query: Record<string, string>) {
  const q = listQuery.safeParse(query);
  if (!q.success) return zodFailure(q.error);
  const { data, hasMore } = await listBatches(worker.deps.db, accountId, q.data);
  const objects = data.map(batchObject);
  return { object: "list", data: objects, first_id: objects[0]?.id ?? null, last_id: objects.at(-1)?.id ?? null, has_more: hasMore };
}
