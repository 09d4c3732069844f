/**
 * `bun run bench:tokens`: pathological prompts against the context window, through a real
 * embedded gateway (PGlite, in-process bus) in this process, with the simulator as the upstream in
 * a process of its own (so its parsing of the big prompts is not the gateway's). One key sends prompts of 1, 8 and
 * 30 MiB made of spaces, of one repeated letter, of one emoji and of random bytes, to a
 * 128k-token model (gpt-4o-mini) and to the 10M-token one (llama-4-scout), one at a time; each
 * reply's status and time are recorded (goal: decided within 2 s). Meanwhile a second key keeps
 * sending small requests (a "Hello" to gpt-4o-mini) and window-edge ones (a 64 KiB prompt to
 * phi-4's 16k window, which needs a count), and their latencies are reported. Appends a table to
 * bench/RESULTS.md.
 *
 *   bun run bench:tokens [-- --sizes 1,8,30]
 */
import { appendFileSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { chatBudget } from "../src/operations/chat/budget.ts";
import type { ChatRequest } from "../src/operations/chat/schema.ts";
import { ADMISSION_COUNT_BYTES_MAX, TOKENIZER_THREADS } from "../src/tokens/count.ts";
import { startTestGateway } from "../test/helpers.ts";
import { installExitHandlers, stopAll } from "./procs.ts";
import { startSimulator } from "./targets.ts";

const { values } = parseArgs({ options: { sizes: { type: "string", default: "1,8,30" } } });
const MIB = 1024 * 1024;
const SIZES_MIB = values
  .sizes!.split(",")
  .map(Number)
  .filter((n) => n > 0 && n <= 30);
const MODELS = [
  ["gpt-4o-mini", "128k"],
  ["llama-4-scout", "10M"],
] as const;

/** Content of about `bytes` UTF-8 bytes whose JSON string needs no escapes. */
const KINDS: [string, (bytes: number) => string][] = [
  ["spaces", (bytes) => " ".repeat(bytes)],
  ["one letter", (bytes) => "a".repeat(bytes)],
  ["emoji", (bytes) => "😀".repeat(Math.floor(bytes / 4))],
  [
    "random bytes",
    (bytes) => {
      // Random bytes as a client would send them, decoded as UTF-8 (invalid sequences become
      // U+FFFD); control characters, quote and backslash left out so the JSON body is the text.
      const raw = crypto
        .getRandomValues(new Uint8Array(Math.ceil(bytes / 1.7)))
        .map((b) => (b < 0x20 || b === 0x22 || b === 0x5c ? 0x41 : b));
      const text = new TextDecoder().decode(raw);
      return Buffer.from(text, "utf8").subarray(0, bytes).toString("utf8");
    },
  ],
];

installExitHandlers();
const sim = await startSimulator({ outputTokens: 1 });
const poolsPath = join(mkdtempSync(join(tmpdir(), "bench-tokens-")), "pools.json");
const backend = { name: "sim", kind: "openai", url: `${sim.url}/v1`, region: "in-country", concurrency_max: 10_000 };
writeFileSync(
  poolsPath,
  JSON.stringify({ pools: Object.fromEntries(["gpt-4o-mini", "llama-4-scout", "phi-4"].map((m) => [m, { backends: [backend] }])) }),
);
const t = await startTestGateway({ LOG_LEVEL: "error", DARVAZE_CONFIG: poolsPath });
const attacker = await t.fundedKey(10_000_000);
const victim = await t.fundedKey(10_000_000);

async function post(key: string, body: string): Promise<{ status: number; ms: number }> {
  const started = performance.now();
  const response = await fetch(`${t.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body,
  });
  await response.arrayBuffer();
  return { status: response.status, ms: performance.now() - started };
}
const chat = (model: string, content: string) => JSON.stringify({ model, messages: [{ role: "user", content }], max_tokens: 1 });

// The second key: small requests and window-edge ones, one of each kind at a time, all run long.
const small = chat("gpt-4o-mini", "Hello, world!");
const edge = chat("phi-4", "The quick brown fox jumps over the lazy dog. ".repeat((64 * 1024) / 45));
const victimMs: Record<"small" | "edge", number[]> = { small: [], edge: [] };
const victimErrors: string[] = [];
let running = true;
/**
 * Whether an attacker's request is in flight. The runner builds each big body in this process
 * too, so the second key's latencies and the stalls are kept only for what ran wholly while one
 * was in flight: the gateway's work, not the runner's.
 */
let sending = false;
/** The second key's requests under way: the runner waits for them before building the next body. */
const inFlight = new Set<Promise<unknown>>();
async function victimLoop(kind: "small" | "edge", body: string): Promise<void> {
  while (running) {
    if (!sending) {
      await Bun.sleep(1);
      continue;
    }
    const request = post(victim.key, body);
    inFlight.add(request);
    const { status, ms } = await request;
    inFlight.delete(request);
    if (status !== 200) victimErrors.push(`${kind}: ${status}`);
    else victimMs[kind].push(ms);
  }
}
for (let i = 0; i < 20; i++) await post(victim.key, small); // warm up
await post(victim.key, edge);
const victims = [victimLoop("small", small), victimLoop("edge", edge)];
// The gateway runs in this process: the longest gap between 1 ms ticks is its longest event-loop stall.
let stallMsMax = 0;
let lastTick = performance.now();
const ticker = setInterval(() => {
  const now = performance.now();
  if (sending) stallMsMax = Math.max(stallMsMax, now - lastTick - 1);
  lastTick = now;
}, 1);

interface Row {
  kind: string;
  mib: number;
  model: string;
  status: number;
  ms: number;
  /** The window decision alone (chatBudget on the parsed body: counting and its threads). */
  decisionMs: number;
}
const rows: Row[] = [];
for (const mib of SIZES_MIB) {
  for (const [kind, make] of KINDS) {
    const content = make(mib * MIB);
    for (const [model, window] of MODELS) {
      const body = chat(model, content);
      lastTick = performance.now();
      sending = true;
      await Bun.sleep(5); // the second key's requests are under way
      const { status, ms } = await post(attacker.key, body);
      sending = false;
      await Promise.all(inFlight);
      const parsed = { model, messages: [{ role: "user", content }], max_tokens: 1 } as ChatRequest;
      const decidedAt = performance.now();
      await chatBudget(parsed, t.gw.deps.catalog.get(model)!, { fairnessKey: `bench-${rows.length}` });
      const decisionMs = performance.now() - decidedAt;
      rows.push({ kind, mib, model: `${model} (${window})`, status, ms, decisionMs });
      console.log(`${mib} MiB ${kind} → ${model}: ${status} in ${ms.toFixed(0)} ms (decision ${decisionMs.toFixed(0)} ms)`);
    }
  }
}
running = false;
clearInterval(ticker);
await Promise.all(victims);
const load = (await Bun.file("/proc/loadavg").text()).split(" ").slice(0, 3).join(" ");
await t.stop();
await stopAll();

const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
const stats = (ms: number[]) => {
  const sorted = [...ms].sort((a, b) => a - b);
  return `${sorted.length} | ${quantile(sorted, 0.5).toFixed(1)} | ${quantile(sorted, 0.99).toFixed(1)} | ${(sorted.at(-1) ?? NaN).toFixed(1)}`;
};
const worst = Math.max(...rows.map((r) => r.ms));
const lines = [
  "",
  `## Pathological prompts against the context window, ${new Date().toISOString().slice(0, 16).replace("T", " ")} UTC (bench:tokens)`,
  "",
  `- Command: \`bun run bench:tokens${values.sizes === "1,8,30" ? "" : ` -- --sizes ${values.sizes}`}\` (embedded gateway: PGlite, in-process bus; the simulator in its own process on CPU 0; 2 shared cores)`,
  `- Tokenizer: ${TOKENIZER_THREADS} threads, admission counts capped at ${ADMISSION_COUNT_BYTES_MAX / MIB} MiB of merge work per request; one request at a time from one key, \`max_tokens: 1\``,
  "- Reply ms: from sending the request to the end of the reply: upload, JSON parse, the window decision and, when admitted, the upstream's whole reply (the simulator parsing the prompt) (goal: ≤ 2,000 ms)",
  "- Decision ms: the window decision alone, `chatBudget` on the parsed body in the same process and threads, run after the reply",
  "",
  "| Prompt | Size | Model | Status | Reply ms | Decision ms |",
  "|---|---|---|---|---|---|",
  ...rows.map((r) => `| ${r.kind} | ${r.mib} MiB | ${r.model} | ${r.status} | ${r.ms.toFixed(0)} | ${r.decisionMs.toFixed(0)} |`),
  "",
  `Slowest reply: ${worst.toFixed(0)} ms; slowest decision: ${Math.max(...rows.map((r) => r.decisionMs)).toFixed(0)} ms. Longest event-loop stall of the gateway (this process, while a big prompt was in flight): ${stallMsMax.toFixed(0)} ms. Load average at the end (other work shares the 2 cores): ${load}.`,
  "",
  "A second key meanwhile (one request of each kind at a time, sent only while a big prompt is in flight):",
  "",
  "| Requests | n | p50 ms | p99 ms | max ms |",
  "|---|---|---|---|---|",
  `| small ("Hello" to gpt-4o-mini) | ${stats(victimMs.small)} |`,
  `| window edge (64 KiB prose to phi-4, counted) | ${stats(victimMs.edge)} |`,
  "",
  victimErrors.length === 0
    ? "The second key's requests: all 200."
    : `The second key's failures: ${victimErrors.slice(0, 10).join(", ")}${victimErrors.length > 10 ? ", …" : ""}`,
  "",
];
console.log(lines.join("\n"));
appendFileSync(join(import.meta.dir, "RESULTS.md"), lines.join("\n"));
