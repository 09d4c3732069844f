/**
 * Anthropic's Message Batches through the official `@anthropic-ai/sdk`: create with inline
 * requests, poll, results as the SDK reads them (each a message shaped as the live reply), the
 * wallet's drop equal to the batch's cost; a bad request refused at create, naming it; cancel.
 */
import { BATCH_POLL_MS } from "./batchPoll.ts";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import { sql } from "drizzle-orm";
import { balanceMicroOf, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { until } from "./until.ts";

let t: TestGateway;
let key: string;
let client: Anthropic;

beforeAll(async () => {
  t = await startTestGateway({ FREE_RPM: "100000" }); // the test polls faster than a client need
  ({ key } = await t.fundedKey(1000));
  client = new Anthropic({ baseURL: t.url, apiKey: key, maxRetries: 0 });
}, SETUP_MS_MAX);
afterAll(async () => t.stop(), SETUP_MS_MAX);

const request = (id: string, text: string) => ({
  custom_id: id,
  params: { model: "claude-3-5-haiku", max_tokens: 16, messages: [{ role: "user" as const, content: text }] },
});

async function ended(id: string) {
  let batch = await client.messages.batches.retrieve(id);
  await until(async () => (batch = await client.messages.batches.retrieve(id)).processing_status === "ended", {
    msMax: 20_000,
    pollMs: BATCH_POLL_MS,
  });
  return batch;
}

describe("message batches", () => {
  test("run to ended; each result is a live message; the wallet drops by the batch's cost", async () => {
    const before = await balanceMicroOf(t.url, key);
    const created = await client.messages.batches.create({ requests: [request("a", "Hello, world!"), request("b", "Good day")] });
    expect(created.type).toBe("message_batch");
    expect(created.processing_status).toBe("in_progress");
    const batch = await ended(created.id);
    expect(batch.request_counts).toEqual({ processing: 0, succeeded: 2, errored: 0, canceled: 0, expired: 0 });
    const results: Anthropic.Messages.Batches.MessageBatchIndividualResponse[] = [];
    for await (const r of await client.messages.batches.results(created.id)) results.push(r);
    expect(results.map((r) => r.custom_id)).toEqual(["a", "b"]);
    for (const r of results) {
      expect(r.result.type).toBe("succeeded");
      if (r.result.type !== "succeeded") continue;
      expect(r.result.message.type).toBe("message");
      expect(r.result.message.role).toBe("assistant");
      expect(r.result.message.usage.input_tokens).toBeGreaterThan(0);
    }
    const listed = await client.messages.batches.list();
    expect(listed.data.map((b) => b.id)).toContain(created.id);
    const cost = BigInt((batch as unknown as { cost_micro_toman: string }).cost_micro_toman);
    expect(cost).toBeGreaterThan(0n);
    // Another node's charges travel through the usage stream: the wallet read once they are posted.
    await until(async () => (await balanceMicroOf(t.url, key)) === before - cost, 10_000).catch(() => {});
    expect(await balanceMicroOf(t.url, key)).toBe(before - cost);
  });

  test("a bad request is refused at create, naming it, in Anthropic's shape", async () => {
    const bad = { custom_id: "x", params: { model: "claude-3-5-haiku", messages: [{ role: "user" as const, content: "hi" }] } };
    const refused = await client.messages.batches.create({ requests: [request("ok", "fine"), bad as never] }).then(
      () => null,
      (error: { status: number; error: { error: { type: string; message: string } } }) => error,
    );
    expect(refused?.status).toBe(400);
    expect(refused?.error.error.type).toBe("invalid_request_error");
    expect(refused?.error.error.message).toContain("requests.1");
  });

  test("cancel: the batch ends canceled, the requests not run counted as canceled", async () => {
    t.sim!.options.ttftMs = 300;
    try {
      const requests = Array.from({ length: 10 }, (_, i) => request(`c${i}`, `Line ${i}`));
      const created = await client.messages.batches.create({ requests });
      // Cancelled once its requests are queued as lines (a cancel while they are checked leaves none to count).
      await until(async () => {
        const [row] = await t.gw.deps.db.rows<{ status: string }>(sql`SELECT status FROM batches WHERE id = ${created.id}`);
        return row?.status === "in_progress";
      }, 20_000);
      const canceling = await client.messages.batches.cancel(created.id);
      expect(["canceling", "ended"]).toContain(canceling.processing_status);
      const batch = await ended(created.id);
      const counts = batch.request_counts;
      expect(counts.canceled).toBeGreaterThan(0);
      expect(counts.succeeded + counts.errored + counts.canceled).toBe(10);
      const results: { result: { type: string } }[] = [];
      for await (const r of await client.messages.batches.results(created.id)) results.push(r);
      expect(results.filter((r) => r.result.type === "canceled").length).toBe(counts.canceled);
    } finally {
      t.sim!.options.ttftMs = 0;
    }
  });
});
