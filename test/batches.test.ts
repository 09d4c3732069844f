/**
 * Files and batches through the official `openai` client, embedded and on NATS + PostgreSQL:
 * upload, a batch run to its end, its output file's lines shaped as live replies, the wallet's
 * drop equal to the lines' costs; validation that fails a batch by line; cancel; expiry by an
 * injected clock; an account that sees only its own files.
 */
import { BATCH_POLL_MS } from "./batchPoll.ts";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import OpenAI, { toFile } from "openai";
import { COMPLETION_WINDOW_MS, lineRequestId } from "../src/batches/store.ts";
import { cookieName } from "../src/http/console/guard.ts";
import { FILE_BYTES_MAX, FILE_LINES_MAX, FILE_READ_SLICE_BYTES } from "../src/files/files.ts";
import { BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX } from "../src/batches/claims.ts";
import { ADMIN_TOKEN, balanceMicroOf, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { until } from "./until.ts";

let t: TestGateway;
let key: string;
let accountId: string;
let client: OpenAI;

beforeAll(async () => {
  // Polls are free but rated (FREE_RPM): these tests poll faster than a client need.
  t = await startTestGateway({ FREE_RPM: "100000" });
  ({ key, accountId } = await t.fundedKey(1000));
  client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
}, SETUP_MS_MAX);
afterAll(async () => t.stop(), SETUP_MS_MAX);

const chatLine = (id: string, text = "Hello, world!") =>
  JSON.stringify({
    custom_id: id,
    method: "POST",
    url: "/v1/chat/completions",
    body: { model: "gpt-4o-mini", messages: [{ role: "user", content: text }], max_tokens: 16 },
  });

/** The status a call of the client failed with (0: it succeeded). */
async function statusOf(call: Promise<unknown>): Promise<number> {
  return call.then(
    () => 0,
    (error: { status?: number }) => error.status ?? -1,
  );
}

async function upload(lines: string[], on = client) {
  return on.files.create({ file: await toFile(Buffer.from(`${lines.join("\n")}\n`), "in.jsonl"), purpose: "batch" });
}

/** Waits for the batch to reach `status`. */
async function settled(id: string, status: string) {
  let batch = await client.batches.retrieve(id);
  await until(async () => (batch = await client.batches.retrieve(id)).status === status, { msMax: 20_000, pollMs: BATCH_POLL_MS });
  return batch;
}

async function linesOf(fileId: string): Promise<any[]> {
  const text = await (await client.files.content(fileId)).text();
  return text
    .split("\n")
    .filter((l) => l)
    .map((l) => JSON.parse(l));
}

/** The wallet once its charges are posted (another node's travel through the usage stream). */
async function balanceAfter(expected: bigint): Promise<bigint> {
  let balance = 0n;
  await until(async () => (balance = await balanceMicroOf(t.url, key)) === expected, 10_000).catch(() => {});
  return balance;
}

/**
 * The account area, for a session of the batch's account: the output file downloads (the same
 * bytes as /v1/files/{id}/content) and not for another account or without a session; each line's
 * usage row names its batch and line, a live request's none, in the page and the CSV.
 */
async function consoleSeesBatch(token: string, batchId: string, outputFileId: string, cost: bigint) {
  const asSession = (path: string, sessionToken: string | null) =>
    fetch(`${t.url}${path}`, { headers: sessionToken ? { cookie: `${cookieName(t.url)}=${sessionToken}` } : {} });
  const download = await asSession(`/console/api/files/${outputFileId}/content`, token);
  expect(download.status).toBe(200);
  expect(download.headers.get("content-disposition")).toBe(`attachment; filename="${outputFileId}.jsonl"`);
  expect(download.headers.get("x-content-type-options")).toBe("nosniff");
  expect(await download.text()).toBe(await (await client.files.content(outputFileId)).text());
  const stranger = await t.fundedKey(10);
  const theirs = await t.gw.console.sessions.create(stranger.accountId, { userAgent: null, clientAddress: null });
  const refused = await asSession(`/console/api/files/${outputFileId}/content`, theirs.token);
  expect({ status: refused.status, code: ((await refused.json()) as { error: { code: string } }).error.code }).toEqual({
    status: 404,
    code: "not_found",
  });
  expect((await asSession(`/console/api/files/${outputFileId}/content`, null)).status).toBe(401);
  expect((await asSession("/console/api/files/file-nope/content", token)).status).toBe(404);
  const { response: live } = await client.chat.completions
    .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "live" }], max_tokens: 4 })
    .withResponse();
  const liveId = live.headers.get("x-request-id");
  type Usage = { data: { request_id: string; batch_id: string | null; batch_line: number | null; cost_micro_toman: string }[] };
  let usage: Usage = { data: [] };
  // The records once written (with NATS, through the usage stream).
  await until(async () => {
    usage = (await (await asSession("/console/api/usage?limit=200", token)).json()) as Usage;
    return usage.data.some((r) => r.request_id === liveId) && usage.data.filter((r) => r.batch_id === batchId).length === 3;
  }, 10_000);
  const lines = usage.data.filter((r) => r.batch_id === batchId);
  expect(lines.map((r) => [r.request_id, r.batch_line]).sort()).toEqual([1, 2, 3].map((n) => [lineRequestId(batchId, n), n]));
  expect(lines.reduce((sum, r) => sum + BigInt(r.cost_micro_toman), 0n)).toBe(cost);
  expect(usage.data.find((r) => r.request_id === liveId)).toMatchObject({ batch_id: null, batch_line: null });
  const csv = (await (await asSession("/console/api/usage.csv", token)).text()).split("\r\n");
  expect(csv[0]).toEndWith(",batch_id,batch_line");
  expect(csv.filter((l) => l.endsWith(`,${batchId},1`) || l.endsWith(`,${batchId},2`) || l.endsWith(`,${batchId},3`)).length).toBe(3);
}

describe("a batch of chat lines", () => {
  test("runs to completed; each output line is a live reply; the wallet drops by the lines' costs", async () => {
    const before = await balanceMicroOf(t.url, key);
    const file = await upload([chatLine("a"), chatLine("b", "Good day"), chatLine("c", "Third one")]);
    expect(file).toMatchObject({ object: "file", purpose: "batch", filename: "in.jsonl" });
    const created = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    expect(created.status).toBe("validating");
    const batch = await settled(created.id, "completed");
    expect(batch.request_counts).toEqual({ total: 3, completed: 3, failed: 0 });
    // Each state it went through is stamped, in order.
    const stamps = [batch.created_at, batch.in_progress_at!, batch.finalizing_at!, batch.completed_at!];
    expect(stamps.every((s) => typeof s === "number")).toBe(true);
    expect([...stamps].sort((a, b) => a - b)).toEqual(stamps);
    expect(batch.error_file_id).toBeNull();
    const lines = await linesOf(batch.output_file_id!);
    expect(lines.map((l) => l.custom_id)).toEqual(["a", "b", "c"]);
    let sum = 0n;
    for (const l of lines) {
      expect(l.error).toBeNull();
      expect(l.response.status_code).toBe(200);
      expect(l.response.body.object).toBe("chat.completion");
      expect(l.response.body.choices[0].message.role).toBe("assistant");
      expect(l.response.body.usage.prompt_tokens).toBeGreaterThan(0);
      sum += BigInt(Math.round(l.response.body.usage.cost * 1_000_000));
    }
    const cost = BigInt((batch as unknown as { cost_micro_toman: string }).cost_micro_toman);
    expect(cost).toBe(sum);
    expect(cost).toBeGreaterThan(0n);
    expect(await balanceAfter(before - cost)).toBe(before - cost);
    const listed = await client.batches.list();
    expect(listed.data.map((b) => b.id)).toContain(batch.id);
    // The account area lists them too, for a session of the account.
    const session = await t.gw.console.sessions.create(accountId, { userAgent: null, clientAddress: null });
    const page = await fetch(`${t.url}/console/api/batches`, { headers: { cookie: `${cookieName(t.url)}=${session.token}` } });
    expect(page.status).toBe(200);
    const consoleList = (await page.json()) as { data: { id: string; cost_micro_toman: string }[] };
    expect(consoleList.data.find((b) => b.id === batch.id)?.cost_micro_toman).toBe(cost.toString());
    await consoleSeesBatch(session.token, batch.id, batch.output_file_id!, cost);
  });

  test("embeddings lines run too", async () => {
    const line = (id: string) =>
      JSON.stringify({ custom_id: id, method: "POST", url: "/v1/embeddings", body: { model: "text-embedding-3-small", input: "hi" } });
    const file = await upload([line("e1"), line("e2")]);
    const created = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/embeddings", completion_window: "24h" });
    const batch = await settled(created.id, "completed");
    const lines = await linesOf(batch.output_file_id!);
    expect(lines.map((l) => l.response.body.object)).toEqual(["list", "list"]);
  });
});

describe("validation", () => {
  test("a file with bad lines fails the batch, each bad line named, and nothing runs", async () => {
    const before = await balanceMicroOf(t.url, key);
    const file = await upload([
      chatLine("ok"),
      "not json",
      JSON.stringify({ custom_id: "x", method: "POST", url: "/v1/embeddings", body: {} }),
      chatLine("ok"),
      JSON.stringify({ custom_id: "m", method: "POST", url: "/v1/chat/completions", body: { model: "no-such-model", messages: [] } }),
      `{"custom_id":"deep","method":"POST","url":"/v1/chat/completions","body":{"x":${"[".repeat(200)}${"]".repeat(200)}}}`,
    ]);
    const created = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const batch = await settled(created.id, "failed");
    const errors = batch.errors!.data!;
    expect(errors.map((e) => e.line)).toEqual([2, 3, 4, 5, 6]);
    expect(errors.map((e) => e.code)).toEqual([
      "invalid_json_line",
      "mismatched_endpoint",
      "duplicate_custom_id",
      "invalid_request",
      "invalid_request",
    ]);
    expect(errors[4]!.message).toContain("nests deeper");
    expect(await balanceMicroOf(t.url, key)).toBe(before);
  });

  test("a file of more than FILE_LINES_MAX lines fails its batch before any line is read", async () => {
    const file = await upload(Array.from({ length: FILE_LINES_MAX + 1 }, () => "{}"));
    const created = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const batch = await settled(created.id, "failed");
    expect(batch.errors!.data!.map((e) => e.code)).toEqual(["too_many_lines"]);
  });

  test("create refuses an unknown file, an endpoint a batch cannot run and an unknown field", async () => {
    expect(
      await statusOf(client.batches.create({ input_file_id: "file-nope", endpoint: "/v1/chat/completions", completion_window: "24h" })),
    ).toBe(404);
    const file = await upload([chatLine("a")]);
    expect(await statusOf(client.batches.create({ input_file_id: file.id, endpoint: "/v1/completions", completion_window: "24h" }))).toBe(
      400,
    );
    const response = await fetch(`${t.url}/v1/batches`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h", extra: 1 }),
    });
    expect(response.status).toBe(400);
  });
});

/** This node's value of an unlabelled gauge on /metrics. */
async function gauge(name: string): Promise<number> {
  const text = await (await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  if (!line) throw new Error(`${name} is not on /metrics`);
  return Number(line.slice(name.length + 1));
}

describe("operators see the queue", () => {
  test("the overview and /metrics show the lines running and waiting while a batch runs, and none once it is cancelled", async () => {
    t.sim!.options.ttftMs = 400;
    try {
      const file = await upload(Array.from({ length: 12 }, (_, i) => chatLine(`q${i}`)));
      const created = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
      type Queue = {
        open_batches: number;
        lines_queued: number;
        lines_running: number;
        oldest_open_batch_age_s: number | null;
        queue_depth: number | null;
        node: { lines_in_flight: number; oldest_item_age_s: number };
      };
      let q: Queue | null = null;
      await until(
        async () => {
          q = (await t.admin("GET", "/admin/overview")).body.batch_queue as Queue;
          return q.lines_running > 0 && q.lines_queued > 0;
        },
        { msMax: 20_000, pollMs: BATCH_POLL_MS },
      );
      const seen = q!;
      expect(seen.open_batches).toBe(1);
      expect(seen.lines_running).toBeLessThanOrEqual(BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX);
      expect(seen.lines_queued + seen.lines_running).toBeLessThanOrEqual(12);
      expect(seen.oldest_open_batch_age_s).toBeGreaterThanOrEqual(0);
      expect(seen.queue_depth).toBeGreaterThanOrEqual(seen.lines_queued);
      expect(seen.node.lines_in_flight).toBeLessThanOrEqual(BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX);
      // One node runs them all here: its own in-flight gauge sees what the database sees, within a poll.
      await until(async () => (await gauge("darvaze_batch_lines_in_flight")) > 0, { msMax: 10_000, pollMs: 50 });
      expect(await gauge("darvaze_batch_oldest_item_age_seconds")).toBeGreaterThan(0);
      await client.batches.cancel(created.id);
      await settled(created.id, "cancelled");
      const after = (await t.admin("GET", "/admin/overview")).body.batch_queue as Queue;
      expect(after).toMatchObject({
        open_batches: 0,
        lines_queued: 0,
        lines_running: 0,
        oldest_open_batch_age_s: null,
        node: { lines_in_flight: 0 },
      });
      expect(await gauge("darvaze_batch_lines_in_flight")).toBe(0);
    } finally {
      t.sim!.options.ttftMs = 0;
    }
  });
});

describe("cancel and expiry", () => {
  test("cancel mid-batch stops new lines at once and bills only the lines run", async () => {
    t.sim!.options.ttftMs = 300;
    try {
      const before = await balanceMicroOf(t.url, key);
      const file = await upload(Array.from({ length: 20 }, (_, i) => chatLine(`c${i}`)));
      const created = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
      await settled(created.id, "in_progress");
      const cancelling = await client.batches.cancel(created.id);
      expect(["cancelling", "cancelled"]).toContain(cancelling.status);
      const batch = await settled(created.id, "cancelled");
      const run = batch.request_counts!.completed + batch.request_counts!.failed;
      expect(run).toBeLessThan(20);
      const cost = BigInt((batch as unknown as { cost_micro_toman: string }).cost_micro_toman);
      if (run > 0) expect((await linesOf(batch.output_file_id!)).length).toBe(batch.request_counts!.completed);
      expect(await balanceAfter(before - cost)).toBe(before - cost);
      expect((await client.batches.cancel(created.id)).status).toBe("cancelled");
    } finally {
      t.sim!.options.ttftMs = 0;
    }
  });

  test("a batch past its window expires: the lines running end and are billed, the others are batch_expired in the error file", async () => {
    t.sim!.options.ttftMs = 3_000; // the lines running when the clock is moved are still running
    const before = await balanceMicroOf(t.url, key);
    try {
      const file = await upload([chatLine("x1"), chatLine("x2"), chatLine("x3")]);
      const created = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
      await settled(created.id, "in_progress");
      expect(await t.gw.batches.sweep(Date.now() + COMPLETION_WINDOW_MS + 1_000)).toBeGreaterThanOrEqual(1);
      t.sim!.options.ttftMs = 0;
      let batch = await settled(created.id, "expired");
      await until(async () => (batch = await client.batches.retrieve(created.id)).error_file_id !== null, {
        msMax: 20_000,
        pollMs: BATCH_POLL_MS,
      });
      const errors = await linesOf(batch.error_file_id!);
      const expired = errors.filter((l) => l.error?.code === "batch_expired");
      expect(expired.length).toBeGreaterThan(0);
      expect(expired.length + batch.request_counts!.completed + batch.request_counts!.failed).toBe(3);
      const cost = BigInt((batch as unknown as { cost_micro_toman: string }).cost_micro_toman);
      expect(await balanceAfter(before - cost)).toBe(before - cost);
    } finally {
      t.sim!.options.ttftMs = 0;
    }
  });
});

describe("files", () => {
  test("an account sees only its own files; a deleted file is gone", async () => {
    const file = await upload([chatLine("mine")]);
    const other = await t.fundedKey(10);
    const stranger = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: other.key, maxRetries: 0 });
    expect(await statusOf(stranger.files.retrieve(file.id))).toBe(404);
    expect(await statusOf(stranger.files.content(file.id))).toBe(404);
    expect(await statusOf(stranger.files.delete(file.id))).toBe(404);
    expect((await stranger.files.list()).data).toEqual([]);
    expect((await client.files.retrieve(file.id)).id).toBe(file.id);
    expect((await client.files.list({ purpose: "batch" })).data.map((f) => f.id)).toContain(file.id);
    expect(await client.files.delete(file.id)).toMatchObject({ id: file.id, deleted: true });
    expect(await statusOf(client.files.content(file.id))).toBe(404);
    const [row] = await t.gw.deps.db.rows<{ n: number }>(sql`SELECT count(*)::int AS n FROM files WHERE id = ${file.id}`);
    expect(row?.n).toBe(0);
  });

  test("a download of a file of many slices equals its upload byte for byte", async () => {
    // Characters of two, three and four bytes, so that slices end inside them.
    const lines = Array.from({ length: 2 * Math.ceil(FILE_READ_SLICE_BYTES / 250) }, (_, i) =>
      chatLine(`l${i}`, `سلام ✓ 😀 ${i}`.padEnd(200, "é")),
    );
    const uploaded = Buffer.from(`${lines.join("\r\n")}\r\n`);
    expect(uploaded.length).toBeGreaterThan(2 * FILE_READ_SLICE_BYTES);
    const file = await client.files.create({ file: await toFile(uploaded, "many.jsonl"), purpose: "batch" });
    const response = await fetch(`${t.url}/v1/files/${file.id}/content`, { headers: { authorization: `Bearer ${key}` } });
    expect(response.status).toBe(200);
    expect(Buffer.compare(Buffer.from(await response.arrayBuffer()), uploaded)).toBe(0);
    expect(Buffer.compare(Buffer.from(await (await client.files.content(file.id)).arrayBuffer()), uploaded)).toBe(0);
  });

  test("a file above the size limit is refused with a 413, and a purpose other than batch with a 400", async () => {
    const big = Buffer.alloc(FILE_BYTES_MAX + 1, 97);
    expect(await statusOf(client.files.create({ file: await toFile(big, "big.jsonl"), purpose: "batch" }))).toBe(413);
    expect(await statusOf(client.files.create({ file: await toFile(Buffer.from("{}"), "a.jsonl"), purpose: "fine-tune" }))).toBe(400);
    const notMultipart = await fetch(`${t.url}/v1/files`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: "{}",
    });
    expect(notMultipart.status).toBe(400);
    expect(((await notMultipart.json()) as { error: { message: string } }).error.message).toContain("multipart/form-data");
  });

  test("a chat request naming a file by id is refused with a 400 naming it", async () => {
    const response = await fetch(`${t.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: [{ type: "file", file: { file_id: "file-abc" } }] }],
      }),
    });
    expect(response.status).toBe(400);
    const body = (await response.json()) as { error: { param: string; message: string } };
    expect(body.error.param).toContain("file_id");
  });
});

describe("residency", () => {
  test("a batch created with x-darvaze-residency: in-country keeps every line in the country", async () => {
    const file = await upload([chatLine("in1"), chatLine("in2")]);
    const body = { input_file_id: file.id, endpoint: "/v1/chat/completions" as const, completion_window: "24h" as const };
    const served = t.sim!.log.totals.requests;
    const created = await client.batches.create(body, { headers: { "x-darvaze-residency": "in-country" } });
    const batch = await settled(created.id, "completed");
    // gpt-4o-mini is served abroad only here: each line is refused as a live request would be, and nothing is sent.
    expect(batch.request_counts).toEqual({ total: 2, completed: 0, failed: 2 });
    for (const l of await linesOf(batch.error_file_id!)) {
      expect(l.response.status_code).toBe(503);
      expect(l.response.body.error.code).toBe("no_healthy_backend");
    }
    expect(t.sim!.log.totals.requests).toBe(served);
    expect(await statusOf(client.batches.create(body, { headers: { "x-darvaze-residency": "mars" } }))).toBe(400);
  });
});

describe("money", () => {
  test("a responses line's result is a live response", async () => {
    const line = JSON.stringify({
      custom_id: "r1",
      method: "POST",
      url: "/v1/responses",
      body: { model: "gpt-4o-mini", input: "Hello, world!", max_output_tokens: 16 },
    });
    const file = await upload([line]);
    const created = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/responses", completion_window: "24h" });
    const batch = await settled(created.id, "completed");
    const [result] = await linesOf(batch.output_file_id!);
    expect(result.response.status_code).toBe(200);
    expect(result.response.body.object).toBe("response");
    expect(result.response.body.status).toBe("completed");
  });

  test("a line the wallet cannot cover fails with insufficient_quota in the error file and never runs", async () => {
    const poor = await t.fundedKey("0.000001");
    const poorClient = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: poor.key, maxRetries: 0 });
    const served = t.sim!.log.totals.requests;
    const file = await upload([chatLine("p1"), chatLine("p2")], poorClient);
    const created = await poorClient.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    let batch = created;
    await until(async () => (batch = await poorClient.batches.retrieve(created.id)).status === "completed", 20_000);
    expect(batch.request_counts).toEqual({ total: 2, completed: 0, failed: 2 });
    expect(batch.output_file_id).toBeNull();
    const errors = (await (await poorClient.files.content(batch.error_file_id!)).text())
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    for (const e of errors) {
      expect(e.response.status_code).toBe(402);
      expect(e.response.body.error.code).toBe("insufficient_quota");
    }
    expect(t.sim!.log.totals.requests).toBe(served);
    expect(await balanceMicroOf(t.url, poor.key)).toBe(1n);
  });

  test("a line found running (its node died before its result was stored) runs again and is billed once", async () => {
    const before = await balanceMicroOf(t.url, key);
    const file = await upload([chatLine("d1"), chatLine("d2", "Another")]);
    const created = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const done = await settled(created.id, "completed");
    const cost = BigInt((done as unknown as { cost_micro_toman: string }).cost_micro_toman);
    expect(await balanceAfter(before - cost)).toBe(before - cost);
    // The state a node leaves when it dies after line 1 was billed but before its result was stored.
    const db = t.gw.deps.db;
    const [line] = await db.rows<{ cost: string }>(
      sql`SELECT cost_micro::text AS cost FROM batch_lines WHERE batch_id = ${done.id} AND line = 1`,
    );
    await db.rows(
      sql`UPDATE batch_lines SET state = 'running', claimed_at = now() - interval '1 hour', result = NULL, cost_micro = 0
          WHERE batch_id = ${done.id} AND line = 1`,
    );
    await db.rows(
      sql`UPDATE batches SET status = 'in_progress', completed = 1, cost_micro = cost_micro - ${line!.cost}::bigint,
          output_file_id = NULL, finalizing_at = NULL, completed_at = NULL WHERE id = ${done.id}`,
    );
    // The item delivered again, as the work queue does once the dead node's ack wait passes.
    expect(await t.gw.batches.handle({ kind: "line", batchId: done.id, line: 1 })).toBe("settled");
    const rerun = await settled(done.id, "completed");
    expect(t.sim!.log.byRequestId(lineRequestId(done.id, 1)).length).toBe(2);
    expect(rerun.request_counts).toEqual({ total: 2, completed: 2, failed: 0 });
    expect((await linesOf(rerun.output_file_id!)).map((l) => l.custom_id)).toEqual(["d1", "d2"]);
    // Billed once: the ledger skipped the rerun's usage record, request id and all.
    await t.gw.deps.writer.flush();
    await t.gw.deps.writer.posted();
    expect(await balanceMicroOf(t.url, key)).toBe(before - cost);
    const metrics = await t.gw.deps.metrics.registry.getSingleMetricAsString("darvaze_batch_rerun_cost_micro_toman_total");
    expect(metrics).toMatch(/endpoint="\/v1\/chat\/completions"} [1-9]/);
  });
});
