import { afterAll, beforeAll, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { accounts } from "../db/schema.ts";
import { newId } from "../ids.ts";
import { openTestDb } from "../../test/helpers.ts";
import { deleteFile, FILE_TTL_S, fileContent, findFile, listFiles, storeFile } from "./files.ts";

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
