/**
 * `bun run bench/body-reader.ts [--streams 200]`: what reading one waiting upstream stream costs
 * this thread, by the way it is read, in one bare program (no gateway): a local server sends a
 * token a second on each stream, and this thread's heap (after a full collection) is read before
 * the streams and once each had its first tokens, per stream, with the bytes held outside the
 * engine's cells (buffers) apart:
 *
 *   fetch       `fetch` and its body's reader, as the gateway reads an upstream (providers/upstream.ts)
 *   node-http   Bun's `node:http` client, its `data` events
 *
 * Figures go to bench/RESULTS.md by hand.
 */
import { heapStats } from "bun:jsc";
import { request as httpRequest } from "node:http";
import { parseArgs } from "node:util";
import { countFlag } from "./flags.ts";

const { values: flags } = parseArgs({
  args: process.argv.slice(2),
  strict: true,
  options: { streams: { type: "string", default: "200" } },
});
/** Below Bun's default of 256 fetches in flight. */
const STREAMS = countFlag(flags.streams, { fallback: 200, max: 250 });
const TOKEN_MS = 1_000;

const upstream = Bun.serve({
  port: 0,
  hostname: "127.0.0.1",
  idleTimeout: 0,
  fetch: () =>
    new Response(
      new ReadableStream({
        type: "direct",
        async pull(controller) {
          for (;;) {
            controller.write('data: {"token":1}\n\n');
            await controller.flush();
            await Bun.sleep(TOKEN_MS);
          }
        },
      }),
      { headers: { "content-type": "text/event-stream" } },
    ),
});
const url = `http://127.0.0.1:${upstream.port}/`;
const held: unknown[] = [];

const ways: Record<string, () => Promise<void>> = {
  async fetch() {
    const reader = (await fetch(url)).body!.getReader();
    held.push(reader);
    void (async () => {
      while (!(await reader.read()).done);
    })();
  },
  "node-http": () =>
    new Promise((resolve) => {
      const req = httpRequest(url, (res) => {
        held.push(res);
        res.on("data", () => {});
        resolve();
      });
      req.end();
    }),
};

function reading(): { heap: number; extra: number } {
  Bun.gc(true);
  const stats = heapStats();
  return { heap: stats.heapSize, extra: stats.extraMemorySize };
}

for (const [way, open] of Object.entries(ways)) {
  const before = reading();
  for (let i = 0; i < STREAMS; i++) await open();
  await Bun.sleep(2 * TOKEN_MS + 500);
  const after = reading();
  const kib = (bytes: number) => (bytes / STREAMS / 1024).toFixed(1);
  console.log(
    `${way.padEnd(10)} a stream holds: heap ${kib(after.heap - before.heap)} KiB, of which buffers ${kib(after.extra - before.extra)} KiB`,
  );
  held.length = 0; // the streams stay open (the fetches count against Bun's 256 in flight); their readers are dropped
}
upstream.stop(true);
process.exit(0);
