/**
 * How fast 100,000 levels of JSON nesting are refused: bodies nesting arrays 100,000 deep in a
 * tool's parameters, sent one after another to /v1/chat/completions, /v1/responses and
 * /v1/messages over HTTP and to chat.completions over NATS; each refusal's time (p50, p95, max)
 * and its status. The gateway runs as its own process on PostgreSQL and NATS.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test NATS_URL=nats://127.0.0.1:4222 \
 *     bun run bench/deep-json.ts [--requests 50]
 */
import { parseArgs } from "node:util";
import { connect } from "nats";
import { InternalClient, InternalError } from "../src/internal/client.ts";
import { startSimulator } from "../src/sim/server.ts";
import { freshDatabase } from "../test/helpers.ts";
import { adminOf, clusterEnv, spawnGateway } from "../test/processes.ts";

const { values } = parseArgs({ options: { requests: { type: "string", default: "50" } } });
const REQUESTS = Number(values.requests);
const LEVELS = 100_000;
/** Untimed requests before each row's: the first of a route compiles its code. */
const WARMUP_REQUESTS = 5;
const NESTED = `${"[".repeat(LEVELS)}${"]".repeat(LEVELS)}`;
const HELLO = [{ role: "user", content: "Hello" }];
const deep = (template: Record<string, unknown>) => JSON.stringify(template).replace('"@NESTED@"', NESTED);
const BODIES: [string, string][] = [
  [
    "/v1/chat/completions",
    deep({ model: "gpt-4o-mini", messages: HELLO, tools: [{ type: "function", function: { name: "f", parameters: "@NESTED@" } }] }),
  ],
  ["/v1/responses", deep({ model: "gpt-4o-mini", input: "Hello", tools: [{ type: "function", name: "f", parameters: "@NESTED@" }] })],
  ["/v1/messages", deep({ model: "gpt-4o-mini", max_tokens: 16, messages: HELLO, tools: [{ name: "f", input_schema: "@NESTED@" }] })],
];

const database = await freshDatabase();
if (!database || !process.env.NATS_URL) throw new Error("set DATABASE_URL and NATS_URL: the gateway runs on PostgreSQL and NATS here");
const sim = await startSimulator({ ttftMs: 0, itlMs: 0, outputTokens: 16 });
const env = clusterEnv(database.url, sim);
const gateway = await spawnGateway(env);
const nc = await connect({ servers: process.env.NATS_URL });

const adminCall = adminOf(gateway);
const admin = (path: string, body: unknown): Promise<Record<string, string>> => adminCall("POST", path, body);

/** Times `REQUESTS` calls of `send`, which answers the status it got. */
async function timed(label: string, send: () => Promise<number>): Promise<string> {
  for (let i = 0; i < WARMUP_REQUESTS; i++) await send();
  const ms: number[] = [];
  const statuses = new Map<number, number>();
  for (let i = 0; i < REQUESTS; i++) {
    const started = performance.now();
    const status = await send();
    ms.push(performance.now() - started);
    statuses.set(status, (statuses.get(status) ?? 0) + 1);
  }
  ms.sort((a, b) => a - b);
  const at = (q: number) => ms[Math.min(ms.length - 1, Math.floor(q * ms.length))]!.toFixed(1);
  const answered = [...statuses].map(([status, n]) => `${n} × ${status}`).join(", ");
  return `| ${label} | ${answered} | ${at(0.5)} | ${at(0.95)} | ${ms.at(-1)!.toFixed(1)} |`;
}

try {
  const account = await admin("/admin/accounts", { name: "deep" });
  await admin(`/admin/accounts/${account.id}/topups`, { amount_toman: 1000, reference: "bench-deep" });
  const key = (await admin(`/admin/accounts/${account.id}/keys`, { name: "deep" })).key!;
  const rows: string[] = [];
  for (const [path, body] of BODIES) {
    rows.push(
      await timed(`HTTP ${path}`, async () => {
        const response = await fetch(gateway.url + path, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body,
        });
        await response.arrayBuffer();
        return response.status;
      }),
    );
  }
  const internal = new InternalClient(nc, { apiKey: key, prefix: env.DARVAZE_SUBJECT_PREFIX });
  const natsBody = new TextEncoder().encode(BODIES[0]![1]);
  rows.push(
    await timed("NATS chat.completions", () =>
      internal.request("chat.completions", natsBody).then(
        (reply) => reply.status,
        (error: unknown) => (error instanceof InternalError ? error.status : 0),
      ),
    ),
  );
  console.log(
    [
      `${REQUESTS} requests per row (after ${WARMUP_REQUESTS} untimed), one after another, ${LEVELS.toLocaleString("en")} levels (${(NESTED.length / 1024).toFixed(0)} KiB of brackets)`,
      "",
      "| Where | Answered | p50 ms | p95 ms | max ms |",
      "|---|---|---:|---:|---:|",
      ...rows,
    ].join("\n"),
  );
} finally {
  await nc.close();
  await gateway.kill();
  await sim.stop();
  await database.drop();
}
