/**
 * `bun run bench/stream-heap.ts [--streams 500] [--mode nats-pg|embedded]`: what one waiting
 * stream holds in the gateway's main thread, from its own heap rather than the resident set
 * (which an allocator's reuse of other threads' memory blurs). The gateway runs with
 * bench/heap-preload.ts; its heap is read after a full collection before the streams and once
 * every stream was answered (the simulator sends a token a second), and the difference is
 * divided by the streams: bytes on the heap, bytes held outside it (`extraMemorySize`: buffers),
 * and the objects by type. Figures go to bench/RESULTS.md by hand, with the machine's load.
 */
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { installExitHandlers, pinSelf } from "./procs.ts";
import { openRawStreams, type RawStreams } from "./raw-streams.ts";
import { servicesDefaults, startDarvaze, startSimulator } from "./targets.ts";
import { countFlag } from "./flags.ts";

const { values: flags } = parseArgs({
  args: process.argv.slice(2),
  strict: true,
  options: { streams: { type: "string", default: "500" }, mode: { type: "string", default: "nats-pg" } },
});
const STREAMS = countFlag(flags.streams, { fallback: 500, max: 8_000 });
const mode = flags.mode === "embedded" ? "embedded" : "nats-pg";
/** Longest wait for every stream's first byte. */
const ANSWER_WAIT_MS_MAX = 90_000;

interface HeapDump {
  heapBytes: number;
  extraBytes: number;
  objects: number;
  types: Record<string, number>;
}

installExitHandlers();
pinSelf();
// A token a second: every stream stays open while the heap is read.
const sim = await startSimulator({ outputTokens: 3600, itlMs: 1000, label: "slow simulator" });
const dumpDir = mkdtempSync(join(tmpdir(), "darvaze-heap-"));
const gateway = await startDarvaze({
  mode,
  upstreamUrl: sim.url,
  readyTimeoutMs: 90_000,
  ...(mode === "nats-pg" ? { services: servicesDefaults } : {}),
  bunFlags: ["--preload", join(import.meta.dir, "heap-preload.ts")],
  env: { HEAP_DUMP_DIR: dumpDir },
});

let dumps = 0;
async function dump(): Promise<HeapDump> {
  const file = join(dumpDir, `heap-${gateway.pid}-${dumps++}.json`);
  process.kill(gateway.pid!, "SIGUSR2");
  while (!existsSync(file)) await Bun.sleep(100);
  await Bun.sleep(200); // written whole
  return JSON.parse(readFileSync(file, "utf8")) as HeapDump;
}

const opened: RawStreams[] = [];

try {
  // A few streams first, so that what every stream's code loads once is in the baseline.
  const warm = await openRawStreams(gateway, 20);
  opened.push(warm);
  while (warm.answered() < 20) await Bun.sleep(100);
  warm.close();
  await Bun.sleep(1_000);
  const before = await dump();
  const openedMs = performance.now();
  const streams = await openRawStreams(gateway, STREAMS);
  opened.push(streams);
  while (streams.answered() < STREAMS && performance.now() - openedMs < ANSWER_WAIT_MS_MAX) await Bun.sleep(250);
  const answeredS = (performance.now() - openedMs) / 1000;
  await Bun.sleep(2_000); // each stream past its first token
  const after = await dump();
  const kib = (bytes: number) => (bytes / STREAMS / 1024).toFixed(1);
  console.log(
    `${mode}: ${STREAMS} streams, statuses ${JSON.stringify(Object.fromEntries(streams.statuses))} in ${answeredS.toFixed(1)} s; load average ${loadavg()[0]!.toFixed(1)}`,
  );
  console.log(
    `a stream holds: heap ${kib(after.heapBytes - before.heapBytes)} KiB, of which outside the engine's cells (buffers) ${kib(after.extraBytes - before.extraBytes)} KiB; ${((after.objects - before.objects) / STREAMS).toFixed(0)} objects`,
  );
  const perStream = Object.keys(after.types)
    .map((type) => [type, ((after.types[type] ?? 0) - (before.types[type] ?? 0)) / STREAMS] as const)
    .filter(([, n]) => n >= 0.5)
    .sort((a, b) => b[1] - a[1]);
  for (const [type, n] of perStream) console.log(`  ${n.toFixed(1).padStart(6)} ${type}`);
} finally {
  for (const streams of opened) streams.close();
  await gateway.stop();
  await sim.stop();
}
process.exit(0);
