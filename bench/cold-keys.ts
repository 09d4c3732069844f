/**
 * Keys' first requests against their later ones: `--keys` new keys of one funded account, each
 * sent one chat request (cold: the key's first use on the gateway), then each sent another
 * (warm), both passes at `--concurrency` clients taking the keys in turn, on the load CPU. Then
 * the gateway's keys are left idle past KEY_IDLE_MS while one key of the account keeps sending,
 * and each key is sent a third request (its first after an idle spell). Prints one table.
 *
 *   bun run bench/cold-keys.ts [--keys 2000] [--concurrency 64] [--nats-pg] [--gateway-root <checkout>] [--profile]
 */
import { join } from "node:path";
import { parseArgs } from "node:util";
import { benchChatBody, percentile } from "./measurement.ts";
import { runBenchmark } from "./procs.ts";
import { askedMode, ROOT, startDarvaze, startSimulator, type Target } from "./targets.ts";

const { values: flags } = parseArgs({
  args: process.argv.slice(2),
  strict: true,
  options: {
    keys: { type: "string", default: "2000" },
    concurrency: { type: "string", default: "64" },
    "nats-pg": { type: "boolean", default: false },
    "gateway-root": { type: "string" },
    /** The gateway under `bun --cpu-prof`, its profile written to bench/out/. */
    profile: { type: "boolean", default: false },
  },
});

const KEYS_MAX = 20_000;
const CONCURRENCY_MAX = 1_024;
const keyCount = Math.min(KEYS_MAX, Math.max(1, Number.parseInt(flags.keys!, 10) || 1));
const concurrency = Math.min(CONCURRENCY_MAX, Math.max(1, Number.parseInt(flags.concurrency!, 10) || 1));
/** The gateway's KEY_IDLE_MS here: short, so that the idle pass does not wait 30 s. */
const KEY_IDLE_MS = 2_000;
const REQUEST_TIMEOUT_MS = 30_000;
const body = benchChatBody();

interface Pass {
  name: string;
  requests: number;
  errors: number;
  firstError?: string;
  elapsedMs: number;
  latenciesMs: number[];
}

async function send(target: Target, key: string): Promise<{ ok: boolean; ms: number; error?: string }> {
  const started = performance.now();
  try {
    const response = await fetch(`${target.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body,
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
    const text = await response.text();
    return {
      ok: response.ok,
      ms: performance.now() - started,
      ...(response.ok ? {} : { error: `HTTP ${response.status}: ${text.slice(0, 160)}` }),
    };
  } catch (error) {
    return { ok: false, ms: performance.now() - started, error: (error as Error).message };
  }
}

/** Each key once, `concurrency` at a time, in order. */
async function pass(name: string, target: Target, keys: string[]): Promise<Pass> {
  const latenciesMs: number[] = [];
  let errors = 0;
  let firstError: string | undefined;
  let next = 0;
  const started = performance.now();
  const client = async () => {
    while (next < keys.length) {
      const reply = await send(target, keys[next++]!);
      latenciesMs.push(reply.ms);
      if (!reply.ok) {
        errors++;
        firstError ??= reply.error;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, keys.length) }, client));
  return {
    name,
    requests: keys.length,
    errors,
    ...(firstError ? { firstError } : {}),
    elapsedMs: performance.now() - started,
    latenciesMs,
  };
}

function row(p: Pass): string {
  const sorted = Float64Array.from(p.latenciesMs).sort();
  const ms = (q: number) => percentile(sorted, q).toFixed(2);
  const rps = Math.round(((p.requests - p.errors) * 1000) / p.elapsedMs);
  return `| ${p.name} | ${p.requests} | ${rps.toLocaleString("en")} | ${ms(0.5)} | ${ms(0.99)} | ${(sorted[sorted.length - 1] ?? 0).toFixed(2)} | ${p.errors} |`;
}

await runBenchmark({ name: "bench:cold-keys", runSMax: 900 }, async () => {
  const asked = await askedMode(flags["nats-pg"]);
  const mode = asked.mode;
  const sim = await startSimulator({ outputTokens: 64 });
  const gateway = await startDarvaze({
    ...asked,
    upstreamUrl: sim.url,
    env: { KEY_IDLE_MS: String(KEY_IDLE_MS) },
    ...(flags["gateway-root"] ? { root: flags["gateway-root"] } : {}),
    ...(flags.profile ? { cpuProfile: { dir: join(ROOT, "bench/out"), name: `cold-keys-${Date.now()}` } } : {}),
  });
  try {
    // The gateway's own hot path warmed first, on its ready key, so that the first pass measures keys, not the compiler.
    await pass(
      "warm-up",
      gateway,
      Array.from({ length: 5_000 }, () => gateway.key),
    );
    console.error(`creating ${keyCount} keys …`);
    const keys = await gateway.createKeys!(keyCount);
    const passes: Pass[] = [];
    passes.push(await pass("first request of each key (cold)", gateway, keys));
    passes.push(await pass("second request of each key (warm)", gateway, keys));
    // Idle spell: the account stays in use through its ready key while every other key rests.
    const idleUntil = performance.now() + KEY_IDLE_MS * 3;
    while (performance.now() < idleUntil)
      await pass(
        "keep-alive",
        gateway,
        Array.from({ length: 64 }, () => gateway.key),
      );
    passes.push(await pass(`first request after ${(KEY_IDLE_MS * 3) / 1000} s idle (account in use)`, gateway, keys));
    passes.push(
      await pass(
        "the account's one hot key, as many requests",
        gateway,
        Array.from({ length: keys.length }, () => gateway.key),
      ),
    );
    console.log(
      `\n${mode}, ${keyCount} keys of one account, ${concurrency} clients, chat max_tokens 16${flags["gateway-root"] ? `, gateway from ${flags["gateway-root"]}` : ""}\n`,
    );
    console.log("| Pass | requests | req/s | p50 ms | p99 ms | max ms | errors |\n|---|---:|---:|---:|---:|---:|---:|");
    for (const p of passes) console.log(row(p));
    for (const p of passes) if (p.firstError) console.log(`\n${p.name}: first error ${p.firstError}`);
  } finally {
    await gateway.stop();
    await sim.stop();
  }
});
