/**
 * The Files API's requests, transport-free: an upload's form checked (its purpose, its size, its
 * name), a list's query read within OpenAI's bounds. Each answer is the wire's object or the
 * error a client expects.
 */
import { z } from "zod";
import type { Db } from "../db/client.ts";
import { fail, type Failure, isFailure, zodFailure } from "../errors.ts";
import type { Form } from "../operations/input.ts";
import { inOnePiece } from "../batches/lines.ts";
import { lineModels as fileLineModelsOf, toStoredLineModels } from "../batches/pricing.ts";
import {
  FILE_BYTES_MAX,
  FILE_PURPOSES,
  FILENAME_CHARS_MAX,
  FILES_LIST_LIMIT_MAX,
  type FileRecord,
  fileObject,
  listFiles,
  storeFile,
} from "./files.ts";

/** A multipart form's room around its file: the purpose and the parts' headers. */
export const FILE_FORM_OVERHEAD_BYTES_MAX = 64 * 1024;
export const FILE_FORM_BYTES_MAX = FILE_BYTES_MAX + FILE_FORM_OVERHEAD_BYTES_MAX;
/** The form fields an upload may have. */
const FORM_FIELDS = new Set(["file", "purpose"]);

export function fileTooLarge(): Failure {
  return fail("request_too_large", `The file is larger than the limit of ${FILE_BYTES_MAX} bytes.`, { param: "file" });
}

/**
 * Stores the form's file for the account: `purpose` must be `batch` (the gateway writes
 * `batch_output` itself); another field is refused, named.
 */
export async function uploadFile(db: Db, accountId: string, form: Form | null | Failure): Promise<FileRecord | Failure> {
  if (form === null) return fileTooLarge();
  // The multipart reader's own words are for audio uploads.
  if (isFailure(form))
    return fail("invalid_request", "Send the file as multipart/form-data with `file` and `purpose` fields.", { param: "file" });
  for (const name of form.keys()) {
    if (!FORM_FIELDS.has(name)) return fail("invalid_request", `Unrecognized request argument supplied: ${name}`, { param: name });
  }
  const purpose = form.get("purpose");
  if (purpose !== "batch") {
    return fail("invalid_request", "`purpose` must be `batch`: this gateway keeps files for batches only.", { param: "purpose" });
  }
  const file = form.get("file");
  if (!(file instanceof File)) return fail("invalid_request", "The `file` field must be an uploaded file.", { param: "file" });
  if (file.size > FILE_BYTES_MAX) return fileTooLarge();
  const filename = file.name || "file";
  if (filename.length > FILENAME_CHARS_MAX) {
    return fail("invalid_request", `The file name is longer than ${FILENAME_CHARS_MAX} characters.`, { param: "file" });
  }
  const content = new Uint8Array(await file.arrayBuffer());
  // The lines' models are read now, once, a slice at a time: a batch's create prices by them (docs/batches.md#money).
  const lineModels = toStoredLineModels(await fileLineModelsOf(inOnePiece(content)));
  return storeFile(db, { accountId, purpose, filename, content, lineModels });
}

const listQuery = z.strictObject({
  purpose: z.enum(FILE_PURPOSES).optional(),
  limit: z.coerce.number().int().min(1).max(FILES_LIST_LIMIT_MAX).default(FILES_LIST_LIMIT_MAX),
  order: z.enum(["asc", "desc"]).default("desc"),
  after: z.string().max(64).optional(),
});

/** GET /v1/files: the account's files as OpenAI's list. */
export async function fileList(db: Db, accountId: string, query: Record<string, string>) {
  const q = listQuery.safeParse(query);
  if (!q.success) return zodFailure(q.error);
  const { data, hasMore } = await listFiles(db, accountId, q.data);
  const objects = data.map(fileObject);
  return { object: "list", data: objects, first_id: objects[0]?.id ?? null, last_id: objects.at(-1)?.id ?? null, has_more: hasMore };
}
