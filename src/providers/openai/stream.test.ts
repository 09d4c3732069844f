import { describe, expect, test } from "bun:test";
import { decodeAll, fixture as recorded } from "../../../test/decoders.ts";
import { chunkJson } from "../chunk.ts";
import { OpenAIStreamDecoder } from "./stream.ts";

const fixture = (name: string) => recorded("openai", name);

/** Feeds the text in pieces of `size` characters, as a network might deliver it. */
const decode = (text: string, size: number) => decodeAll(new OpenAIStreamDecoder(), text, size);

describe.each([1, 7, 100_000])("OpenAI stream decoder, fed %i characters at a time", (size) => {
  test("relays every frame untouched, finds the usage-only chunk and the end", () => {
    const text = fixture("basic-usage.sse");
    const out = decode(text, size);
    expect(out.done).toBe(true);
    expect(out.frames).toHaveLength(6);
    expect(`${out.frames.map((f) => `data: ${chunkJson(f)}\n\n`).join("")}data: [DONE]\n\n`).toBe(text);
    expect(out.frames.map((f) => f.usageOnly)).toEqual([false, false, false, false, false, true]);
    expect(out.frames.map((f) => f.text).join("")).toBe("Hello! How can I help?");
    expect(out.usage).toEqual({ input: 9, output: 7 });
  });

  test("counts tool calls' names and arguments as delivered text", () => {
    const out = decode(fixture("tool-calls.sse"), size);
    expect(out.frames.map((f) => f.text).join("")).toBe('get_weather{"city":"Tehran"}');
    expect(out.usage).toEqual({ input: 61, output: 15 });
  });

  test("turns an error event into a failure and keeps the frames before it", () => {
    const out = decode(fixture("error-midstream.sse"), size);
    expect(out.frames.map((f) => f.text).join("")).toBe("Once upon");
    expect(out.error?.code).toBe("upstream_error");
    expect(out.error?.message).toContain("The server had an error");
    expect(out.done).toBe(false);
  });

  test("reads vLLM's continuous usage over CRLF lines and skips comments", () => {
    const out = decode(fixture("vllm-continuous-usage.sse"), size);
    expect(out.frames).toHaveLength(3);
    expect(out.frames.every((f) => !f.usageOnly)).toBe(true);
    expect(out.usage).toEqual({ input: 12, output: 2 });
    expect(out.done).toBe(true);
  });
});

test("a refusal streamed in deltas is delivered text, like content and visible reasoning", () => {
  const chunk = (delta: Record<string, unknown>) =>
    `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`;
  const out = decode(
    chunk({ role: "assistant", content: null, refusal: "I can't " }) +
      chunk({ refusal: "help." }) +
      chunk({ reasoning_content: "Thinking." }) +
      "data: [DONE]\n\n",
    11,
  );
  expect(out.frames.map((f) => f.text)).toEqual(["I can't ", "help.", "Thinking."]);
});

test("a malformed chunk is a failure, not a crash", () => {
  const out = new OpenAIStreamDecoder().push("data: {not json\n\n");
  expect(out.error?.code).toBe("upstream_error");
});
