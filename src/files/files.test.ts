import { afterAll, beforeAll, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { accounts } from "../db/schema.ts";
import { newId } from "../ids.ts";
import { openTestDb } from "../../test/helpers.ts";
import {
  deleteFile,
  FILE_READ_SLICE_BYTES,
  FILE_TTL_S,
  FileGone,
  fileSlices,
  fileStream,
  findFile,
  listFiles,
  storeFile,
} from "./files.ts";

let db: Db;
let close: () => Promise<void>;
const mine = newId("acc");
const theirs = newId("acc");

beforeAll(async () => {
  ({ db, close } = await openTestDb());
  await db.orm.insert(accounts).values([
    { id: mine, name: "mine" },
    { id: theirs, name: "theirs" },
  ]);
});
afterAll(async () => close());

const content = new TextEncoder().encode('{"a":1}\n');
/** The account's file read to its end, slice by slice, or null. */
async function fileContent(db: Db, accountId: string, id: string): Promise<Uint8Array | null> {
  const read = await fileSlices(db, accountId, id);
  if (!read) return null;
  const slices: Uint8Array[] = [];
  for await (const slice of read.slices) slices.push(slice);
  return new Uint8Array(Buffer.concat(slices));
}
/** Bytes that do not compress: a slice of a compressed value would read its start again. */
const randomBytes = (n: number) => {
  const bytes = new Uint8Array(n);
  for (let i = 0; i < n; i += 65_536) crypto.getRandomValues(bytes.subarray(i, i + 65_536));
  return bytes;
};
const stored = async (bytes: Uint8Array) => {
  const file = await storeFile(db, { accountId: mine, purpose: "batch", filename: "f.jsonl", content: bytes });
  if ("code" in file) throw new Error(file.message);
  return file;
};
const rows = async (id: string) => (await db.rows<{ n: number }>(sql`SELECT count(*)::int AS n FROM files WHERE id = ${id}`))[0]!.n;

test("a file is its account's only: another account finds, reads, lists and deletes nothing of it", async () => {
  const file = await storeFile(db, { accountId: mine, purpose: "batch", filename: "a.jsonl", content });
  if ("code" in file) throw new Error(file.message);
  expect(await findFile(db, theirs, file.id)).toBeNull();
  expect(await fileContent(db, theirs, file.id)).toBeNull();
  expect(await deleteFile(db, theirs, file.id)).toBe(false);
  expect((await listFiles(db, theirs, { limit: 10, order: "desc" })).data).toEqual([]);
  expect(new TextDecoder().decode((await fileContent(db, mine, file.id))!)).toBe('{"a":1}\n');
  expect(await deleteFile(db, mine, file.id)).toBe(true);
  expect(await rows(file.id)).toBe(0);
});

test("a file past FILE_TTL_S is gone: not found at once, its row deleted by the next upload", async () => {
  const old = await storeFile(
    db,
    { accountId: mine, purpose: "batch", filename: "old.jsonl", content },
    Date.now() - FILE_TTL_S * 1000 - 1_000,
  );
  if ("code" in old) throw new Error(old.message);
  expect(await findFile(db, mine, old.id)).toBeNull();
  expect(await fileContent(db, mine, old.id)).toBeNull();
  expect(await rows(old.id)).toBe(1);
  await storeFile(db, { accountId: mine, purpose: "batch", filename: "new.jsonl", content });
  expect(await rows(old.id)).toBe(0);
});

test("the list pages by `after`, newest first or oldest first", async () => {
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) {
    const f = await storeFile(db, { accountId: theirs, purpose: "batch", filename: `${i}.jsonl`, content }, Date.now() + i * 1_000);
    if ("code" in f) throw new Error(f.message);
    ids.push(f.id);
  }
  const first = await listFiles(db, theirs, { limit: 2, order: "asc" });
  expect(first.data.map((f) => f.id)).toEqual(ids.slice(0, 2));
  expect(first.hasMore).toBe(true);
  const rest = await listFiles(db, theirs, { limit: 2, order: "asc", after: ids[1] });
  expect(rest.data.map((f) => f.id)).toEqual(ids.slice(2));
  expect(rest.hasMore).toBe(false);
  expect((await listFiles(db, theirs, { limit: 10, order: "desc" })).data.map((f) => f.id)).toEqual([...ids].reverse());
});

test("a file larger than a slice reads back byte for byte, each slice at most FILE_READ_SLICE_BYTES, stored uncompressed", async () => {
  const bytes = randomBytes(2 * FILE_READ_SLICE_BYTES + 12_345);
  const file = await stored(bytes);
  const read = await fileSlices(db, mine, file.id);
  const sizes: number[] = [];
  for await (const slice of read!.slices) sizes.push(slice.length);
  expect(sizes).toEqual([FILE_READ_SLICE_BYTES, FILE_READ_SLICE_BYTES, 12_345]);
  expect(Buffer.compare(Buffer.from((await fileContent(db, mine, file.id))!), Buffer.from(bytes))).toBe(0);
  const text = await stored(new TextEncoder().encode('{"a":1}\n'.repeat(200_000)));
  const [kept] = await db.rows<{ compression: string | null }>(
    sql`SELECT pg_column_compression(content) AS compression FROM files WHERE id = ${text.id}`,
  );
  expect(kept!.compression).toBeNull();
});

test("a file stored compressed (before its column was uncompressed) reads the same", async () => {
  const bytes = new TextEncoder().encode('{"custom_id":"é😀"}\r\n\n'.repeat(150_000));
  await db.rows(sql`ALTER TABLE files ALTER COLUMN content SET STORAGE EXTENDED`);
  const file = await stored(bytes);
  await db.rows(sql`ALTER TABLE files ALTER COLUMN content SET STORAGE EXTERNAL`);
  const [kept] = await db.rows<{ compression: string | null }>(
    sql`SELECT pg_column_compression(content) AS compression FROM files WHERE id = ${file.id}`,
  );
  expect(kept!.compression).not.toBeNull();
  expect(bytes.length).toBeGreaterThan(FILE_READ_SLICE_BYTES);
  expect(Buffer.compare(Buffer.from((await fileContent(db, mine, file.id))!), Buffer.from(bytes))).toBe(0);
});

test("a file deleted while it is read ends its read with FileGone, never a part taken for the whole", async () => {
  const file = await stored(randomBytes(FILE_READ_SLICE_BYTES + 1));
  const slices = (await fileSlices(db, mine, file.id))!.slices[Symbol.asyncIterator]();
  expect((await slices.next()).value.length).toBe(FILE_READ_SLICE_BYTES);
  await deleteFile(db, mine, file.id);
  await expect(slices.next()).rejects.toBeInstanceOf(FileGone);
});

test("a file's stream gives its bytes, a slice as each is asked for; another account's file has none", async () => {
  const bytes = randomBytes(FILE_READ_SLICE_BYTES + 7);
  const file = await stored(bytes);
  expect(await fileStream(db, theirs, file.id)).toBeNull();
  const sent = (await fileStream(db, mine, file.id))!;
  expect(sent.bytes).toBe(bytes.length);
  expect(Buffer.compare(Buffer.from(await new Response(sent.body).arrayBuffer()), Buffer.from(bytes))).toBe(0);
});

test("a read lets the event loop run between its slices, whichever the engine", async () => {
  const file = await stored(randomBytes(3 * FILE_READ_SLICE_BYTES));
  let turns = 0;
  let running = true;
  const turn = () => {
    turns++;
    if (running) setImmediate(turn);
  };
  setImmediate(turn);
  const turnsAtSlice: number[] = [];
  for await (const _ of (await fileSlices(db, mine, file.id))!.slices) turnsAtSlice.push(turns);
  running = false;
  expect(new Set(turnsAtSlice).size).toBe(3);
});
