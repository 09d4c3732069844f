/**
 * A batch's limits are its own: its lines take none of the key's live concurrency slots, rpm or
 * tpm (a live client of the key is served while its batch runs, and the batch is not refused
 * for the live traffic), while the key's monthly cap and the wallet count them as any request.
 * Embedded and on NATS + PostgreSQL.
 */
import { BATCH_POLL_MS } from "./batchPoll.ts";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI, { toFile } from "openai";
import { balanceMicroOf, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { until } from "./until.ts";

let t: TestGateway;

beforeAll(async () => {
  // Polls are free but rated (FREE_RPM): these tests poll faster than a client need.
  t = await startTestGateway({ FREE_RPM: "100000" });
}, SETUP_MS_MAX);
afterAll(async () => t.stop(), SETUP_MS_MAX);

const LINES = 6;
const RPM = 3;

const chatLine = (i: number) =>
  JSON.stringify({
    custom_id: `l${i}`,
    method: "POST",
    url: "/v1/chat/completions",
    body: { model: "gpt-4o-mini", messages: [{ role: "user", content: `Line ${i}` }], max_tokens: 8 },
  });

async function createBatch(client: OpenAI, lines: number) {
  const text = Array.from({ length: lines }, (_, i) => chatLine(i)).join("\n");
  const file = await client.files.create({ file: await toFile(Buffer.from(text), "in.jsonl"), purpose: "batch" });
  return client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
}

async function ended(client: OpenAI, id: string) {
  let batch = await client.batches.retrieve(id);
  await until(async () => (batch = await client.batches.retrieve(id)).status === "completed", { msMax: 30_000, pollMs: BATCH_POLL_MS });
  return batch;
}

/** A live chat call's HTTP status (200 when it answered). */
function live(client: OpenAI): Promise<number> {
  return client.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "live" }], max_tokens: 8 }).then(
    () => 200,
    (error: { status?: number }) => error.status ?? -1,
  );
}

describe("a batch beside its key's live traffic", () => {
  test("a key with concurrency_max 1 and a small rpm answers live while its batch runs; the batch is refused nothing", async () => {
    const { key } = await t.fundedKey(1000, { concurrency_max: 1, rpm: RPM });
    const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
    t.sim!.options.ttftMs = 300;
    try {
      const created = await createBatch(client, LINES);
      // A line holds the upstream: a live request of the key would need its one slot.
      await until(() => t.sim!.log.inFlight >= 1, 20_000);
      expect(await live(client)).toBe(200);
      const batch = await ended(client, created.id);
      // More lines than the key's rpm, two at once on a key of one slot, and none refused.
      expect(batch.request_counts).toEqual({ total: LINES, completed: LINES, failed: 0 });
    } finally {
      t.sim!.options.ttftMs = 0;
    }
    // The batch took none of the minute's requests: the key's live rpm is whole, and still enforced.
    const after = [];
    for (let i = 1; i < RPM; i++) after.push(await live(client));
    expect(after).toEqual(Array(RPM - 1).fill(200));
    expect(await live(client)).toBe(429);
  }, 60_000);

  test("the key's monthly cap counts batch lines: a line past it is refused insufficient_quota and never runs", async () => {
    const { key } = await t.fundedKey(1000, { monthly_spend_cap_toman: "0.000001" });
    const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
    const before = await balanceMicroOf(t.url, key);
    const served = t.sim!.log.totals.requests;
    const created = await createBatch(client, 2);
    const batch = await ended(client, created.id);
    expect(batch.request_counts).toEqual({ total: 2, completed: 0, failed: 2 });
    const errors = (await (await client.files.content(batch.error_file_id!)).text())
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(errors.map((e) => [e.response.status_code, e.response.body.error.code])).toEqual([
      [402, "insufficient_quota"],
      [402, "insufficient_quota"],
    ]);
    expect(t.sim!.log.totals.requests).toBe(served);
    expect(await balanceMicroOf(t.url, key)).toBe(before);
  }, 60_000);
});
