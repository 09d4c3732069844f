/**
 * `bun run bench/bounded-read.ts`: CPU per fetch of a small chat reply read with `text()` against
 * the gateway's bounded reader (src/providers/upstream.ts), 20,000 requests 64 at a time, twice each.
 */
import { readTextBounded } from "../src/providers/upstream.ts";
const body = JSON.stringify({
  id: "chatcmpl-x",
  object: "chat.completion",
  choices: [{ index: 0, message: { role: "assistant", content: "Hello there! ".repeat(8) }, finish_reason: "stop" }],
  usage: { prompt_tokens: 12, completion_tokens: 16, total_tokens: 28 },
});
const server = Bun.serve({ port: 0, fetch: () => new Response(body) });
const url = `http://127.0.0.1:${server.port}/`;
for (const [name, read] of [
  ["text()", (r: Response) => r.text()],
  ["readTextBounded", (r: Response) => readTextBounded(r, 16 << 20)],
  ["text()", (r: Response) => r.text()],
  ["readTextBounded", (r: Response) => readTextBounded(r, 16 << 20)],
] as const) {
  const n = 20000;
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  for (let i = 0; i < n; i += 64) await Promise.all(Array.from({ length: 64 }, async () => read(await fetch(url))));
  const cpu = process.cpuUsage(cpu0);
  console.log(
    name,
    (((performance.now() - t0) * 1000) / n).toFixed(1),
    "µs wall/req",
    ((cpu.user + cpu.system) / n).toFixed(1),
    "µs cpu/req",
  );
}
server.stop(true);
