import { expect, test } from "bun:test";
import { until } from "../../test/until.ts";
import { encodeJson } from "../json.ts";
import { silentLogger } from "../log.ts";
import { priceField, UNIT_NAMES, unitsField } from "../units.ts";
import {
  recordRow,
  rowsJson,
  usageRecordSchema,
  USAGE_BACKLOG_RECORDS_MAX,
  USAGE_BATCH_EARLY_RECORDS,
  type UsageRecord,
  type UsageSink,
  UsageWriter,
} from "./usage.ts";

function record(n: number): UsageRecord {
  return {
    requestId: `req-${n}`,
    accountId: "acc",
    keyId: "key",
    holdId: "hold",
    model: "m",
    operation: "chat",
    backend: null,
    priceVersionId: 1,
    usage: { input: 1n, output: 1n },
    prices: { input: 1n, output: 1n },
    meteredMicro: 2n,
    billedMicro: 2n,
    status: 200,
    durationMs: 1,
  };
}

/** A sink whose writes finish only when the test says so. */
function heldSink(): UsageSink & { release(): void; writes: number; sizes: number[] } {
  let release: () => void = () => {};
  const sink = {
    writes: 0,
    sizes: [] as number[],
    release: () => release(),
    write: (batch: UsageRecord[]) => {
      sink.writes++;
      sink.sizes.push(batch.length);
      return new Promise<void>((resolve) => (release = resolve));
    },
  };
  return sink;
}

test("backpressure: an admission waits while a batch's worth of records is unwritten, and goes on once it is written", async () => {
  const sink = heldSink();
  const writer = new UsageWriter(sink, silentLogger, 10_000);
  for (let n = 0; n < USAGE_BACKLOG_RECORDS_MAX - 1; n++) writer.append(record(n));
  expect(await writer.room(1_000)).toBe(true);
  // The batch is full: it is being written (flush at USAGE_BATCH_MAX), and a new admission waits.
  writer.append(record(USAGE_BACKLOG_RECORDS_MAX));
  let roomGiven: boolean | null = null;
  const waiting = writer.room(5_000).then((ok) => (roomGiven = ok));
  await until(() => sink.writes === 1, { what: "the full batch's write" });
  // A negative check: with the write held, no room is given within 20 ms.
  await Bun.sleep(20);
  expect(roomGiven).toBeNull();
  expect(sink.writes).toBe(1);
  sink.release();
  await waiting;
  expect(roomGiven!).toBe(true);
  expect(writer.buffered).toBe(0);
});

test("backpressure: a writer that does not catch up within the wait refuses room", async () => {
  const sink = heldSink();
  const writer = new UsageWriter(sink, silentLogger, 10_000);
  for (let n = 0; n < USAGE_BACKLOG_RECORDS_MAX; n++) writer.append(record(n));
  expect(await writer.room(30)).toBe(false);
  sink.release();
});

test("a usage message is validated a slice at a time: timers run between slices once a turn's time is spent, and a bad record is named by its place in the whole batch", async () => {
  const { parseBatch, USAGE_PARSE_SLICE_RECORDS } = await import("./stream.ts");
  const { encodeJson } = await import("../json.ts");
  const batch = JSON.parse(encodeJson(Array.from({ length: USAGE_PARSE_SLICE_RECORDS * 3 + 7 }, (_, n) => record(n))));
  let ticks = 0;
  let ticking = setImmediate(() => ticks++);
  // No time for a turn at all: the loop runs after every slice.
  const parsed = await parseBatch(batch, 0);
  clearImmediate(ticking);
  expect("records" in parsed && parsed.records.length).toBe(USAGE_PARSE_SLICE_RECORDS * 3 + 7);
  expect("records" in parsed && parsed.records[5]!.billedMicro).toBe(2n);
  expect(ticks).toBe(1);
  // A turn longer than the whole batch: no slice waits for the loop.
  ticks = 0;
  ticking = setImmediate(() => ticks++);
  expect("records" in (await parseBatch(batch, 60_000))).toBe(true);
  clearImmediate(ticking);
  expect(ticks).toBe(0);
  batch[USAGE_PARSE_SLICE_RECORDS * 2 + 3].billedMicro = "two";
  const invalid = await parseBatch(batch);
  expect("invalid" in invalid && invalid.invalid).toStartWith(`${USAGE_PARSE_SLICE_RECORDS * 2 + 3}.billedMicro: `);
  expect("invalid" in (await parseBatch({ not: "an array" }))).toBe(true);
});

test("group commit: records appended while a write is slow wait for their own timer and go in one batch, not straight after it", async () => {
  const flushMs = 200;
  const sink = heldSink();
  const writer = new UsageWriter(sink, silentLogger, flushMs);
  writer.append(record(0));
  const first = writer.flush(); // the first record's batch, held by the sink
  expect(sink.writes).toBe(1);
  const appendedMs = performance.now();
  for (let n = 1; n <= 10; n++) writer.append(record(n));
  sink.release();
  await first;
  // Not written at once because the last write ended: that made every commit smaller the slower
  // the database. (The flush that wrote the first batch has ended; the ten wait for their timer.)
  expect(sink.writes).toBe(1);
  await until(() => sink.writes === 2, 10_000);
  expect(performance.now() - appendedMs).toBeGreaterThanOrEqual(flushMs - 1);
  sink.release();
  await writer.flush();
  expect(sink.sizes).toEqual([1, 10]);
  expect(writer.buffered).toBe(0);
});

test("group commit: once half a batch waits when a write ends, it is written at once; flush() writes all that was appended before it", async () => {
  const sink = heldSink();
  const writer = new UsageWriter(sink, silentLogger, 60_000);
  writer.append(record(0));
  const flushed = writer.flush();
  await until(() => sink.writes === 1, { what: "the first record's write" });
  for (let n = 1; n <= USAGE_BATCH_EARLY_RECORDS; n++) writer.append(record(n));
  sink.release();
  // No timer would fire for a minute: the half batch goes at once.
  await until(() => sink.writes === 2, { what: "the half batch's write" });
  sink.release();
  await flushed;
  expect(sink.sizes).toEqual([1, USAGE_BATCH_EARLY_RECORDS]);
  writer.append(record(-1));
  const last = writer.flush();
  await until(() => sink.writes === 3, { what: "the last record's write" });
  sink.release();
  await last;
  expect(sink.sizes).toEqual([1, USAGE_BATCH_EARLY_RECORDS, 1]);
  expect(writer.buffered).toBe(0);
});

test("a record's row (the usage log's message, the insert's row): bigints as strings; input's and output's pair always, another unit's when either is not zero; undefined fields left out, nulls kept", () => {
  const row = {
    ...record(1),
    usage: { input: 3n, output: 0n, cache_read: 2n, cache_write: 0n },
    prices: { input: 5n, output: 7n, cache_read: 0n, cache_write: 0n },
    partition: null,
    hostedCallUnit: undefined,
  };
  expect(JSON.parse(rowsJson([row]))).toEqual([
    {
      requestId: "req-1",
      accountId: "acc",
      keyId: "key",
      holdId: "hold",
      model: "m",
      operation: "chat",
      backend: null,
      priceVersionId: 1,
      meteredMicro: "2",
      billedMicro: "2",
      status: 200,
      durationMs: 1,
      partition: null,
      inputUnits: "3",
      inputPricePer1m: "5",
      outputUnits: "0",
      outputPricePer1m: "7",
      cacheReadUnits: "2",
      cacheReadPricePer1m: "0",
    },
  ]);
});

test("a record read back from its row is the record: the maps rebuilt from the pairs, whatever units it used", () => {
  const units = ["cache_read", "cache_write", "cache_write_1h", "hosted_call"] as const;
  for (let mask = 0; mask < 1 << units.length; mask++) {
    const used = units.filter((_, i) => mask & (1 << i));
    const r: UsageRecord = {
      ...record(mask),
      backend: mask % 2 ? "b" : null,
      usage: { input: 10n, output: 0n, ...Object.fromEntries(used.map((u, i) => [u, BigInt(i + 1)])) },
      prices: { input: 3n, output: 4n, ...Object.fromEntries(used.map((u, i) => [u, BigInt(i * 7)])) },
      ...(used.includes("hosted_call") ? { hostedCallUnit: "web_search_call" } : {}),
      fenceToken: mask % 3 ? 12n : null,
      anomalies: null,
    };
    expect(usageRecordSchema.parse(JSON.parse(JSON.stringify(recordRow(r))))).toEqual(r);
  }
});

test("a record's row carries what a node of the previous release requires of a usage log record (input's and output's pair, backend even when null)", () => {
  const row = recordRow({ ...record(1), usage: { input: 0n, output: 0n }, prices: { input: 0n, output: 0n } });
  for (const field of [
    "requestId",
    "accountId",
    "keyId",
    "holdId",
    "model",
    "operation",
    "backend",
    "priceVersionId",
    "meteredMicro",
    "billedMicro",
    "status",
    "durationMs",
  ])
    expect(row).toHaveProperty(field);
  expect(row).toMatchObject({ inputUnits: "0", outputUnits: "0", inputPricePer1m: "0", outputPricePer1m: "0" });
});

test("the usage log's records of every release read as the same record: the pairs alone, the maps with every pair beside them, the maps alone (a dead letter)", () => {
  const r: UsageRecord = {
    ...record(7),
    usage: { input: 12n, output: 5n, cache_read: 4n },
    prices: { input: 3n, output: 9n, cache_read: 1n },
  };
  const strings = (value: unknown) => JSON.parse(encodeJson(value));
  const allPairs = Object.fromEntries(
    UNIT_NAMES.flatMap((unit) => [
      [unitsField(unit), String(r.usage[unit] ?? 0n)],
      [priceField(unit), String(r.prices[unit] ?? 0n)],
    ]),
  );
  const shapes = {
    pairs: JSON.parse(JSON.stringify(recordRow(r))),
    mapsAndPairs: { ...strings(r), ...allPairs },
    maps: strings(r),
  };
  for (const [shape, value] of Object.entries(shapes))
    expect({ shape, record: usageRecordSchema.parse(value) }).toEqual({ shape, record: r });
});

test("a record of a request that ended early reads back with who ended it and its output's metered and allowance units; a record without them (the release before) reads as one that ran to its end", () => {
  const early: UsageRecord = { ...record(2), endedBy: "client", outputMeteredUnits: 7, outputAllowanceUnits: 13 };
  const row = JSON.parse(JSON.stringify(recordRow(early)));
  expect(row).toMatchObject({ endedBy: "client", outputMeteredUnits: 7, outputAllowanceUnits: 13 });
  expect(usageRecordSchema.parse(row)).toEqual(early);
  const before = usageRecordSchema.parse(JSON.parse(JSON.stringify(recordRow(record(3)))));
  expect(before.endedBy).toBeUndefined();
  expect(() => usageRecordSchema.parse({ ...row, endedBy: "someone" })).toThrow();
});
