import { afterAll, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sql } from "drizzle-orm";
import { freshDatabase, SETUP_MS_MAX } from "../../test/helpers.ts";
import { describeWith } from "../../test/services.ts";
import { DataFolderLockedError, lockDataFolder, openDb, openPostgres, POSTGRES_POOL_MAX } from "./client.ts";
import { migrate, readMigrations } from "./migrate.ts";

const folder = mkdtempSync(join(tmpdir(), "darvaze-db-"));
afterAll(() => rmSync(folder, { recursive: true, force: true }));

test("the data folder lock refuses a second holder, naming the first", () => {
  const unlock = lockDataFolder(folder);
  try {
    expect(() => lockDataFolder(folder)).toThrow(DataFolderLockedError);
    expect(() => lockDataFolder(folder)).toThrow(`is in use by process ${process.pid}`);
  } finally {
    unlock();
  }
  lockDataFolder(folder)(); // free again after unlock
});

test("a lock left by a dead process is taken over", () => {
  writeFileSync(join(folder, "lock"), "999999999");
  const unlock = lockDataFolder(folder);
  try {
    expect(readFileSync(join(folder, "lock"), "utf8")).toBe(String(process.pid));
    expect(() => lockDataFolder(folder)).toThrow(`is in use by process ${process.pid}`);
  } finally {
    unlock();
  }
  expect(existsSync(join(folder, "lock"))).toBe(false);
});

test(
  "migrations apply once; the database itself refuses overspend and over-posting",
  async () => {
    const database = await freshDatabase();
    const db = await openDb({ databaseUrl: database?.url, dataFolder: null });
    try {
      expect(await migrate(db)).toEqual(readMigrations().map((m) => m.tag));
      expect(await migrate(db)).toEqual([]);
      await db.rows(sql`INSERT INTO accounts (id, name) VALUES ('acc_1', 'a')`);
      await db.rows(sql`INSERT INTO wallets (account_id, balance_micro) VALUES ('acc_1', 100)`);
      // Holding more than the balance, bypassing every line of application code:
      expect(await refusal(db.rows(sql`UPDATE wallets SET held_micro = 101 WHERE account_id = 'acc_1'`))).toBe(
        "wallets_available_non_negative",
      );
      expect(await refusal(db.rows(sql`UPDATE wallets SET balance_micro = 99, held_micro = 100 WHERE account_id = 'acc_1'`))).toBe(
        "wallets_available_non_negative",
      );
      await db.rows(sql`INSERT INTO holds (id, account_id, key_id, request_id, amount_micro, status, deadline)
                        VALUES ('h1', 'acc_1', 'k', 'r', 50, 'pending', now())`);
      expect(await refusal(db.rows(sql`UPDATE holds SET posted_micro = 51 WHERE id = 'h1'`))).toBe("holds_posted_within_amount");
      expect(
        await refusal(
          db.rows(sql`INSERT INTO ledger_transfers (reference, debit_account, credit_account, amount_micro, kind)
                         VALUES ('x', 'a', 'a', 5, 'usage')`),
        ),
      ).toBe("ledger_transfers_two_sides");
      const [wallet] = await db.rows<{ balance_micro: unknown; held_micro: unknown }>(sql`SELECT balance_micro, held_micro FROM wallets`);
      expect([String(wallet!.balance_micro), String(wallet!.held_micro)]).toEqual(["100", "0"]);
    } finally {
      await db.close();
      await database?.drop();
    }
  },
  SETUP_MS_MAX,
);

/** The check constraint that refused a write, so a statement failing for another reason does not pass for a refusal. */
async function refusal(write: Promise<unknown>): Promise<string> {
  const error = await write.then(
    () => null,
    (e: Error) => e,
  );
  if (!error) return "written";
  const message = error.cause instanceof Error ? error.cause.message : error.message;
  return /violates check constraint "(\w+)"/.exec(message)?.[1] ?? message;
}

describeWith(["postgres"], "migrations on PostgreSQL", (it) => {
  it(
    "four nodes starting at once migrate exactly once, under the advisory lock",
    async () => {
      const database = (await freshDatabase())!;
      const nodes = await Promise.all([0, 1, 2, 3].map(() => openPostgres(database.url)));
      try {
        const applied = await Promise.all(nodes.map((db) => migrate(db)));
        expect(applied.flat()).toEqual(readMigrations().map((m) => m.tag));
        const [row] = await nodes[0]!.rows<{ n: unknown }>(sql`SELECT count(*) AS n FROM darvaze_migrations`);
        expect(Number(row!.n)).toBe(readMigrations().length);
      } finally {
        await Promise.all(nodes.map((db) => db.close()));
        await database.drop();
      }
    },
    SETUP_MS_MAX,
  );
});

describeWith(["postgres"], "the pool's connections warmed at start", (it) => {
  it(
    "every connection is opened and given back: the pool then serves as many queries at once, none waiting for a connection to be made",
    async () => {
      const database = (await freshDatabase())!;
      const db = await openPostgres(database.url);
      try {
        await migrate(db);
        await db.warmConnections!();
        const backends = async () => {
          const [row] = await db.rows<{ n: unknown }>(
            sql`SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`,
          );
          return Number(row!.n) + 1;
        };
        expect(await backends()).toBe(POSTGRES_POOL_MAX);
        // All given back: as many queries at once as the pool has connections each get one of
        // their own (a connection still reserved would leave two of them to share one).
        const pids = await Promise.all(
          Array.from({ length: POSTGRES_POOL_MAX }, () => db.rows<{ pid: unknown }>(sql`SELECT pg_backend_pid() AS pid, pg_sleep(0.05)`)),
        );
        expect(new Set(pids.map(([row]) => Number(row!.pid))).size).toBe(POSTGRES_POOL_MAX);
        expect(await backends()).toBe(POSTGRES_POOL_MAX);
      } finally {
        await db.close();
        await database.drop();
      }
    },
    SETUP_MS_MAX,
  );
});
