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
/** Streams connected at once. */
const OPEN_BATCH = 200;

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

const { hostname, port } = new URL(gateway.url);
const body = JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Tell a long story." }], stream: true });
const request =
  `POST /v1/chat/completions HTTP/1.1\r\nHost: ${hostname}:${port}\r\nAuthorization: Bearer ${gateway.key}\r\n` +
  `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
const statuses = new Map<string, number>();
const sockets: { end(): void }[] = [];
async function open(count: number): Promise<void> {
  for (let opened = 0; opened < count; opened += OPEN_BATCH) {
    const connect = async () => {
      let seen = false;
      const socket = await Bun.connect({
        hostname,
        port: Number(port),
        socket: {
          data(_, data) {
            if (seen) return;
            seen = true;
            const status = data.toString("latin1", 9, 12);
            statuses.set(status, (statuses.get(status) ?? 0) + 1);
          },
        },
      });
      socket.write(request);
      sockets.push(socket);
    };
    await Promise.all(Array.from({ length: Math.min(OPEN_BATCH, count - opened) }, connect));
  }
}
const answered = () => [...statuses.values()].reduce((a, b) => a + b, 0);

try {
  // A few streams first, so that what every stream's code loads once is in the baseline.
  await open(20);
  while (answered() < 20) await Bun.sleep(100);
  for (const socket of sockets.splice(0)) socket.end();
  statuses.clear();
  await Bun.sleep(1_000);
  const before = await dump();
  const openedMs = performance.now();
  await open(STREAMS);
  while (answered() < STREAMS && performance.now() - openedMs < ANSWER_WAIT_MS_MAX) await Bun.sleep(250);
  const answeredS = (performance.now() - openedMs) / 1000;
  await Bun.sleep(2_000); // each stream past its first token
  const after = await dump();
  const kib = (bytes: number) => (bytes / STREAMS / 1024).toFixed(1);
  console.log(
    `${mode}: ${STREAMS} streams, statuses ${JSON.stringify(Object.fromEntries(statuses))} in ${answeredS.toFixed(1)} s; load average ${loadavg()[0]!.toFixed(1)}`,
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
  for (const socket of sockets) socket.end();
  await gateway.stop();
  await sim.stop();
}
process.exit(0);
