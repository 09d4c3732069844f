/**
 * The embedded gateway stopped while it runs a batch's lines and started again on the same data
 * folder: its in-process queue is filled again from the database, the lines cut by the stop run
 * again, and the batch completes with every line once, each billed once.
 */
import { BATCH_POLL_MS } from "./batchPoll.ts";
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sql } from "drizzle-orm";
import OpenAI, { toFile } from "openai";
import type { Catalog } from "../src/catalog/catalog.ts";
import { loadConfig } from "../src/config.ts";
import { silentLogger } from "../src/log.ts";
import { startGateway, type Gateway } from "../src/main.ts";
import { simulatorPools } from "../src/sim/pools.ts";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { ADMIN_TOKEN, SETUP_MS_MAX, testEnv } from "./helpers.ts";
import { until } from "./until.ts";

const LINES = 6;
let sim: Simulator;
let folder: string;
let env: Record<string, string | undefined>;

beforeAll(async () => {
  sim = await startSimulator({ ttftMs: 400 });
  folder = mkdtempSync(join(tmpdir(), "darvaze-batches-"));
  env = testEnv({ DATABASE_URL: undefined, NATS_URL: undefined, DARVAZE_DATA: folder, FREE_RPM: "100000" });
}, SETUP_MS_MAX);
afterAll(async () => {
  await sim.stop();
  rmSync(folder, { recursive: true, force: true });
}, SETUP_MS_MAX);

function start(): Promise<Gateway> {
  return startGateway(loadConfig(env), { log: silentLogger, pools: (catalog: Catalog) => simulatorPools(catalog, sim.url) });
}

async function admin(gw: Gateway, method: string, path: string, body: unknown): Promise<any> {
  const response = await fetch(gw.url + path, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return response.json();
}

test(
  "a batch cut by the gateway's stop completes after its start, every line once and billed once",
  async () => {
    let gw = await start();
    const account = await admin(gw, "POST", "/admin/accounts", { name: "restart" });
    await admin(gw, "POST", `/admin/accounts/${account.id}/topups`, { amount_toman: 1000, reference: "seed" });
    const { key } = await admin(gw, "POST", `/admin/accounts/${account.id}/keys`, { name: "k" });
    const lines = Array.from({ length: LINES }, (_, i) =>
      JSON.stringify({
        custom_id: `r${i}`,
        method: "POST",
        url: "/v1/chat/completions",
        body: { model: "gpt-4o-mini", messages: [{ role: "user", content: `Line ${i}` }], max_tokens: 8 },
      }),
    );
    let client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
    const file = await client.files.create({ file: await toFile(Buffer.from(lines.join("\n")), "in.jsonl"), purpose: "batch" });
    const created = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const running = async () =>
      (await gw.deps.db.rows<{ n: number }>(sql`SELECT count(*)::int AS n FROM batch_lines WHERE state = 'running'`))[0]!.n;
    await until(async () => (await running()) > 0, 20_000);
    await gw.stop();

    gw = await start();
    try {
      client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
      let batch = created;
      await until(async () => (batch = await client.batches.retrieve(created.id)).status === "completed", {
        msMax: 30_000,
        pollMs: BATCH_POLL_MS,
      });
      expect(batch.request_counts).toEqual({ total: LINES, completed: LINES, failed: 0 });
      const output = (await (await client.files.content(batch.output_file_id!)).text()).trim().split("\n");
      expect(output.map((l) => JSON.parse(l).custom_id)).toEqual(lines.map((l) => JSON.parse(l).custom_id));
      await gw.deps.writer.flush();
      const prefix = `req_${created.id.slice("batch_".length)}_%`;
      const [billed] = await gw.deps.db.rows<{ n: number }>(
        sql`SELECT count(*)::int AS n FROM usage_records WHERE request_id LIKE ${prefix}`,
      );
      expect(billed!.n).toBe(LINES);
    } finally {
      await gw.stop();
    }
  },
  SETUP_MS_MAX,
);
