/**
 * Authentication's lookups against a real database: the misses of one turn are one query (in
 * batches of KEY_LOOKUP_BATCH_MAX), a key asked for by many requests at once is looked up once,
 * and a lookup that fails fails its requests without keeping the next ones from trying again.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { freshDatabase, SETUP_MS_MAX } from "../../test/helpers.ts";
import { until } from "../../test/until.ts";
import { openDb, type Db } from "../db/client.ts";
import { eq } from "drizzle-orm";
import { accounts, apiKeys } from "../db/schema.ts";
import { migrate } from "../db/migrate.ts";
import { isFailure } from "../errors.ts";
import { createAccount } from "../ledger/wallets.ts";
import { KEY_LOOKUP_BATCH_MAX, KeyStore } from "./store.ts";

let db: Db;
let drop: (() => Promise<void>) | undefined;
let accountId: string;

beforeAll(async () => {
  const database = await freshDatabase();
  drop = database?.drop;
  db = await openDb({ databaseUrl: database?.url, dataFolder: null });
  await migrate(db);
  accountId = (await createAccount(db, "lookups")).id;
}, SETUP_MS_MAX);

afterAll(async () => {
  await db.close();
  await drop?.();
}, SETUP_MS_MAX);

/** A key store on the test's database whose key lookups (selects) are counted. */
function countingStore(): { keys: KeyStore; selects: () => number } {
  let selects = 0;
  const orm = Object.create(db.orm) as Db["orm"];
  orm.select = ((...args: Parameters<Db["orm"]["select"]>) => {
    selects++;
    return db.orm.select(...args);
  }) as Db["orm"]["select"];
  const keys = new KeyStore({ ...db, orm } as Db, { prefix: "sk-t-", pepper: "p".repeat(40) });
  return { keys, selects: () => selects };
}

async function newKeys(keys: KeyStore, count: number): Promise<string[]> {
  const made: string[] = [];
  for (let i = 0; i < count; i++) made.push((await keys.create(accountId, `k${i}`, { concurrencyMax: 2 })).key);
  return made;
}

test("new keys authenticated at once are looked up together, an unknown one among them refused", async () => {
  const { keys, selects } = countingStore();
  const made = await newKeys(keys, KEY_LOOKUP_BATCH_MAX + 10);
  const before = selects();
  const unknown = `sk-t-${"x".repeat(40)}`;
  const answers = await Promise.all([...made, unknown].map((key) => keys.authenticate(key)));
  // One query per KEY_LOOKUP_BATCH_MAX keys missing in the turn: two here, not 267.
  expect(selects() - before).toBe(2);
  expect(answers.slice(0, -1).every((a) => !isFailure(a) && a.accountId === accountId)).toBe(true);
  const refused = answers.at(-1)!;
  expect(isFailure(refused) ? refused.code : null).toBe("invalid_api_key");
  // Cached now: no query at all.
  await Promise.all(made.map((key) => keys.authenticate(key)));
  expect(selects() - before).toBe(2);
});

test("a key's lookup brings its account's limits: the first admission reads them without a query of its own", async () => {
  const { keys, selects } = countingStore();
  const [key] = await newKeys(keys, 1);
  const before = selects();
  const record = await keys.authenticate(key!);
  if (isFailure(record)) throw new Error(record.message);
  expect(selects() - before).toBe(1);
  const holder = await keys.holder(record.accountId);
  expect(holder?.id).toBe(accountId);
  expect(selects() - before).toBe(1);
  // Forgotten with the account's change, then read again.
  keys.forget(accountId);
  await keys.holder(accountId);
  expect(selects() - before).toBe(2);
});

test("one key asked for by many requests at once is looked up once, also by those that come while its lookup is under way", async () => {
  const { keys: maker } = countingStore();
  const [key] = await newKeys(maker, 1);
  // A database whose lookups wait until the test lets them go: requests arrive while one is under way.
  let selects = 0;
  const held = Promise.withResolvers<void>();
  const holding = {
    select: (...args: Parameters<Db["orm"]["select"]>) => {
      selects++;
      const joined = db.orm
        .select(...args)
        .from(apiKeys)
        .leftJoin(accounts, eq(accounts.id, apiKeys.accountId));
      const where = (...w: Parameters<typeof joined.where>) => held.promise.then(() => joined.where(...w));
      return { from: () => ({ leftJoin: () => ({ where }) }) };
    },
  };
  const keys = new KeyStore({ ...db, orm: holding } as unknown as Db, { prefix: "sk-t-", pepper: "p".repeat(40) });
  const first = Array.from({ length: 32 }, () => keys.authenticate(key!));
  await until(() => selects === 1, { what: "the first turn's lookup" });
  const later = Array.from({ length: 32 }, () => keys.authenticate(key!));
  held.resolve();
  const answers = await Promise.all([...first, ...later]);
  expect(selects).toBe(1);
  expect(new Set(answers.map((a) => (isFailure(a) ? a.code : a.id))).size).toBe(1);
});

test("a lookup that fails refuses its requests, and the next request looks the key up again", async () => {
  const { keys } = countingStore();
  const [key] = await newKeys(keys, 1);
  const where = () => Promise.reject(new Error("connection refused"));
  const refusing = { select: () => ({ from: () => ({ leftJoin: () => ({ where }) }) }) };
  const failing = new KeyStore({ ...db, orm: refusing } as unknown as Db, { prefix: "sk-t-", pepper: "p".repeat(40) });
  const failed = await Promise.allSettled([failing.authenticate(key!), failing.authenticate(key!)]);
  expect(failed.map((f) => f.status)).toEqual(["rejected", "rejected"]);
  // The same store on a database that answers again: the failed lookup did not stay in flight.
  (failing as unknown as { db: Db }).db = db;
  const answer = await failing.authenticate(key!);
  expect(isFailure(answer) ? answer.code : answer.accountId).toBe(accountId);
});
