/**
 * A node killed with -9 while it runs batch lines: the work queue gives its lines to the other
 * node once its ack wait passes, the lines it had claimed run again, and the batch completes
 * with every line once in its output; each line is billed once (one usage record per line's
 * request id) and the wallet drops by the batch's cost.
 */
import { BATCH_POLL_MS } from "./batchPoll.ts";
import { afterAll, beforeAll, expect } from "bun:test";
import { sql } from "drizzle-orm";
import OpenAI, { toFile } from "openai";
import { openPostgres } from "../src/db/client.ts";
import { BATCH_ACK_WAIT_MS } from "../src/batches/queue.ts";
import { ADMIN_TOKEN, SETUP_MS_MAX } from "./helpers.ts";
import { fundedKey, type GatewayProcess, startTwoNodes } from "./processes.ts";
import { describeWith } from "./services.ts";
import { until } from "./until.ts";

const LINES = 12;

/** The batch lines a node runs now, by its metrics. */
async function linesRunning(node: GatewayProcess): Promise<number> {
  const text = await (await fetch(`${node.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).text();
  return Number(/^darvaze_batch_lines_in_flight (\d+)/m.exec(text)?.[1] ?? 0);
}
/** The dead node's lines wait out its ack wait, then run on the other node. */
const CONVERGE_MS_MAX = BATCH_ACK_WAIT_MS + 30_000;

describeWith(["nats", "postgres"], "a node killed mid-batch", (it) => {
  let cluster: Awaited<ReturnType<typeof startTwoNodes>>;
  let nodes: GatewayProcess[];

  beforeAll(async () => {
    // The test polls faster than a client need: its polls are free but rated (FREE_RPM).
    cluster = await startTwoNodes({ ttftMs: 500 }, { FREE_RPM: "100000" });
    nodes = cluster.nodes;
  }, SETUP_MS_MAX);
  afterAll(async () => cluster?.stop(), SETUP_MS_MAX);

  it(
    "loses no line and bills each once",
    async () => {
      const { accountId, key } = await fundedKey(nodes[0]!, "batches-kill");
      const client = new OpenAI({ baseURL: `${nodes[0]!.url}/v1`, apiKey: key, maxRetries: 0 });
      const lines = Array.from({ length: LINES }, (_, i) =>
        JSON.stringify({
          custom_id: `k${i}`,
          method: "POST",
          url: "/v1/chat/completions",
          body: { model: "gpt-4o-mini", messages: [{ role: "user", content: `Line ${i}` }], max_tokens: 8 },
        }),
      );
      const file = await client.files.create({ file: await toFile(Buffer.from(lines.join("\n")), "kill.jsonl"), purpose: "batch" });
      const db = await openPostgres(cluster.databaseUrl);
      try {
        const [wallet] = await db.rows<{ balance: string }>(
          sql`SELECT balance_micro::text AS balance FROM wallets WHERE account_id = ${accountId}`,
        );
        const created = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
        // Kill the second node while it runs a line (the account's lines run two at a time on the whole cluster).
        await until(async () => (await linesRunning(nodes[1]!)) >= 1, 20_000);
        await nodes[1]!.kill("SIGKILL");
        let batch = created;
        await until(async () => (batch = await client.batches.retrieve(created.id)).status === "completed", {
          msMax: CONVERGE_MS_MAX,
          pollMs: BATCH_POLL_MS,
        });
        expect(batch.request_counts).toEqual({ total: LINES, completed: LINES, failed: 0 });
        const output = (await (await client.files.content(batch.output_file_id!)).text()).trim().split("\n");
        expect(output.map((l) => JSON.parse(l).custom_id).sort()).toEqual(lines.map((l) => JSON.parse(l).custom_id).sort());
        const cost = BigInt((batch as unknown as { cost_micro_toman: string }).cost_micro_toman);
        const prefix = `req_${created.id.slice("batch_".length)}_%`;
        let billed: { n: number; total: string } | undefined;
        await until(async () => {
          [billed] = await db.rows<{ n: number; total: string }>(
            sql`SELECT count(*)::int AS n, coalesce(sum(billed_micro), 0)::text AS total FROM usage_records WHERE request_id LIKE ${prefix}`,
          );
          return billed?.n === LINES;
        }, 20_000);
        expect(BigInt(billed!.total)).toBe(cost);
        const [after] = await db.rows<{ balance: string }>(
          sql`SELECT balance_micro::text AS balance FROM wallets WHERE account_id = ${accountId}`,
        );
        expect(BigInt(wallet!.balance) - BigInt(after!.balance)).toBe(cost);
      } finally {
        await db.close();
      }
    },
    CONVERGE_MS_MAX + 30_000,
  );
});
