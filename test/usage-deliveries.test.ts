/**
 * The usage stream's consumer and failures that are not the data's: a database outage is retried
 * in place (no redelivery, nothing dead-lettered), and a message delivered USAGE_DELIVERIES_MAX
 * times (its consumers died or hung) is dead-lettered unposted on its last delivery; messages
 * that wait together are posted together. Needs NATS; the ledger is PGlite in memory.
 */
import { afterAll, beforeAll, expect } from "bun:test";
import { sql } from "drizzle-orm";
import { AckPolicy, connect, type JetStreamManager, type NatsConnection } from "nats";
import { subjects as buildSubjects } from "../actors/subjects.ts";
import { openDb, type Db } from "../src/db/client.ts";
import { migrate } from "../src/db/migrate.ts";
import { randomBase62 } from "../src/ids.ts";
import { encodeJson } from "../src/json.ts";
import { listDeadLetters, replayDeadLetter, type DeadLetter } from "../src/ledger/deadletter.ts";
import { auditLedger } from "../src/ledger/audit.ts";
import {
  deadLetterStreamName,
  ensureDeadLetterStream,
  ensureUsageStream,
  USAGE_DELIVERIES_MAX,
  UsageConsumer,
  usageStreamName,
} from "../src/ledger/stream.ts";
import { silentLogger } from "../src/log.ts";
import { SETUP_MS_MAX, until } from "./helpers.ts";
import { describeWith } from "./services.ts";
import { usageRecord } from "./usageRecords.ts";

const CONSUMER = "usage-ledger";

/** Bound on waiting for the consumer to deliver, retry or dead-letter a message. */
const DELIVERY_WAIT_MS_MAX = 10_000;

describeWith(["nats"], "usage stream consumer: outages and delivery bound", (it) => {
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  let db: Db;
  const prefix = `t${randomBase62(10)}`;
  const subjects = buildSubjects(prefix);
  const stream = usageStreamName(prefix);
  const consumers: UsageConsumer[] = [];
  const letters: DeadLetter[] = [];

  beforeAll(async () => {
    nc = await connect({ servers: process.env.NATS_URL! });
    jsm = await nc.jetstreamManager();
    await ensureUsageStream(jsm, stream, subjects.usage);
    await ensureDeadLetterStream(jsm, deadLetterStreamName(prefix), subjects.usageDead);
    db = await openDb({ dataFolder: null });
    await migrate(db);
  }, SETUP_MS_MAX);
  afterAll(async () => {
    for (const consumer of consumers) await consumer.stop();
    for (const name of [stream, deadLetterStreamName(prefix)]) await jsm.streams.delete(name).catch(() => {});
    await nc?.close();
    await db?.close();
  }, SETUP_MS_MAX);

  const startConsumer = (ledger: Db) => {
    const consumer = new UsageConsumer(ledger, nc.jetstream(), stream, silentLogger, {
      subject: subjects.usageDead,
      onDeadLetter: (l) => letters.push(l),
    });
    consumers.push(consumer);
    consumer.start();
    return consumer;
  };
  const written = async (requestId: string) =>
    (await db.rows(sql`SELECT 1 FROM usage_records WHERE request_id = ${requestId}`)).length === 1;

  it("the consumer has a bounded delivery count, also when an older release made it without one", async () => {
    expect((await jsm.consumers.info(stream, CONSUMER)).config.max_deliver).toBe(USAGE_DELIVERIES_MAX);
    const older = `${stream}_OLDER`;
    await jsm.streams.add({ name: older, subjects: [`${subjects.usage}.older`] });
    try {
      await jsm.consumers.add(older, { durable_name: CONSUMER, ack_policy: AckPolicy.Explicit });
      expect((await jsm.consumers.info(older, CONSUMER)).config.max_deliver).toBe(-1);
      await ensureUsageStream(jsm, older, `${subjects.usage}.older`);
      expect((await jsm.consumers.info(older, CONSUMER)).config.max_deliver).toBe(USAGE_DELIVERIES_MAX);
    } finally {
      await jsm.streams.delete(older);
    }
  });

  it(`a message delivered ${USAGE_DELIVERIES_MAX} times is dead-lettered unposted, with that reason`, async () => {
    const record = usageRecord({ requestId: `req_${randomBase62(8)}`, accountId: "acct_x", holdId: "hold_x", billedMicro: 7n });
    await nc.jetstream().publish(subjects.usage, encodeJson([record]));
    // Consumers that took it and died before acknowledging it.
    const crashing = await nc.jetstream().consumers.get(stream, CONSUMER);
    for (let delivery = 1; delivery < USAGE_DELIVERIES_MAX; delivery++) {
      const message = await crashing.next({ expires: 5_000 });
      expect(message?.info.deliveryCount).toBe(delivery);
      message!.nak();
    }
    const consumer = startConsumer(db);
    await until(async () => letters.some((l) => l.requestId === record.requestId), DELIVERY_WAIT_MS_MAX);
    await consumer.stop();
    const [row] = await db.rows<{ source: string; reason: string; sql_state: string | null; written_off_micro: string }>(sql`
      SELECT source, reason, sql_state, written_off_micro::text FROM usage_dead_letters WHERE request_id = ${record.requestId}`);
    expect(row).toMatchObject({ source: "deliveries", sql_state: null, written_off_micro: "7" });
    expect(row!.reason).toContain(`max_deliver ${USAGE_DELIVERIES_MAX}`);
    expect(await written(record.requestId)).toBe(false);
    // The message is terminated, not left to redeliver: its acknowledgement reaches the server
    // after the dead letter is written, so it is awaited, not read once.
    await until(async () => {
      const info = await jsm.consumers.info(stream, CONSUMER);
      return info.num_pending === 0 && info.num_ack_pending === 0;
    }, DELIVERY_WAIT_MS_MAX);
    const dead = await jsm.streams.getMessage(deadLetterStreamName(prefix), { last_by_subj: subjects.usageDead });
    expect(dead.json<{ requestId: string; source: string }>()).toMatchObject({ requestId: record.requestId, source: "deliveries" });
  }, 30_000);

  it("a message that is not usage records (or not JSON) is terminated, dead-lettered where records are, and kept in the dead-letter stream", async () => {
    const bad = await nc.jetstream().publish(subjects.usage, "{ not json");
    const ack = await nc.jetstream().publish(subjects.usage, encodeJson({ not: "records" }));
    const consumer = startConsumer(db);
    const deadStream = deadLetterStreamName(prefix);
    let found: { reason: string; seq: number } | null = null;
    await until(async () => {
      const last = await jsm.streams.getMessage(deadStream, { last_by_subj: subjects.usageDead }).catch(() => null);
      const body = last?.json<{ reason?: string; seq?: number }>();
      if (body?.seq === ack.seq) found = body as { reason: string; seq: number };
      return found !== null;
    }, DELIVERY_WAIT_MS_MAX);
    await consumer.stop();
    expect(found!.reason).toStartWith("not a batch of usage records");
    const info = await jsm.consumers.info(stream, CONSUMER);
    expect([info.num_pending, info.num_ack_pending]).toEqual([0, 0]);
    // In the dead-letters table (what the admin API, `gw usage dead-letters` and the audit read), counted by the node.
    const listed = (await listDeadLetters(db)).filter((d) => d.source === "malformed");
    expect(listed.map((d) => d.request_id.split(":").slice(0, 2).join(":")).sort()).toEqual(
      [`malformed:${bad.seq}`, `malformed:${ack.seq}`].sort(),
    );
    expect(listed.find((d) => d.request_id.startsWith(`malformed:${bad.seq}:`))!.record).toBe("{ not json");
    expect(letters.filter((l) => l.source === "malformed").length).toBe(2);
    expect((await auditLedger(db)).dead_letters.malformed).toBe(2);
    expect(await replayDeadLetter(db, BigInt(listed[0]!.id))).toMatchObject({ outcome: "refused" });
  }, 30_000);

  it("a database outage (connection lost, serialization failure) is retried in place: no redelivery, no dead letter", async () => {
    const failures = [
      Object.assign(new Error("Failed query: INSERT …"), { cause: Object.assign(new Error("terminating connection"), { code: "08006" }) }),
      Object.assign(new Error("Failed query: INSERT …"), {
        cause: Object.assign(new Error("could not serialize access"), { code: "40001" }),
      }),
      Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" }),
    ];
    let attempts = 0;
    const flaky: Db = {
      ...db,
      orm: new Proxy(db.orm, {
        get(target, property, receiver) {
          if (property === "transaction" && attempts < failures.length) return () => Promise.reject(failures[attempts++]);
          return Reflect.get(target, property, receiver);
        },
      }),
    };
    const before = (await jsm.consumers.info(stream, CONSUMER)).num_redelivered;
    const deadBefore = letters.length;
    const record = usageRecord({ requestId: `req_${randomBase62(8)}`, accountId: "acct_y", holdId: "hold_y", billedMicro: 5n });
    await nc.jetstream().publish(subjects.usage, encodeJson([record]));
    startConsumer(flaky);
    await until(() => written(record.requestId), DELIVERY_WAIT_MS_MAX);
    expect(attempts).toBe(failures.length);
    expect(await written(record.requestId)).toBe(true);
    expect(letters.length).toBe(deadBefore);
    expect((await db.rows(sql`SELECT 1 FROM usage_dead_letters WHERE request_id = ${record.requestId}`)).length).toBe(0);
    expect((await jsm.consumers.info(stream, CONSUMER)).num_redelivered).toBe(before);
  }, 30_000);

  it("messages waiting together are posted together: fewer transactions than messages, a record in two messages posted once, a malformed one apart", async () => {
    // The earlier tests' consumers would share the messages.
    for (const earlier of consumers.splice(0)) await earlier.stop();
    let transactions = 0;
    const counting: Db = {
      ...db,
      orm: new Proxy(db.orm, {
        get(target, property, receiver) {
          if (property === "transaction") {
            transactions++;
            return (target.transaction as (...args: unknown[]) => unknown).bind(target);
          }
          return Reflect.get(target, property, receiver);
        },
      }),
    };
    const batches = Array.from({ length: 10 }, (_, n) =>
      Array.from({ length: 3 }, () =>
        usageRecord({ requestId: `req_${randomBase62(8)}`, accountId: "acct_t", holdId: `hold_t${n}`, billedMicro: 3n }),
      ),
    );
    // Sent again in another message (a batch published twice): posted once.
    batches[7]!.push(batches[2]![0]!);
    for (const [n, batch] of batches.entries()) {
      await nc.jetstream().publish(subjects.usage, encodeJson(batch));
      if (n === 4) await nc.jetstream().publish(subjects.usage, "[{ not json");
    }
    const consumer = startConsumer(counting);
    const ids = [...new Set(batches.flat().map((r) => r.requestId))];
    await until(
      async () =>
        (await db.rows(sql`SELECT 1 FROM usage_records WHERE request_id IN (SELECT json_array_elements_text(${encodeJson(ids)}::json))`))
          .length === ids.length,
      DELIVERY_WAIT_MS_MAX,
    );
    await until(async () => {
      const info = await jsm.consumers.info(stream, CONSUMER);
      return info.num_pending === 0 && info.num_ack_pending === 0;
    }, DELIVERY_WAIT_MS_MAX);
    await consumer.stop();
    const [count] = await db.rows<{ n: number }>(
      sql`SELECT count(*)::int AS n FROM usage_records WHERE request_id IN (SELECT json_array_elements_text(${encodeJson(ids)}::json))`,
    );
    expect(count!.n).toBe(30);
    expect(letters.some((l) => l.source === "malformed")).toBe(true);
    // Eleven messages; the first may be posted alone as it arrives, the rest waited while it was.
    expect(transactions).toBeGreaterThan(0);
    expect(transactions).toBeLessThanOrEqual(5);
  }, 30_000);
});
