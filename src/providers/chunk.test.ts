import { describe, expect, test } from "bun:test";
import { chatChunkOf, chunkJson } from "./chunk.ts";
import { OpenAIStreamDecoder } from "./openai/stream.ts";

const chunk = (choice: Record<string, unknown>, more: Record<string, unknown> = {}) => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  choices: [{ index: 0, ...choice }],
  ...more,
});

describe("chatChunkOf", () => {
  test("an upstream's chunk is checked in place: the same object, its keys in the upstream's order", () => {
    const value = chunk({ delta: { content: "Hi", tool_calls: [{ index: 0, id: "c", function: { name: "f", arguments: "{}" } }] } });
    expect(chatChunkOf(value)).toBe(value);
    const usage = chunk({ delta: null, finish_reason: "stop" }, { usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } });
    expect(chatChunkOf(usage)).toBe(usage);
    expect(chatChunkOf({ choices: [], usage: null })).not.toBeNull();
  });

  test("what is not a chat chunk as the wires read it is null", () => {
    for (const value of [
      null,
      [],
      "chunk",
      {},
      { choices: {} },
      chunk({ index: -1 }),
      chunk({ index: 1.5 }),
      chunk({ delta: [] }),
      chunk({ delta: { content: 5 } }),
      chunk({ delta: { refusal: {} } }),
      chunk({ delta: { reasoning_content: 1 } }),
      chunk({ delta: { tool_calls: {} } }),
      chunk({ delta: { tool_calls: [{ id: "c" }] } }),
      chunk({ delta: { tool_calls: [{ index: 0, function: { arguments: 1 } }] } }),
      chunk({ delta: { anthropic_block: { kind: "x" } } }),
      chunk({ finish_reason: 1 }),
      chunk({}, { usage: { prompt_tokens: -1, completion_tokens: 0 } }),
      chunk({}, { usage: [] }),
    ])
      expect(chatChunkOf(value)).toBeNull();
  });
});

test("the chat wire's text of a chunk is the upstream's own, byte for byte; a built chunk's is written once", () => {
  const sent = '{"id":"c","choices":[{"index":0,"delta":{"content":"caf\\u00e9"} ,"finish_reason":null}]}';
  const [frame] = new OpenAIStreamDecoder().push(`data: ${sent}\n\n`).frames;
  expect(frame!.chunk?.choices[0]?.delta?.content).toBe("café");
  expect(chunkJson(frame!)).toBe(sent);
  expect(chunkJson({ chunk: { choices: [] }, json: null })).toBe('{"choices":[]}');
});
