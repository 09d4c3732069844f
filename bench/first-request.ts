/**
 * `bun run bench/first-request.ts [--rounds 3] [--nats-pg]`: what a process's first paid request
 * costs, with the start-up rehearsal (START_REHEARSAL, src/rehearsal.ts) and without. Each round
 * starts the gateway fresh once per case, waits a second, and times the bench key's first three
 * chat requests (one client, one after another, on the load CPU; the gateway on its own CPU as in
 * `bun run bench`); and how long the start took (until /health answered):
 *
 *   not rehearsed        START_REHEARSAL=false, nothing sent before: the first request as it was
 *   rehearsed            the default: the node served itself a chat and a stream before its port opened
 *   not rehearsed, after a key of another funded account sends one chat and one stream over HTTP,
 *   another account,     then a pause as long as the settling one: the whole paid path run once in
 *   paused               this process, then idle as a node is before its first customer (what the
 *                        rehearsal aims at)
 *   not rehearsed, after the same, without the pause: the process busy the moment before (the floor)
 *   another account
 *
 * What is left after the rehearsal is the new account's own first reads and lease (its key, its
 * limits, its wallet: database round trips), not the process's first runs. A request with an
 * unknown key through the listening app after the rehearsal saved nothing measurable (17.4 against
 * 15.3 ms, 16.9 against 16.5 in two runs of 3 and 5 rounds), so the rehearsal sends none.
 * The cases alternate within a round, so each is measured on the same machine state.
 */
import { parseArgs } from "node:util";
import { countFlag } from "./flags.ts";
import { benchChatBody, percentile } from "./measurement.ts";
import { runBenchmark } from "./procs.ts";
import { askedMode, fundedKey, startDarvaze, startSimulator, type Target } from "./targets.ts";

const { values: flags } = parseArgs({
  args: process.argv.slice(2),
  strict: true,
  options: {
    rounds: { type: "string", default: "3" },
    "nats-pg": { type: "boolean", default: false },
  },
});

const CASES = [
  "not rehearsed",
  "rehearsed",
  "not rehearsed, after another account, paused",
  "not rehearsed, after another account",
] as const;
type Case = (typeof CASES)[number];
/** After /health answers, before the first request: the start-up's own background work settles. */
const SETTLE_MS = 1_000;
/** The bench key's requests timed in each case. */
const TIMED_REQUESTS = 3;

/** One chat request's wall time in ms; anything but a 200 ends the run (a wrong case measures nothing). */
async function chatMs(url: string, key: string, options: { stream?: boolean } = {}): Promise<number> {
  const startedMs = performance.now();
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    body: benchChatBody({ stream: options.stream }),
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
  });
  await response.text();
  if (response.status !== 200) throw new Error(`chat answered ${response.status}, expected 200`);
  return performance.now() - startedMs;
}

/** What is sent before the bench key's first request in each case. */
async function before(target: Target, which: Case): Promise<void> {
  if (which.startsWith("not rehearsed, after another account")) {
    const other = await fundedKey(target.url, target.adminToken!);
    await chatMs(target.url, other.key);
    await chatMs(target.url, other.key, { stream: true });
    if (which.endsWith("paused")) await Bun.sleep(SETTLE_MS);
  }
}

await runBenchmark({ name: "bench/first-request.ts", runSMax: 1_800 }, async () => {
  const rounds = countFlag(flags.rounds, { fallback: 3, max: 20 });
  const mode = await askedMode(flags["nats-pg"]);
  const sim = await startSimulator({ outputTokens: 16 });
  const timed = new Map<Case, number[][]>(CASES.map((c) => [c, []]));
  const starts = new Map<Case, number[]>(CASES.map((c) => [c, []]));
  try {
    for (let round = 1; round <= rounds; round++) {
      for (const which of CASES) {
        const startingMs = performance.now();
        const rehearsed = which.startsWith("rehearsed");
        const target = await startDarvaze({ ...mode, upstreamUrl: sim.url, env: { START_REHEARSAL: String(rehearsed) } });
        starts.get(which)!.push(performance.now() - startingMs);
        try {
          await Bun.sleep(SETTLE_MS);
          await before(target, which);
          const times: number[] = [];
          for (let i = 0; i < TIMED_REQUESTS; i++) times.push(await chatMs(target.url, target.key));
          timed.get(which)!.push(times);
          console.error(`[round ${round}] ${which}: ${times.map((t) => t.toFixed(1)).join(" / ")} ms`);
        } finally {
          await target.stop();
        }
      }
    }
  } finally {
    await sim.stop();
  }
  const lines = [
    `First requests of a fresh process, ${mode.mode}, ${rounds} rounds (\`bun run bench/first-request.ts --rounds ${rounds}${flags["nats-pg"] ? " --nats-pg" : ""}\`):`,
    "",
    "| Case | first request, median (range) ms | second, median ms | third, median ms | start, median ms |",
    "|---|---|---:|---:|---:|",
  ];
  for (const which of CASES) {
    const runs = timed.get(which)!;
    const column = (i: number) => runs.map((times) => times[i]!).sort((a, b) => a - b);
    const first = column(0);
    lines.push(
      `| ${which} | ${percentile(first, 0.5).toFixed(1)} (${first[0]!.toFixed(1)}–${first.at(-1)!.toFixed(1)}) | ${percentile(column(1), 0.5).toFixed(1)} | ${percentile(column(2), 0.5).toFixed(1)} | ${percentile(
        starts.get(which)!.sort((a, b) => a - b),
        0.5,
      ).toFixed(0)} |`,
    );
  }
  console.log(lines.join("\n"));
});
