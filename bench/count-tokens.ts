/**
 * What one account's token counting costs another account's requests: loops of 4 MiB
 * POST /v1/messages/count_tokens bodies from one key while another account's key sends chat
 * requests one after another. Reports the other account's chat latency alone (baseline) and
 * under the counting (p50/p95/p99/max), and what the counting key was answered (200, 429).
 *
 * The gateway runs as its own process (`bun run src/main.ts` in --gateway-dir, this checkout by
 * default) on PostgreSQL and NATS; the simulator and the load run here.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test NATS_URL=nats://127.0.0.1:4222 \
 *     bun run bench/count-tokens.ts [--loops 3] [--seconds 60] [--baseline-seconds 10] [--gateway-dir DIR]
 */
import { parseArgs } from "node:util";
import { startSimulator } from "../src/sim/server.ts";
import { freshDatabase } from "../test/helpers.ts";
import { adminOf, clusterEnv, spawnGateway } from "../test/processes.ts";

const { values } = parseArgs({
  options: {
    loops: { type: "string", default: "3" },
    seconds: { type: "string", default: "60" },
    "baseline-seconds": { type: "string", default: "10" },
    "body-mib": { type: "string", default: "4" },
    "gateway-dir": { type: "string" },
  },
});
const LOOPS = Number(values.loops);
const SECONDS = Number(values.seconds);
const BASELINE_SECONDS = Number(values["baseline-seconds"]);
const BODY_BYTES = Number(values["body-mib"]) * 1024 * 1024;
/** A chat request slower than this counts as timed out (the issue's client gave up at 5 s). */
const CHAT_TIMEOUT_MS = 5_000;

/** Prose-like text of `bytes` bytes: words drawn from a fixed random vocabulary (seeded). */
function words(bytes: number): string {
  let seed = 7;
  const random = () => {
    seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
    return seed / 2_147_483_648;
  };
  const letters = "abcdefghijklmnopqrstuvwxyz";
  const vocabulary = Array.from({ length: 5_000 }, () =>
    Array.from({ length: 2 + Math.floor(random() * 9) }, () => letters[Math.floor(random() * 26)]).join(""),
  );
  const parts: string[] = [];
  let length = 0;
  while (length < bytes) {
    const word = vocabulary[Math.floor(random() * vocabulary.length)]!;
    parts.push(word);
    length += word.length + 1;
  }
  return parts.join(" ").slice(0, bytes);
}

function quantiles(samplesMs: number[]): { n: number; p50: number; p95: number; p99: number; max: number } {
  const sorted = [...samplesMs].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
  return { n: sorted.length, p50: at(0.5), p95: at(0.95), p99: at(0.99), max: sorted.at(-1) ?? Number.NaN };
}

const database = await freshDatabase();
if (!database) throw new Error("set DATABASE_URL (and NATS_URL): the gateway runs on PostgreSQL and NATS here");
const sim = await startSimulator({ ttftMs: 0, itlMs: 0, outputTokens: 16 });
const env = clusterEnv(database.url, sim, { LOG_LEVEL: "warn" });
const gateway = await spawnGateway(env, values["gateway-dir"]);

const adminCall = adminOf(gateway);
const admin = (path: string, body: unknown): Promise<Record<string, string>> => adminCall("POST", path, body);

async function fundedKey(name: string): Promise<string> {
  const account = await admin("/admin/accounts", { name });
  await admin(`/admin/accounts/${account.id}/topups`, { amount_toman: 1_000_000, reference: `bench-${name}` });
  return (await admin(`/admin/accounts/${account.id}/keys`, { name, concurrency_max: 64 })).key!;
}

const counter = await fundedKey("counter");
const other = await fundedKey("other");
const countBody = JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: words(BODY_BYTES) }] });
const chatBody = JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hello, world!" }], max_tokens: 16 });

/** The other account's chat, one request after another until `untilMs`: latencies and failures. */
async function chatLoop(untilMs: number): Promise<{ latenciesMs: number[]; failed: number }> {
  const latenciesMs: number[] = [];
  let failed = 0;
  while (performance.now() < untilMs) {
    const started = performance.now();
    try {
      const response = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${other}`, "content-type": "application/json" },
        body: chatBody,
        signal: AbortSignal.timeout(CHAT_TIMEOUT_MS),
      });
      await response.arrayBuffer();
      if (response.status !== 200) failed++;
    } catch {
      failed++;
    }
    latenciesMs.push(performance.now() - started);
  }
  return { latenciesMs, failed };
}

/** One counting loop until `untilMs`: replies by status, and the 200s' latencies. */
async function countLoop(untilMs: number, statuses: Map<number, number>, okMs: number[]): Promise<void> {
  while (performance.now() < untilMs) {
    const started = performance.now();
    const response = await fetch(`${gateway.url}/v1/messages/count_tokens`, {
      method: "POST",
      headers: { "x-api-key": counter, "content-type": "application/json" },
      body: countBody,
    });
    await response.arrayBuffer();
    statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
    if (response.status === 200) okMs.push(performance.now() - started);
    // A refused count is retried at once, as a hostile client would (a polite one waits `retry-after`).
  }
}

try {
  await chatLoop(performance.now() + 1_000); // warm-up
  const baseline = await chatLoop(performance.now() + BASELINE_SECONDS * 1000);
  const statuses = new Map<number, number>();
  const countMs: number[] = [];
  const untilMs = performance.now() + SECONDS * 1000;
  const [loaded] = await Promise.all([chatLoop(untilMs), ...Array.from({ length: LOOPS }, () => countLoop(untilMs, statuses, countMs))]);
  const row = (label: string, r: { latenciesMs: number[]; failed: number }) => {
    const q = quantiles(r.latenciesMs);
    return `| ${label} | ${q.n} | ${q.p50.toFixed(1)} | ${q.p95.toFixed(1)} | ${q.p99.toFixed(1)} | ${q.max.toFixed(1)} | ${r.failed} |`;
  };
  const counted = quantiles(countMs);
  console.log(
    [
      `Gateway: ${values["gateway-dir"] ?? "this checkout"}; ${LOOPS} counting loops of ${values["body-mib"]} MiB bodies for ${SECONDS} s`,
      "",
      "| Other account's chat | requests | p50 ms | p95 ms | p99 ms | max ms | failed (non-200 or > 5 s) |",
      "|---|---:|---:|---:|---:|---:|---:|",
      row(`alone (${BASELINE_SECONDS} s)`, baseline),
      row(`beside the counting (${SECONDS} s)`, loaded),
      "",
      `Counting key's replies: ${[...statuses].map(([status, n]) => `${n} × ${status}`).join(", ")}; a 200 took p50 ${counted.p50.toFixed(0)} ms, max ${counted.max.toFixed(0)} ms.`,
    ].join("\n"),
  );
} finally {
  await gateway.kill();
  await sim.stop();
  await database.drop();
}
