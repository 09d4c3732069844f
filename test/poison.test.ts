/**
 * One poisoned usage record in a batch of 1,800 (with the customers' own records, still under one
 * full batch): the database refuses it (a CHECK, SQLSTATE 23514), it is dead-lettered with its
 * reason and its charge written off, the other 1,799 are billed, admission never stops, /metrics
 * and the audit show it, and an operator's replay after a fix bills it once and reverses the
 * write-off. Embedded (PGlite, in-process bus) always; on NATS + PostgreSQL when the environment
 * names them.
 */
import { afterAll, beforeAll, describe, expect } from "bun:test";
import { sql } from "drizzle-orm";
import { NatsBus } from "../src/bus/nats.ts";
import { openHold } from "../src/ledger/holds.ts";
import { deadLetterStreamName } from "../src/ledger/stream.ts";
import type { UsageRecord } from "../src/ledger/usage.ts";
import { USAGE_BACKLOG_RECORDS_MAX, USAGE_BATCH_MAX } from "../src/ledger/usage.ts";
import { ADMIN_TOKEN, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { describeWith } from "./services.ts";
import { usageRecord } from "./usageRecords.ts";

/**
 * Requests customers make while the batch is posted. Bounded, so that the batch and their own
 * records stay below the backlog past which admissions wait for the writer (a separate guard:
 * a slow commit of a full batch may trip it, which is not what this test is about).
 */
const CALLS_MAX = 100;
const RECORDS = 1_800;
const POISONED = 1_234;
const CHARGE_MICRO = 10n;

function suite(
  name: string,
  it: (name: string, fn: () => Promise<unknown>, timeoutMs?: number) => void,
  extra: Record<string, string | undefined>,
  source: string,
) {
  let t: TestGateway;
  beforeAll(async () => {
    t = await startTestGateway(extra);
  }, SETUP_MS_MAX);
  afterAll(async () => t?.stop(), SETUP_MS_MAX);

  it(`${name}: one record dead-lettered, 1,799 billed, admission never stops; replay after a fix bills it once`, async () => {
    expect(RECORDS + CALLS_MAX).toBeLessThan(Math.min(USAGE_BATCH_MAX, USAGE_BACKLOG_RECORDS_MAX)); // one batch, under the backlog guard
    const { db, writer } = t.gw.deps;
    const funded = await t.fundedKey(100); // CALLS_MAX requests of about 0.25 toman each, and the batch
    const holdId = `hold_poison_${funded.accountId}`;
    const hold = await openHold(db, {
      holdId,
      accountId: funded.accountId,
      keyId: funded.keyId,
      label: "lease",
      minMicro: 1n,
      desiredMicro: 1_000_000n,
      ttlMs: 600_000,
    });
    expect(hold.opened).toBe(true);
    const records: UsageRecord[] = Array.from({ length: RECORDS }, (_, i) =>
      usageRecord({
        requestId: `req_poison_${funded.accountId}_${i}`,
        accountId: funded.accountId,
        keyId: funded.keyId,
        holdId,
        meteredMicro: CHARGE_MICRO,
        // The poison: billed above metered, which usage_records' CHECK refuses.
        billedMicro: i === POISONED ? CHARGE_MICRO * 2n : CHARGE_MICRO,
      }),
    );
    const balance = async () => {
      const [row] = await db.rows<{ balance: string }>(
        sql`SELECT balance_micro::text AS balance FROM wallets WHERE account_id = ${funded.accountId}`,
      );
      return BigInt(row!.balance);
    };
    const before = await balance();

    // Customers keep calling while the batch is split and posted: every one is admitted.
    const statuses: number[] = [];
    let notAccepting = 0;
    let behind = 0;
    let posting = true;
    const sampler = (async () => {
      while (posting) {
        if (!writer.accepting) notAccepting++;
        if (!writer.hasRoom) behind++;
        await Bun.sleep(2); // the sampling pace
      }
    })();
    const callers = (async () => {
      while (posting && statuses.length < CALLS_MAX) {
        const response = await fetch(`${t.url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${funded.key}`, "content-type": "application/json" },
          body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }], max_tokens: 2 }),
        });
        statuses.push(response.status);
        await response.arrayBuffer();
      }
    })();
    for (const record of records) writer.append(record);
    await writer.posted();
    posting = false;
    await Promise.all([sampler, callers]);
    expect(statuses.length).toBeGreaterThan(0);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
    expect(notAccepting).toBe(0);
    expect(behind).toBe(0); // the backlog guard was never in play: every answer above is the poison's

    // 1,799 billed, one dead-lettered with its reason and its charge written off.
    const ours = sql`request_id LIKE ${`req_poison_${funded.accountId}_%`}`;
    const [billed] = await db.rows<{ n: string; sum: string }>(
      sql`SELECT count(*)::text AS n, coalesce(sum(billed_micro), 0)::text AS sum FROM usage_records WHERE ${ours}`,
    );
    expect(billed).toEqual({ n: String(RECORDS - 1), sum: String(BigInt(RECORDS - 1) * CHARGE_MICRO) });
    const listed = await t.admin("GET", "/admin/usage/dead-letters");
    const letters = listed.body.data.filter((d: { request_id: string }) => d.request_id.startsWith(`req_poison_${funded.accountId}_`));
    expect(letters).toHaveLength(1);
    const letter = letters[0];
    expect(letter).toMatchObject({
      request_id: records[POISONED]!.requestId,
      sql_state: "23514",
      source,
      status: "dead",
      written_off_micro_toman: "20",
    });
    expect(letter.reason).toContain("usage_records_billed_within_metered");
    if (t.gw.deps.bus instanceof NatsBus) {
      // The dead-letter stream has it too, for operators who watch NATS.
      const jsm = await t.gw.deps.bus.nc.jetstreamManager();
      const message = await jsm.streams.getMessage(deadLetterStreamName(t.gw.deps.env.DARVAZE_SUBJECT_PREFIX), {
        last_by_subj: t.gw.deps.subjects.usageDead,
      });
      expect(message.json<{ requestId: string; sqlState: string }>()).toMatchObject({
        requestId: records[POISONED]!.requestId,
        sqlState: "23514",
      });
    }
    const [writeOff] = await db.rows<{ amount: string; memo: string }>(sql`
      SELECT amount_micro::text AS amount, memo FROM ledger_transfers WHERE reference = ${`deadletter:${records[POISONED]!.requestId}`} AND kind = 'dead_letter'`);
    expect(writeOff?.amount).toBe("20");
    expect(writeOff?.memo).toContain("23514");

    // Counted in /metrics, listed by the audit, which passes.
    const metrics = await (await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).text();
    expect(metrics).toContain(`darvaze_usage_dead_letters_total{source="${source}",sql_state="23514"} 1`);
    expect(metrics).toMatch(/^darvaze_usage_dead_letters_pending 1$/m);
    let audit = await t.admin("GET", "/admin/ledger/audit");
    expect(audit.body.ok).toBe(true);
    expect(audit.body.dead_letters).toEqual({ awaiting_replay: 1, malformed: 0, written_off_micro: "20" });

    // Replay before a fix: still refused, still dead.
    const refused = await t.admin("POST", `/admin/usage/dead-letters/${letter.id}/replay`);
    expect([refused.status, refused.body.error.code]).toEqual([409, "replay_refused"]);
    expect(refused.body.error.message).toContain("23514");
    // The operator's fix (here, of the stored record), then the replay bills it once.
    await db.rows(
      sql`UPDATE usage_dead_letters SET record = replace(record, '"billedMicro":"20"', '"billedMicro":"10"') WHERE id = ${letter.id}::bigint`,
    );
    const replayed = await t.admin("POST", `/admin/usage/dead-letters/${letter.id}/replay`);
    expect(replayed.status).toBe(200);
    expect(replayed.body).toMatchObject({ outcome: "replayed", written: 1, posted_micro_toman: "10" });
    const again = await t.admin("POST", `/admin/usage/dead-letters/${letter.id}/replay`);
    expect(again.body.outcome).toBe("already_replayed");
    const charged = await httpCharges(t, funded.accountId); // first: it waits for the callers' last records to be posted
    expect(await balance()).toBe(before - BigInt(RECORDS) * CHARGE_MICRO - charged);
    audit = await t.admin("GET", "/admin/ledger/audit");
    expect(audit.body.checks.filter((c: { ok: boolean }) => !c.ok)).toEqual([]);
    expect(audit.body.dead_letters).toEqual({ awaiting_replay: 0, malformed: 0, written_off_micro: "0" });
  }, 120_000);
}

/** What the callers' own requests were charged (they ran during the test). */
async function httpCharges(t: TestGateway, accountId: string): Promise<bigint> {
  await t.gw.deps.writer.posted();
  const [row] = await t.gw.deps.db.rows<{ sum: string }>(sql`
    SELECT coalesce(sum(billed_micro), 0)::text AS sum FROM usage_records WHERE account_id = ${accountId} AND request_id NOT LIKE 'req_poison_%'`);
  return BigInt(row!.sum);
}

describe("poisoned usage batch, embedded", () => {
  suite(
    "embedded",
    (name, fn, timeoutMs) => require("bun:test").test(name, fn, timeoutMs),
    { NATS_URL: undefined, DATABASE_URL: undefined },
    "writer",
  );
});

describeWith(["nats", "postgres"], "poisoned usage batch, NATS + PostgreSQL", (it) => {
  suite("NATS + PostgreSQL", it, {}, "consumer");
});
