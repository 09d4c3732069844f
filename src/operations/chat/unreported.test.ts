import { expect, test } from "bun:test";
import type { Admission } from "../../admission/settlement.ts";
import { CUT_TPOT_MS_MIN, cutOutputTokens, STREAM_CUT_MS_MAX } from "./unreported.ts";

/** What the count reads of an admission: the model, what the hold covers, the request's id. */
function admissionOf(id: string, vendor: string, covered: number): Admission {
  return { model: { id, vendor }, coveredOutputUnits: covered, requestId: "r" } as unknown as Admission;
}
const bytes = async (text: string) => Buffer.byteLength(text);

test("a cut stream: what was read, plus the tokens its backend can generate from its last event until it sees the cut", async () => {
  const cut = await cutOutputTokens(
    admissionOf("deepseek-v3", "deepseek", 4_000),
    {
      text: "abcdef",
      answeredMs: 0,
      lastReadMs: 1_000,
      cutMs: 1_010,
      tpotMs: 20,
    },
    bytes,
  );
  expect(cut).toEqual({
    metered: 6,
    allowance: Math.ceil((10 + STREAM_CUT_MS_MAX) / 20),
    output: 6 + Math.ceil((10 + STREAM_CUT_MS_MAX) / 20),
  });
});

test("hidden reasoning is billed by time until the last event, less what was seen; never above the hold", async () => {
  const facts = { text: "abcd", answeredMs: 0, lastReadMs: 2_000, cutMs: 2_000, tpotMs: 10 };
  const cut = await cutOutputTokens(admissionOf("gemini-2.5-flash", "google", 4_000), facts, bytes);
  expect(cut.metered).toBe(4);
  expect(cut.output).toBe(200 + STREAM_CUT_MS_MAX / 10);
  const small = await cutOutputTokens(admissionOf("gemini-2.5-flash", "google", 50), facts, bytes);
  expect(small.output).toBe(50);
});

test("a backend measured faster than CUT_TPOT_MS_MIN counts as that fast; the bill stays within the hold", async () => {
  const cut = await cutOutputTokens(
    admissionOf("deepseek-v3", "deepseek", 100),
    { text: "", answeredMs: 0, lastReadMs: 0, cutMs: 0, tpotMs: 0 },
    bytes,
  );
  expect(cut.output).toBe(Math.min(100, STREAM_CUT_MS_MAX / CUT_TPOT_MS_MIN));
});

test("a count that fails falls back to the text's bytes", async () => {
  const cut = await cutOutputTokens(
    admissionOf("claude-3-5-haiku", "anthropic", 4_000),
    { text: "héllo", answeredMs: 0, lastReadMs: 0, cutMs: 0, tpotMs: 1_000 },
    async () => null,
  );
  expect(cut.metered).toBe(6);
});
