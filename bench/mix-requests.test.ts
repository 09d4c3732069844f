import { expect, test } from "bun:test";
import { mixBody, mixRequest, PROMPT_BYTES_MAX, PROMPT_BYTES_MIN, type MixKind } from "./mix-requests.ts";

const draws = 4_000;

test("a seed draws the same requests every time, and another seed others", () => {
  const run = (seed: number) => Array.from({ length: 50 }, (_, i) => mixBody(seed, mixRequest(seed, i, 1000)).body);
  expect(run(1)).toEqual(run(1));
  expect(run(2)).not.toEqual(run(1));
});

test("the mix holds every kind, keys spread over the run's keys, prompts within 1–30 KB", () => {
  const kinds = new Map<MixKind, number>();
  const keys = new Set<number>();
  const sizes: number[] = [];
  for (let i = 0; i < draws; i++) {
    const r = mixRequest(7, i, 1000);
    kinds.set(r.kind, (kinds.get(r.kind) ?? 0) + 1);
    keys.add(r.keyIndex);
    expect(r.keyIndex).toBeLessThan(1000);
    expect(r.promptBytes).toBeGreaterThanOrEqual(PROMPT_BYTES_MIN);
    expect(r.promptBytes).toBeLessThanOrEqual(PROMPT_BYTES_MAX);
    sizes.push(r.promptBytes);
  }
  // Shares 55/35/5/5%, within a few points over 4,000 draws.
  expect(kinds.get("chat")! / draws).toBeCloseTo(0.55, 1);
  expect(kinds.get("stream")! / draws).toBeCloseTo(0.35, 1);
  expect(kinds.get("embeddings")!).toBeGreaterThan(draws * 0.03);
  expect(kinds.get("leave")!).toBeGreaterThan(draws * 0.03);
  expect(keys.size).toBeGreaterThan(900);
  sizes.sort((a, b) => a - b);
  expect(sizes[draws / 2]!).toBeGreaterThan(3 * 1024);
  expect(sizes[draws / 2]!).toBeLessThan(5 * 1024);
  expect(sizes.at(-1)!).toBe(PROMPT_BYTES_MAX);
});

test("a body carries about its prompt's bytes, streamed only when the kind streams", () => {
  for (let i = 0; i < 200; i++) {
    const r = mixRequest(3, i, 10);
    const { path, body } = mixBody(3, r);
    const parsed = JSON.parse(body);
    if (r.kind === "embeddings") {
      expect(path).toBe("/v1/embeddings");
      const bytes = (parsed.input as string[]).reduce((total, text) => total + Buffer.byteLength(text), 0);
      expect(bytes).toBeLessThanOrEqual(r.promptBytes);
      expect(bytes).toBeGreaterThan(r.promptBytes * 0.8);
      continue;
    }
    expect(path).toBe("/v1/chat/completions");
    expect(parsed.stream === true).toBe(r.kind === "stream" || r.kind === "leave");
    expect(parsed.max_tokens).toBe(r.maxTokens);
    expect(parsed.messages.at(-1).role).toBe("user");
    const bytes = (parsed.messages as { content: string }[]).reduce((total, m) => total + Buffer.byteLength(m.content), 0);
    expect(bytes).toBeLessThanOrEqual(r.promptBytes);
    expect(bytes).toBeGreaterThan(r.promptBytes * 0.8);
  }
});
