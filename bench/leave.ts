/**
 * `bun run bench:leave`: what a client's leave costs, per simulated backend speed.
 *
 *   cut        the time from a client's leave (its abort) to the upstream's socket closing, as the
 *              simulator sees it (its request's abort signal): p50, p99, max over the leaves;
 *              the design's bound is STREAM_CUT_MS_MAX.
 *   allowance  the output tokens billed beyond what was metered until the cut (the usage record's
 *              output_allowance_units): p50 and max; and the tokens the simulator generated that
 *              the gateway had not read (billed by the allowance), for comparison.
 *
 * One process (an embedded gateway in front of its simulator); clients stream gpt-4o-mini on the
 * chat wire, read LEAVE_AFTER_EVENTS events and abort, CONCURRENCY at a time.
 *
 *   bun run bench:leave                  # 200 leaves at each of itl 5, 20, 50 ms
 *   bun run bench:leave -- --leaves 20   # fewer
 */
import { parseArgs } from "node:util";
import { sql } from "drizzle-orm";
import { STREAM_CUT_MS_MAX } from "../src/operations/chat/unreported.ts";
import { startTestGateway } from "../test/helpers.ts";

const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: { leaves: { type: "string", default: "200" }, itl: { type: "string", default: "5,20,50" } },
});
const LEAVES = Number(values.leaves);
const SPEEDS_MS = values.itl.split(",").map(Number);
const LEAVE_AFTER_EVENTS = 6;
const CONCURRENCY = 8;

const t = await startTestGateway();
const sim = t.sim!;
const funded = await t.fundedKey(10_000_000);

/** One leave: its cut time (ms, the simulator's close after the abort), and the request id. */
async function leave(): Promise<{ requestId: string; leftAt: number }> {
  const abort = new AbortController();
  const response = await fetch(`${t.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${funded.key}`, "content-type": "application/json" },
    body: JSON.stringify({
      model: "gpt-4o-mini",
      stream: true,
      max_tokens: 4_000,
      messages: [{ role: "user", content: "Tell me about rivers." }],
    }),
    signal: abort.signal,
  });
  const requestId = response.headers.get("x-request-id")!;
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  while ((text.match(/^data: /gm)?.length ?? 0) < LEAVE_AFTER_EVENTS) {
    const read = await reader.read();
    if (read.done) break;
    text += decoder.decode(read.value, { stream: true });
  }
  const leftAt = Date.now();
  abort.abort();
  await reader.cancel().catch(() => {});
  return { requestId, leftAt };
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
}

async function allowanceOf(requestId: string): Promise<number | null> {
  const [row] = await t.gw.deps.db.rows<{ a: number | null }>(
    sql`SELECT output_allowance_units AS a FROM usage_records WHERE request_id = ${requestId}`,
  );
  return row ? row.a : null;
}

const rows: string[] = [];
for (const itlMs of SPEEDS_MS) {
  Object.assign(sim.options, { itlMs, ttftMs: 0, outputTokens: 4_000 });
  const done: { requestId: string; leftAt: number }[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < LEAVES) {
        next++;
        done.push(await leave());
      }
    }),
  );
  await Bun.sleep(500);
  await t.gw.deps.writer.flush();
  const cuts: number[] = [];
  const allowances: number[] = [];
  for (const { requestId, leftAt } of done) {
    const entry = sim.log.byRequestId(requestId)[0];
    if (entry?.aborted) cuts.push(entry.endedAt - leftAt);
    const allowance = await allowanceOf(requestId);
    if (allowance !== null) allowances.push(allowance);
  }
  cuts.sort((a, b) => a - b);
  allowances.sort((a, b) => a - b);
  const row = `| ${itlMs} | ${cuts.length} of ${done.length} | ${percentile(cuts, 50)} | ${percentile(cuts, 99)} | ${cuts.at(-1)} | ${percentile(allowances, 50)} | ${allowances.at(-1)} |`;
  console.log(row);
  rows.push(row);
}
console.log(`\n| backend itl (ms) | leaves cut | cut p50 (ms) | p99 | max | allowance p50 (tokens) | max |\n|---|---|---|---|---|---|---|`);
for (const row of rows) console.log(row);
console.log(`\nbound: STREAM_CUT_MS_MAX = ${STREAM_CUT_MS_MAX} ms`);
await t.stop();
process.exit(0);
