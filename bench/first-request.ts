/**
 * `bun run bench/first-request.ts [--rounds 3] [--nats-pg]`: what a process's first paid request
 * costs, and what warming the process first would save. Each round starts the gateway fresh once
 * per case, waits a second, and times the bench key's first three chat requests (one client, one
 * after another, on the load CPU; the gateway on its own CPU as in `bun run bench`):
 *
 *   cold             nothing sent before: the newcomer's first request
 *   after a refusal  one request with an unknown key first (401: routing, the key's lookup, the
 *                    refusal's reply and record)
 *   after another    a key of another funded account sends one chat and one stream first: the
 *   account          whole paid path run once in this process, on a lease of its own; what a
 *                    warm-up at start on an account of the gateway's own would give
 *   after the same   another key of the bench key's account does the same: its lease is then
 *   account          open too, so only the key's own first use is left (the floor)
 *
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

const CASES = ["cold", "after a refusal", "after another account", "after the same account"] as const;
type Case = (typeof CASES)[number];
/** After /health answers, before the first request: the start-up's own background work settles. */
const SETTLE_MS = 1_000;
/** The bench key's requests timed in each case. */
const TIMED_REQUESTS = 3;

/** One chat request's wall time in ms; anything but the expected status ends the run (a wrong case measures nothing). */
async function chatMs(url: string, key: string, options: { stream?: boolean; status?: number } = {}): Promise<number> {
  const startedMs = performance.now();
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    body: benchChatBody({ stream: options.stream }),
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
  });
  await response.text();
  const expected = options.status ?? 200;
  if (response.status !== expected) throw new Error(`chat answered ${response.status}, expected ${expected}`);
  return performance.now() - startedMs;
}

/**
 * A well-formed key no one holds: `key` with its last character changed (still base62, the same
 * length), so the refusal goes through the key's hash and its lookup, not the format check alone.
 */
function unknownKeyLike(key: string): string {
  return key.slice(0, -1) + (key.endsWith("a") ? "b" : "a");
}

/** What is sent before the bench key's first request in each case. */
async function before(target: Target, which: Case): Promise<void> {
  if (which === "after a refusal") await chatMs(target.url, unknownKeyLike(target.key), { status: 401 });
  if (which === "after another account") {
    const other = await fundedKey(target.url, target.adminToken!);
    await chatMs(target.url, other.key);
    await chatMs(target.url, other.key, { stream: true });
  }
  if (which === "after the same account") {
    const [sibling] = await target.createKeys!(1);
    await chatMs(target.url, sibling!);
    await chatMs(target.url, sibling!, { stream: true });
  }
}

await runBenchmark({ name: "bench/first-request.ts", runSMax: 1_800 }, async () => {
  const rounds = countFlag(flags.rounds, { fallback: 3, max: 20 });
  const mode = await askedMode(flags["nats-pg"]);
  const sim = await startSimulator({ outputTokens: 16 });
  const timed = new Map<Case, number[][]>(CASES.map((c) => [c, []]));
  try {
    for (let round = 1; round <= rounds; round++) {
      for (const which of CASES) {
        const target = await startDarvaze({ ...mode, upstreamUrl: sim.url });
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
    "| Case | first request, median (range) ms | second, median ms | third, median ms |",
    "|---|---|---:|---:|",
  ];
  for (const which of CASES) {
    const runs = timed.get(which)!;
    const column = (i: number) => runs.map((times) => times[i]!).sort((a, b) => a - b);
    const first = column(0);
    lines.push(
      `| ${which} | ${percentile(first, 0.5).toFixed(1)} (${first[0]!.toFixed(1)}–${first.at(-1)!.toFixed(1)}) | ${percentile(column(1), 0.5).toFixed(1)} | ${percentile(column(2), 0.5).toFixed(1)} |`,
    );
  }
  console.log(lines.join("\n"));
});
