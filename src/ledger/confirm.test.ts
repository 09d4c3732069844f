/**
 * The node keeps published usage until the ledger has it by request id: a message the stream
 * lost, or whose sequence it gave to another message, or that its consumer counts as already
 * acknowledged, is published again; one still waiting in the stream is not.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import { usageRecord } from "../../test/usageRecords.ts";
import { until } from "../../test/until.ts";
import { freshDatabase, SETUP_MS_MAX } from "../../test/helpers.ts";
import { openDb, type Db } from "../db/client.ts";
import { migrate } from "../db/migrate.ts";
import { silentLogger } from "../log.ts";
import { FakeClock } from "../../test/fakeClock.ts";
import { USAGE_REPUBLISH_AFTER_MS, USAGE_REPUBLISH_AFTER_MS_MAX, UsageConfirmations, type UsageStreamPort } from "./confirm.ts";
import { openHold } from "./holds.ts";
import { postUsageBatch, type UsageRecord } from "./usage.ts";
import { createAccount, topUp } from "./wallets.ts";

let db: Db;
let database: Awaited<ReturnType<typeof freshDatabase>>;

beforeAll(async () => {
  database = await freshDatabase();
  db = await openDb({ databaseUrl: database?.url, dataFolder: null });
  await migrate(db);
}, SETUP_MS_MAX);

afterAll(async () => {
  await db.close();
  await database?.drop();
});

/** A stream of the test's making: `stored` is what it kept at each sequence; `consume` posts it like the consumer. */
function fakeStream() {
  const stored = new Map<number, { msgId: string; records: UsageRecord[] }>();
  let lastSeq = 0;
  let floor = 0;
  const published: string[] = [];
  const port: UsageStreamPort = {
    publish: async (records, msgId) => {
      published.push(msgId);
      stored.set(++lastSeq, { msgId, records });
      return lastSeq;
    },
    messageIdAt: async (seq) => stored.get(seq)?.msgId ?? null,
    ackFloor: async () => floor,
  };
  return {
    port,
    stored,
    published,
    setFloor: (seq: number) => void (floor = seq),
    async consume() {
      for (const [seq, message] of stored) if (seq > floor) await postUsageBatch(db, message.records);
      floor = lastSeq;
    },
  };
}

async function records(prefix: string, count: number): Promise<UsageRecord[]> {
  const account = await createAccount(db, prefix);
  await topUp(db, account.id, 1_000_000n, `seed-${prefix}`);
  const holdId = `hold-${prefix}`;
  await openHold(db, { holdId, accountId: account.id, keyId: "key_t", label: "lease", minMicro: 1n, desiredMicro: 1_000n, ttlMs: 60_000 });
  return Array.from({ length: count }, (_, i) =>
    usageRecord({ requestId: `${prefix}-${i}`, accountId: account.id, holdId, billedMicro: 1n }),
  );
}

/** Messages age on a clock of the test's own, moved by hand: the nodes' real waits, in no real time. */
const keeper = (port: UsageStreamPort, clock: FakeClock) => new UsageConfirmations(db, port, silentLogger, { now: () => clock.now() });

test("records the ledger has are dropped; the stream's copy is not published again", async () => {
  const stream = fakeStream();
  const clock = new FakeClock({ auto: false });
  const keep = keeper(stream.port, clock);
  const batch = await records("posted", 3);
  keep.keep({ msgId: "m1", seq: await stream.port.publish(batch, "m1"), records: batch, publishedAtMs: clock.now() });
  expect(keep.records).toBe(3);
  await stream.consume();
  await keep.confirmed({ pollMs: 5, waitMsMax: 1_000 });
  expect(keep.records).toBe(0);
  expect(keep.counts).toEqual({ confirmed: 3, republished: 0 });
  expect(stream.published).toEqual(["m1"]);
});

test("a message the stream lost (acknowledged, then gone in a crash) is published again and reaches the ledger", async () => {
  const stream = fakeStream();
  const clock = new FakeClock({ auto: false });
  const keep = keeper(stream.port, clock);
  const batch = await records("lost", 4);
  const seq = await stream.port.publish(batch, "m1");
  keep.keep({ msgId: "m1", seq, records: batch, publishedAtMs: clock.now() });
  stream.stored.delete(seq); // the server died before writing it out
  clock.advance(USAGE_REPUBLISH_AFTER_MS - 1);
  await keep.check();
  expect(stream.published).toEqual(["m1"]); // too young to call lost
  clock.advance(1);
  await keep.check();
  expect(stream.published.length).toBe(2);
  expect(stream.published[1]).not.toBe("m1"); // a new id: the duplicate window must not swallow it
  await stream.consume();
  await keep.confirmed({ pollMs: 5, waitMsMax: 1_000 });
  expect(keep.counts).toEqual({ confirmed: 4, republished: 4 });
  const rows = await db.rows<{ n: unknown }>(sqlCount("lost-%"));
  expect(Number(rows[0]!.n)).toBe(4);
});

test("a sequence handed to another message, or counted as acknowledged by a consumer ahead of the stream, means published again", async () => {
  const stream = fakeStream();
  const clock = new FakeClock({ auto: false });
  const keep = keeper(stream.port, clock);
  const reused = await records("reused", 2);
  const skipped = await records("skipped", 2);
  const seqReused = await stream.port.publish(reused, "m-reused");
  stream.stored.set(seqReused, { msgId: "someone-else", records: [] });
  const seqSkipped = await stream.port.publish(skipped, "m-skipped");
  stream.setFloor(seqSkipped); // the consumer's state survived the crash, the messages did not
  keep.keep({ msgId: "m-reused", seq: seqReused, records: reused, publishedAtMs: clock.now() });
  keep.keep({ msgId: "m-skipped", seq: seqSkipped, records: skipped, publishedAtMs: clock.now() });
  clock.advance(USAGE_REPUBLISH_AFTER_MS);
  await keep.check();
  expect(keep.counts.republished).toBe(4);
  await stream.consume();
  await keep.confirmed({ pollMs: 5, waitMsMax: 1_000 });
  expect(keep.records).toBe(0);
});

test("a wait for the ledger lasts through a message published again: it ends once the new copy is posted", async () => {
  const stream = fakeStream();
  let passes = 0;
  const port: UsageStreamPort = { ...stream.port, ackFloor: async () => (passes++, stream.port.ackFloor()) };
  const clock = new FakeClock({ auto: false });
  const keep = keeper(port, clock);
  const batch = await records("rewait", 2);
  const seq = await stream.port.publish(batch, "m1");
  keep.keep({ msgId: "m1", seq, records: batch, publishedAtMs: clock.now() });
  stream.stored.delete(seq); // lost by the server
  let done = false;
  const waiting = keep.confirmed({ pollMs: 5, waitMsMax: 10_000 }).then(() => void (done = true));
  clock.advance(USAGE_REPUBLISH_AFTER_MS);
  await until(() => keep.counts.republished === 2);
  const after = passes;
  await until(() => passes >= after + 3); // the waiter has looked again, more than once
  expect(done).toBe(false); // a lease closing on this would end its hold before its usage arrived
  await stream.consume();
  await waiting;
  const rows = await db.rows<{ n: unknown }>(sqlCount("rewait-%"));
  expect(Number(rows[0]!.n)).toBe(2);
});

test("a message still waiting in the stream ahead of the consumer is left to it, until the longest wait", async () => {
  const stream = fakeStream();
  const clock = new FakeClock({ auto: false });
  const keep = keeper(stream.port, clock);
  const batch = await records("waiting", 2);
  const seq = await stream.port.publish(batch, "m-wait");
  keep.keep({ msgId: "m-wait", seq, records: batch, publishedAtMs: clock.now() });
  clock.advance(USAGE_REPUBLISH_AFTER_MS_MAX - 1);
  await keep.check();
  expect(keep.counts.republished).toBe(0);
  clock.advance(1);
  await keep.check();
  expect(keep.counts.republished).toBe(2);
  expect(keep.records).toBe(2);
});

test("the ledger's dead letters count as had", async () => {
  const stream = fakeStream();
  const clock = new FakeClock({ auto: false });
  const keep = keeper(stream.port, clock);
  const batch = await records("dead", 1);
  await db.rows(sqlDeadLetter(batch[0]!));
  const seq = await stream.port.publish(batch, "m-dead");
  keep.keep({ msgId: "m-dead", seq, records: batch, publishedAtMs: clock.now() });
  stream.setFloor(seq); // the consumer dead-lettered it, then acknowledged the message
  await keep.check();
  expect(keep.records).toBe(0);
});

test("a young message the consumer has not acknowledged is not looked up; once acknowledged, or old, it is", async () => {
  const stream = fakeStream();
  const clock = new FakeClock({ auto: false });
  const keep = keeper(stream.port, clock);
  const batch = await records("floor", 2);
  const seq = await stream.port.publish(batch, "m-floor");
  keep.keep({ msgId: "m-floor", seq, records: batch, publishedAtMs: clock.now() });
  await postUsageBatch(db, batch); // posted, but the acknowledgement has not reached the stream yet
  await keep.check();
  expect(keep.records).toBe(2); // not asked: the ledger is not queried for messages still in flight
  stream.setFloor(seq);
  await keep.check();
  expect(keep.records).toBe(0);
  expect(keep.counts).toEqual({ confirmed: 2, republished: 0 });
});

test("while NATS cannot tell the acknowledgement floor, records old enough are still confirmed, and nothing is published again", async () => {
  const stream = fakeStream();
  const clock = new FakeClock({ auto: false });
  const port: UsageStreamPort = { ...stream.port, ackFloor: () => Promise.reject(new Error("no responders")) };
  const keep = keeper(port, clock);
  const posted = await records("nofloor-posted", 2);
  const lost = await records("nofloor-lost", 1);
  keep.keep({ msgId: "m-posted", seq: await port.publish(posted, "m-posted"), records: posted, publishedAtMs: clock.now() });
  const lostSeq = await port.publish(lost, "m-lost");
  keep.keep({ msgId: "m-lost", seq: lostSeq, records: lost, publishedAtMs: clock.now() });
  stream.stored.delete(lostSeq); // gone from the stream too: only the missing floor keeps it from being published again
  await postUsageBatch(db, posted);
  await keep.check();
  expect(keep.records).toBe(3);
  clock.advance(USAGE_REPUBLISH_AFTER_MS);
  await keep.check();
  expect(keep.records).toBe(1);
  expect(stream.published).toEqual(["m-posted", "m-lost"]);
});

const sqlCount = (pattern: string) => sql`SELECT count(*) AS n FROM usage_records WHERE request_id LIKE ${pattern}`;
const sqlDeadLetter = (r: UsageRecord) => sql`
  INSERT INTO usage_dead_letters (request_id, account_id, hold_id, record, reason, source)
  VALUES (${r.requestId}, ${r.accountId}, ${r.holdId}, '{}', 'test', 'consumer') RETURNING id`;

test("a wait for the ledger ends at its bound even while a check hangs (NATS not answering)", async () => {
  const stream = fakeStream();
  const clock = new FakeClock({ auto: false });
  const hung = Promise.withResolvers<number>();
  const port: UsageStreamPort = { ...stream.port, ackFloor: () => hung.promise };
  const keep = keeper(port, clock);
  const batch = await records("hung", 1);
  keep.keep({ msgId: "m-hung", seq: await port.publish(batch, "m-hung"), records: batch, publishedAtMs: clock.now() });
  const error = await keep.confirmed({ pollMs: 5, waitMsMax: 50 }).catch((e: Error) => e);
  expect(String(error)).toContain("usage not in the ledger after 50 ms");
  hung.resolve(0);
});
