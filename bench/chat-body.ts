/**
 * CPU per request of checking a chat body at the edge: the hot-path check (or zod when it
 * declines) and the prompt bound, for the bodies the gateway sees most and the large ones.
 *
 *   bun run bench/chat-body.ts
 */
import { chatRequest, isPlainChatRequest } from "../src/operations/chat/schema.ts";
import { promptTokensUpperBound } from "../src/tokens/count.ts";

const properties: Record<string, unknown> = {};
for (let i = 0; i < 5_000; i++) properties[`field_${i}`] = { type: "string", description: `value number ${i} of the record, as text` };
const tools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "The weather in a city",
      parameters: { type: "object", properties: { city: { type: "string" } } },
    },
  },
];

const bodies: Record<string, unknown> = {
  "plain, one short message (the benchmarks' body)": {
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: "Say hello in one short sentence." }],
    max_tokens: 16,
  },
  "plain, 20 messages of 2 KB": {
    model: "gpt-4o-mini",
    messages: Array.from({ length: 20 }, (_, i) => ({
      role: i % 2 ? "assistant" : "user",
      content: "سلام دنیا، حال شما چطور است؟ ".repeat(40),
    })),
    max_tokens: 16,
  },
  "plain, 1 MiB of text": {
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: "The quick brown fox jumps over the lazy dog. ".repeat(23_302) }],
  },
  "tools and an image (zod)": {
    model: "gpt-4o-mini",
    messages: [
      {
        role: "user",
        content: [
          { type: "text", text: "What is this?" },
          { type: "image_url", image_url: { url: "https://example.com/a.png" } },
        ],
      },
    ],
    tools,
    tool_choice: "auto",
  },
  "a 400 KB JSON schema (zod)": {
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: "Hi" }],
    max_tokens: 1,
    response_format: { type: "json_schema", json_schema: { name: "big", schema: { type: "object", properties } } },
  },
};

/** As route.ts does: the body's bytes are measured from its text only when the bound asks. */
function check(raw: unknown, text: string): number {
  const body = isPlainChatRequest(raw) ? raw : chatRequest.parse(raw);
  return promptTokensUpperBound(body, () => Buffer.byteLength(text, "utf8"));
}

console.log("| Body | bytes | µs per check (median of 5 runs) | bound |");
console.log("|---|---:|---:|---:|");
for (const [name, body] of Object.entries(bodies)) {
  const text = JSON.stringify(body);
  const bytes = Buffer.byteLength(text, "utf8");
  const raw = JSON.parse(text) as unknown;
  const iterations = Math.max(20, Math.min(20_000, Math.floor(200_000_000 / bytes)));
  for (let i = 0; i < iterations; i++) check(raw, text); // warm-up
  const runs: number[] = [];
  for (let run = 0; run < 5; run++) {
    const start = Bun.nanoseconds();
    for (let i = 0; i < iterations; i++) check(raw, text);
    runs.push((Bun.nanoseconds() - start) / iterations / 1_000);
  }
  runs.sort((a, b) => a - b);
  console.log(`| ${name} | ${bytes.toLocaleString("en")} | ${runs[2]!.toFixed(2)} | ${check(raw, text).toLocaleString("en")} |`);
}
