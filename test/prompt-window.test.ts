/**
 * Pathological prompts get the right context-window verdict through a real gateway: refused with
 * 400 `context_length_exceeded` only when too long, admitted (200, or 402 at the wallet) when they
 * fit. Smaller than bench/tokens.ts (which times 1–30 MiB) so that it runs fast; expected counts
 * come from the vocabulary (the longest run tokens: 8 a's, 128 spaces, one 😀 per token) and from
 * js-tiktoken itself for random bytes.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { Tiktoken } from "js-tiktoken/lite";
import o200k from "js-tiktoken/ranks/o200k_base";
import { ADMISSION_COUNT_BYTES_MAX, EXACT_MESSAGE_TOKENS, EXACT_REPLY_TOKENS } from "../src/tokens/count.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";

const KIB = 1024;
const TEMPLATE_TOKENS = EXACT_MESSAGE_TOKENS + EXACT_REPLY_TOKENS;
let t: TestGateway;
let key: string;

beforeAll(async () => {
  t = await startTestGateway();
  ({ key } = await t.fundedKey(1_000_000));
}, SETUP_MS_MAX);
afterAll(async () => t.stop(), SETUP_MS_MAX);

/** Random bytes as a client would send them: decoded as UTF-8, invalid sequences as U+FFFD. */
function randomText(bytes: number): string {
  let seed = 7;
  return new TextDecoder().decode(Uint8Array.from({ length: bytes }, () => ((seed = (seed * 1103515245 + 12345) >>> 0) >>> 16) & 0xff));
}

async function verdict(model: string, content: string, fields: Record<string, unknown> = {}): Promise<{ status: number; code?: string }> {
  const response = await fetch(`${t.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content }], max_tokens: 1, ...fields }),
  });
  const body = (await response.json()) as { error?: { code: string } };
  return { status: response.status, code: body.error?.code };
}

const fits = (window: number, tokens: number) => tokens + TEMPLATE_TOKENS + 1 <= window;
const expected = (window: number, tokens: number) => (fits(window, tokens) ? 200 : 400);

test("runs of spaces, of one letter and of one emoji: refused exactly when they do not fit", async () => {
  const cases: [string, string, number][] = [
    ["spaces", " ".repeat(512 * KIB), (512 * KIB) / 128],
    ["one letter", "a".repeat(256 * KIB), (256 * KIB) / 8],
    ["one letter, past the work cap", "a".repeat(2 * ADMISSION_COUNT_BYTES_MAX), (2 * ADMISSION_COUNT_BYTES_MAX) / 8],
    ["emoji", "😀".repeat(32 * KIB), 32 * KIB],
  ];
  for (const [name, content, tokens] of cases) {
    for (const [model, window] of [
      ["phi-4", 16_000],
      ["gpt-4o-mini", 128_000],
      ["llama-4-scout", 10_000_000],
    ] as const) {
      const got = await verdict(model, content);
      expect({ name, model, status: got.status }).toEqual({ name, model, status: expected(window, tokens) });
      if (got.status === 400) expect(got.code).toBe("context_length_exceeded");
    }
  }
}, 120_000);

test("random bytes and long prose: refused when too long, admitted when they fit", async () => {
  const noise = randomText(384 * KIB);
  const noiseTokens = new Tiktoken(o200k).encode(noise).length;
  expect(fits(128_000, noiseTokens)).toBe(false); // the case is the interesting one: over gpt-4o-mini's window
  expect(await verdict("gpt-4o-mini", noise)).toEqual({ status: 400, code: "context_length_exceeded" });
  expect((await verdict("llama-4-scout", noise)).status).toBe(200);

  // Past the work cap: the counted part alone proves 2 MiB of prose too long for 128k tokens,
  // and its count plus the rest's bytes proves it fits 10M.
  const prose = "The quick brown fox jumps over the lazy dog. ".repeat((2 * ADMISSION_COUNT_BYTES_MAX) / 45);
  expect(await verdict("gpt-4o-mini", prose)).toEqual({ status: 400, code: "context_length_exceeded" });
  expect((await verdict("llama-4-scout", prose)).status).toBe(200);
}, 120_000);

test("a small message with a huge tool description: refused for a small window, admitted where it fits", async () => {
  const tool = (words: number) => ({ type: "function", function: { name: "lookup", description: " word".repeat(words) } });
  expect(await verdict("phi-4", "hi", { tools: [tool(20_000)] })).toEqual({ status: 400, code: "context_length_exceeded" });
  expect((await verdict("phi-4", "hi", { tools: [tool(5_000)] })).status).toBe(200);
  expect((await verdict("llama-4-scout", "hi", { tools: [tool(20_000)] })).status).toBe(200);
}, 60_000);

test("embeddings: an input is refused only when its count proves it longer than the window", async () => {
  const embed = async (input: string) => {
    const response = await fetch(`${t.url}/v1/embeddings`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "text-embedding-3-small", input }),
    });
    const body = (await response.json()) as { error?: { code: string } };
    return { status: response.status, code: body.error?.code };
  };
  // text-embedding-3-small's window is 8,191 tokens; a's make one token per 8.
  expect(await embed("a".repeat(8 * 8_000))).toEqual({ status: 200, code: undefined }); // 64,000 bytes, 8,000 tokens
  expect(await embed("a".repeat(8 * 8_200))).toEqual({ status: 400, code: "context_length_exceeded" });
  expect(await embed(" ".repeat(8_191 * 128))).toEqual({ status: 200, code: undefined }); // 1 MiB of spaces, 8,191 tokens
}, 60_000);
