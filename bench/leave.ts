/**
 * `bun run bench:leave`: what a client's leave costs, per simulated backend speed.
 *
 *   cut        the time from a client's leave (its abort) to the upstream's socket closing, as the
 *              simulator sees it (its request's abort signal; both clocks are this machine's wall
 *              clock, to the millisecond): p50, p99, max over the leaves; the design's bound is
 *              STREAM_CUT_MS_MAX.
 *   allowance  the output tokens billed beyond what was metered until the cut (GET
 *              /v1/generations/{id}: `ended_early.output_allowance_units`): p50 and max.
 *
 * The simulator (one per speed, on the load CPU with this runner) and an embedded gateway (on the
 * server CPU) are processes of their own. The pool first learns the backend's pace from
 * WARM_STREAMS whole streams; then clients stream gpt-4o-mini on the chat wire, read
 * LEAVE_AFTER_EVENTS events and abort, CONCURRENCY at a time.
 *
 *   bun run bench:leave                  # 200 leaves at each of itl 5, 20, 50 ms
 *   bun run bench:leave -- --leaves 20   # fewer
 */
import { parseArgs } from "node:util";
import { STREAM_CUT_MS_MAX } from "../src/operations/chat/unreported.ts";
import { installExitHandlers, pinSelf } from "./procs.ts";
import { startDarvaze, startSimulator } from "./targets.ts";

const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: { leaves: { type: "string", default: "200" }, itl: { type: "string", default: "5,20,50" } },
});
const LEAVES = Number(values.leaves);
const SPEEDS_MS = values.itl.split(",").map(Number);
const LEAVE_AFTER_EVENTS = 6;
const CONCURRENCY = 8;
const WARM_STREAMS = 5;
/** A settled leave's record may take a moment to be written: how long its lookup is retried. */
const RECORD_WAIT_MS_MAX = 10_000;
/** A gateway's start on the shared machine may take long (measured past 20 s under load). */
const GATEWAY_READY_MS_MAX = 120_000;

installExitHandlers();
pinSelf();

type Gateway = { url: string; key: string };

function streamRequest(gw: Gateway, maxTokens: number, signal?: AbortSignal): Promise<Response> {
  return fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
    body: JSON.stringify({
      model: "gpt-4o-mini",
      stream: true,
      max_tokens: maxTokens,
      messages: [{ role: "user", content: "Tell me about rivers." }],
    }),
    signal,
  });
}

/** One leave: when the client left (Date.now) and the request id. */
async function leave(gw: Gateway): Promise<{ requestId: string; leftAt: number }> {
  const abort = new AbortController();
  const response = await streamRequest(gw, 4_000, abort.signal);
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

async function allowanceOf(gw: Gateway, requestId: string): Promise<number | null> {
  const deadline = performance.now() + RECORD_WAIT_MS_MAX;
  while (performance.now() < deadline) {
    const response = await fetch(`${gw.url}/v1/generations/${requestId}`, { headers: { authorization: `Bearer ${gw.key}` } });
    if (response.ok) {
      const body = (await response.json()) as { ended_early: { output_allowance_units: string } | null };
      return body.ended_early === null ? null : Number(body.ended_early.output_allowance_units);
    }
    await response.body?.cancel();
    await Bun.sleep(100);
  }
  return null;
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
}

/** The leaves at one backend speed: a table row. */
async function measure(itlMs: number): Promise<string> {
  const sim = await startSimulator({ outputTokens: 4000, itlMs });
  const darvaze = await startDarvaze({ mode: "embedded", upstreamUrl: sim.url, readyTimeoutMs: GATEWAY_READY_MS_MAX });
  try {
    const gw = { url: darvaze.url, key: darvaze.key };
    for (let i = 0; i < WARM_STREAMS; i++) await (await streamRequest(gw, 40)).text();
    const done: { requestId: string; leftAt: number }[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < LEAVES) {
          next++;
          done.push(await leave(gw));
        }
      }),
    );
    await Bun.sleep(500);
    const log = (await (await fetch(`${sim.url}/sim/log`)).json()) as { requestId: string | null; aborted: boolean; endedAt: number }[];
    const byId = new Map(log.map((e) => [e.requestId, e]));
    const cuts: number[] = [];
    const allowances: number[] = [];
    for (const { requestId, leftAt } of done) {
      const entry = byId.get(requestId);
      if (entry?.aborted) cuts.push(entry.endedAt - leftAt);
      const allowance = await allowanceOf(gw, requestId);
      if (allowance !== null) allowances.push(allowance);
    }
    cuts.sort((a, b) => a - b);
    allowances.sort((a, b) => a - b);
    return `| ${itlMs} | ${cuts.length} of ${done.length} | ${percentile(cuts, 50)} | ${percentile(cuts, 99)} | ${cuts.at(-1)} | ${percentile(allowances, 50)} | ${allowances.at(-1)} |`;
  } finally {
    await darvaze.stop();
    await sim.stop();
  }
}

const rows: string[] = [];
for (const itlMs of SPEEDS_MS) {
  const row = await measure(itlMs);
  console.log(row);
  rows.push(row);
}
console.log("\n| backend itl (ms) | leaves cut | cut p50 (ms) | p99 | max | allowance p50 (tokens) | max |\n|---|---|---|---|---|---|---|");
for (const row of rows) console.log(row);
console.log(`\nbound: STREAM_CUT_MS_MAX = ${STREAM_CUT_MS_MAX} ms`);
process.exit(0);
