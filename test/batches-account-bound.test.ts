/**
 * One account's batch lines across two gateways on one database and NATS: never more than
 * BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX of them at the upstream at once on the whole cluster (the
 * claim counts the account's fresh claims in the database), while another account's batch
 * progresses beside it rather than after it.
 */
import { BATCH_POLL_MS } from "./batchPoll.ts";
import { afterAll, beforeAll, expect } from "bun:test";
import OpenAI, { toFile } from "openai";
import { BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX } from "../src/batches/claims.ts";
import type { SimLogEntry } from "../src/sim/log.ts";
import { SETUP_MS_MAX } from "./helpers.ts";
import { fundedKey, type GatewayProcess, startTwoNodes } from "./processes.ts";
import { describeWith } from "./services.ts";
import { until } from "./until.ts";

/** More lines than both nodes' per-node bounds together would run at once. */
const BIG = 16;
const SMALL = 4;

/** The most of these upstream calls under way at one moment (an end before a start at the same instant). */
function peakOverlap(entries: SimLogEntry[]): number {
  const events = entries.flatMap((e) => [
    { at: e.startedAt, step: 1 },
    { at: e.endedAt, step: -1 },
  ]);
  events.sort((a, b) => a.at - b.at || a.step - b.step);
  let now = 0;
  let peak = 0;
  for (const e of events) peak = Math.max(peak, (now += e.step));
  return peak;
}

describeWith(["nats", "postgres"], "one account's batch lines on two nodes", (it) => {
  let cluster: Awaited<ReturnType<typeof startTwoNodes>>;
  let nodes: GatewayProcess[];

  beforeAll(async () => {
    cluster = await startTwoNodes({ ttftMs: 300 }, { FREE_RPM: "100000" });
    nodes = cluster.nodes;
  }, SETUP_MS_MAX);
  afterAll(async () => cluster?.stop(), SETUP_MS_MAX);

  async function batchOf(node: GatewayProcess, name: string, lines: number) {
    const { key } = await fundedKey(node, name);
    const client = new OpenAI({ baseURL: `${node.url}/v1`, apiKey: key, maxRetries: 0 });
    const text = Array.from({ length: lines }, (_, i) =>
      JSON.stringify({
        custom_id: `${name}${i}`,
        method: "POST",
        url: "/v1/chat/completions",
        body: { model: "gpt-4o-mini", messages: [{ role: "user", content: `Line ${i}` }], max_tokens: 8 },
      }),
    ).join("\n");
    const file = await client.files.create({ file: await toFile(Buffer.from(text), `${name}.jsonl`), purpose: "batch" });
    const batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    return { client, batch };
  }

  async function completed(client: OpenAI, id: string) {
    let batch = await client.batches.retrieve(id);
    await until(async () => (batch = await client.batches.retrieve(id)).status === "completed", { msMax: 60_000, pollMs: BATCH_POLL_MS });
    return batch;
  }

  /** The upstream calls of one batch's lines (their request ids are `req_<batch>_<line>`). */
  function callsOf(batchId: string): SimLogEntry[] {
    const prefix = `req_${batchId.slice("batch_".length)}_`;
    return cluster.sim.log.entries().filter((e) => e.requestId?.startsWith(prefix));
  }

  it(`runs at most BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX (${BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX}) of an account's lines at once; another account's batch goes on beside it`, async () => {
    const big = await batchOf(nodes[0]!, "big", BIG);
    const small = await batchOf(nodes[1]!, "small", SMALL);
    const [bigDone, smallDone] = await Promise.all([completed(big.client, big.batch.id), completed(small.client, small.batch.id)]);
    expect(bigDone.request_counts).toEqual({ total: BIG, completed: BIG, failed: 0 });
    expect(smallDone.request_counts).toEqual({ total: SMALL, completed: SMALL, failed: 0 });
    const bigCalls = callsOf(big.batch.id);
    const smallCalls = callsOf(small.batch.id);
    expect(bigCalls.length).toBe(BIG);
    expect(smallCalls.length).toBe(SMALL);
    expect(peakOverlap(bigCalls)).toBe(BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX);
    expect(peakOverlap(smallCalls)).toBeLessThanOrEqual(BATCH_ACCOUNT_LINES_IN_FLIGHT_MAX);
    // The second account was not made to wait for the first one's batch to end.
    const smallStarted = Math.min(...smallCalls.map((e) => e.startedAt));
    expect(smallStarted).toBeLessThan(Math.max(...bigCalls.map((e) => e.endedAt)));
  }, 120_000);
});
