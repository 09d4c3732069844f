/**
 * Files for batches (OpenAI's Files API, purposes `batch` and `batch_output`), kept in the
 * `files` table so that every node reads them as media already is (docs/batches.md, "Where files
 * live"). An account sees only its own files: another's id is a 404 like an unknown one. A file
 * lives FILE_TTL_S, then is gone; a deleted file's bytes leave the table at once.
 */
import { and, asc, desc, eq, gt, isNull, lt, sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { files } from "../db/schema.ts";
import { fail, type Failure } from "../errors.ts";
import { randomBase62 } from "../ids.ts";

/**
 * The largest file kept (OpenAI takes 200 MB). Files are rows of the database, read a slice at a
 * time to validate a batch and to serve their content, but held whole at upload: 20 MiB keeps an
 * upload well under the memory and time a request may take, and holds OpenAI's 50,000 lines at
 * 400 bytes each.
 */
export const FILE_BYTES_MAX = 20 * 1024 * 1024;
/** Lines of a batch input file (OpenAI's own bound). */
export const FILE_LINES_MAX = 50_000;
/** Files an account keeps at once (uploads and results); an upload past it is refused until some are deleted or expire. */
export const FILES_PER_ACCOUNT_MAX = 1_000;
/** How long a file is kept: 30 days, as OpenAI keeps batch output files. */
export const FILE_TTL_S = 30 * 24 * 3600;
/** A file name's characters. */
export const FILENAME_CHARS_MAX = 256;
/** Files one list reply holds (OpenAI's bound and default). */
export const FILES_LIST_LIMIT_MAX = 10_000;

export const FILE_PURPOSES = ["batch", "batch_output"] as const;
export type FilePurpose = (typeof FILE_PURPOSES)[number];

const FILE_ID_CHARS = 24;
const FILE_ID_PATTERN = /^file-[A-Za-z0-9]{24}$/;

export interface FileRecord {
  id: string;
  accountId: string;
  purpose: FilePurpose;
  filename: string;
  bytes: number;
  createdAt: Date;
  expiresAt: Date;
}

/** A file as OpenAI's wire shows it. */
export function fileObject(f: FileRecord) {
  return {
    id: f.id,
    object: "file" as const,
    bytes: f.bytes,
    created_at: Math.floor(f.createdAt.getTime() / 1000),
    expires_at: Math.floor(f.expiresAt.getTime() / 1000),
    filename: f.filename,
    purpose: f.purpose,
    status: "processed" as const,
  };
}

export function fileNotFound(id: string): Failure {
  return fail("not_found", `No such File object: ${id}`, { param: "file_id" });
}

const columns = {
  id: files.id,
  accountId: files.accountId,
  purpose: files.purpose,
  filename: files.filename,
  bytes: files.bytes,
  createdAt: files.createdAt,
  expiresAt: files.expiresAt,
};

function asRecord(row: { purpose: string } & Omit<FileRecord, "purpose">): FileRecord {
  return { ...row, purpose: row.purpose as FilePurpose };
}

/**
 * Stores a file of an account (refused past FILES_PER_ACCOUNT_MAX live files); files past their
 * lifetime are deleted first, so the table holds no more than one lifetime of files.
 * @example const file = await storeFile(db, { accountId, purpose: "batch", filename: "in.jsonl", content });
 */
export async function storeFile(db: Db, f: NewFile, nowMs = Date.now()): Promise<FileRecord | Failure> {
  await db.orm.delete(files).where(lt(files.expiresAt, new Date(nowMs)));
  const [held] = await db.orm.select({ n: sql<number>`count(*)::int` }).from(files).where(eq(files.accountId, f.accountId));
  if ((held?.n ?? 0) >= FILES_PER_ACCOUNT_MAX) {
    return fail("invalid_request", `This account already keeps ${FILES_PER_ACCOUNT_MAX} files, the most it may: delete some first.`, {
      param: "file",
    });
  }
  const [row] = await db.orm.insert(files).values(newFileRow(f, nowMs)).returning(columns);
  return asRecord(row!);
}

/** A file to keep; `lineModels`: a batch input's models as src/batches/pricing.ts keeps them. */
export interface NewFile {
  accountId: string;
  purpose: FilePurpose;
  filename: string;
  content: Uint8Array;
  lineModels?: unknown;
}

/** A new file's row, kept FILE_TTL_S from `nowMs` (the gateway's own result files are inserted with their batch's move). */
export function newFileRow(f: NewFile, nowMs: number) {
  return {
    id: `file-${randomBase62(FILE_ID_CHARS)}`,
    accountId: f.accountId,
    purpose: f.purpose,
    filename: f.filename,
    bytes: f.content.length,
    content: f.content,
    lineModels: f.lineModels ?? null,
    expiresAt: new Date(nowMs + FILE_TTL_S * 1000),
  };
}

/** The account's file by id while it lives, or null (another account's file too). */
export async function findFile(db: Db, accountId: string, id: string): Promise<FileRecord | null> {
  if (!FILE_ID_PATTERN.test(id)) return null;
  const [row] = await db.orm
    .select(columns)
    .from(files)
    .where(and(eq(files.id, id), eq(files.accountId, accountId), gt(files.expiresAt, new Date())));
  return row ? asRecord(row) : null;
}

/**
 * Bytes of a stored file read in one query. The PostgreSQL driver decodes a `bytea` value in one
 * piece on the event loop (its hex text, then the bytes), and PGlite on the request thread runs
 * the whole query there: a 22 MiB file read whole held the loop 130–450 ms on PostgreSQL and
 * 1.8 s on PGlite inline. A slice of 256 KiB holds it 5–11 ms on PostgreSQL and 53–62 ms on
 * PGlite inline, against 7–15 and 106–286 ms for 1 MiB (bench/batches.ts, bench/RESULTS.md).
 */
export const FILE_READ_SLICE_BYTES = 256 * 1024;

/** A file deleted (or expired and swept) while its slices were being read: what was read is not the whole file. */
export class FileGone extends Error {
  constructor(readonly fileId: string) {
    super(`The file ${fileId} was deleted while it was read.`);
  }
}

/**
 * The account's file while it lives, its bytes to be read a FILE_READ_SLICE_BYTES slice at a
 * time (one query each, `substring` of the column: docs/batches.md, "Where files live"); null:
 * no such file (another account's too); `sliceBytes` other than the default for bench/batches.ts's
 * comparison. A file's bytes never change once stored, so the slices
 * are the file's; a deletion between two of them throws FileGone from the next.
 * @example const read = await fileSlices(db, accountId, id); for await (const slice of read!.slices) out.write(slice);
 */
export async function fileSlices(
  db: Db,
  accountId: string,
  id: string,
  { sliceBytes = FILE_READ_SLICE_BYTES } = {},
): Promise<{ bytes: number; slices: AsyncIterable<Uint8Array> } | null> {
  const file = await findFile(db, accountId, id);
  return file ? { bytes: file.bytes, slices: slicesOf(db, file, sliceBytes) } : null;
}

async function* slicesOf(db: Db, file: FileRecord, sliceBytes: number): AsyncGenerator<Uint8Array> {
  for (let offset = 0; offset < file.bytes; offset += sliceBytes) {
    const length = Math.min(sliceBytes, file.bytes - offset);
    // substring counts from 1.
    const [row] = await db.orm
      .select({ slice: sql<Uint8Array>`substring(${files.content} from ${offset + 1} for ${length})` })
      .from(files)
      .where(eq(files.id, file.id));
    if (row?.slice.length !== length) throw new FileGone(file.id);
    yield row.slice;
    // PGlite on the request thread (PGLITE_THREAD=inline) answers without a turn of the loop between queries.
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
}

/**
 * The account's file as a body to send, a slice read as the client takes the last one (so a
 * download holds one slice in memory, and a slow client slows its own reads only); null: no such file.
 * @example const sent = await fileStream(db, accountId, id); new Response(sent!.body, { headers: { "content-length": String(sent!.bytes) } })
 */
export async function fileStream(
  db: Db,
  accountId: string,
  id: string,
): Promise<{ bytes: number; body: ReadableStream<Uint8Array> } | null> {
  const read = await fileSlices(db, accountId, id);
  if (!read) return null;
  const slices = read.slices[Symbol.asyncIterator]();
  const body = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        const next = await slices.next();
        if (next.done) controller.close();
        else controller.enqueue(next.value);
      },
      async cancel() {
        await slices.return?.();
      },
    },
    { highWaterMark: 0 },
  );
  return { bytes: read.bytes, body };
}

/** The account's file's kept line models (unchecked: their reader checks them), or null: none kept, or no such file. */
export async function fileLineModels(db: Db, accountId: string, id: string): Promise<unknown> {
  if (!FILE_ID_PATTERN.test(id)) return null;
  const [row] = await db.orm
    .select({ lineModels: files.lineModels })
    .from(files)
    .where(and(eq(files.id, id), eq(files.accountId, accountId), gt(files.expiresAt, new Date())));
  return row?.lineModels ?? null;
}

/** Keeps the line models counted for a file that had none (one uploaded before they were kept). */
export async function keepLineModels(db: Db, id: string, lineModels: unknown): Promise<void> {
  await db.orm
    .update(files)
    .set({ lineModels })
    .where(and(eq(files.id, id), isNull(files.lineModels)));
}

/** Deletes the account's file, bytes and all; false when it has none by that id. */
export async function deleteFile(db: Db, accountId: string, id: string): Promise<boolean> {
  if (!FILE_ID_PATTERN.test(id)) return false;
  const deleted = await db.orm
    .delete(files)
    .where(and(eq(files.id, id), eq(files.accountId, accountId)))
    .returning({ id: files.id });
  return deleted.length > 0;
}

/** The account's files, newest first unless `order` is asc, after the file `after` when given. */
export async function listFiles(
  db: Db,
  accountId: string,
  q: { purpose?: FilePurpose; limit: number; order: "asc" | "desc"; after?: string },
): Promise<{ data: FileRecord[]; hasMore: boolean }> {
  const conditions = [eq(files.accountId, accountId), gt(files.expiresAt, new Date())];
  if (q.purpose) conditions.push(eq(files.purpose, q.purpose));
  if (q.after) {
    const cursor = await findFile(db, accountId, q.after);
    if (cursor) {
      // The cursor's own time as the database keeps it (microseconds; a JS Date has milliseconds).
      const at = sql`(${files.createdAt}, ${files.id})`;
      const mark = sql`(SELECT created_at, id FROM files WHERE id = ${cursor.id})`;
      conditions.push(q.order === "asc" ? sql`${at} > ${mark}` : sql`${at} < ${mark}`);
    }
  }
  const by = q.order === "asc" ? [asc(files.createdAt), asc(files.id)] : [desc(files.createdAt), desc(files.id)];
  const rows = await db.orm
    .select(columns)
    .from(files)
    .where(and(...conditions))
    .orderBy(...by)
    .limit(q.limit + 1);
  return { data: rows.slice(0, q.limit).map(asRecord), hasMore: rows.length > q.limit };
}
