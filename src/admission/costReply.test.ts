import { expect, test } from "bun:test";
import { presentedJson, valueWithUsageCost, withUsageCost } from "./costReply.ts";

test("a reply already parsed gets the same usage.cost as its text would, and its value is left as it was", () => {
  const texts = [
    '{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}',
    '{"usage":{"cost":1,"prompt_tokens":3}}',
    '{"choices":[]}',
    '{"usage":null}',
    '{"usage":[1]}',
    "[1,2]",
    "7",
  ];
  for (const text of texts) {
    const value = JSON.parse(text);
    expect(valueWithUsageCost(value, text, 972_000n)).toBe(withUsageCost(text, 972_000n));
    expect(value).toEqual(JSON.parse(text));
  }
  expect(withUsageCost('{"usage":{"prompt_tokens":3}}', 972_000n)).toBe('{"usage":{"prompt_tokens":3,"cost":0.972}}');
  expect(withUsageCost("not json", 1n)).toBe("not json");
});

test("a presented reply tells the cost in its top-level usage once settled, and keeps a shape without one", () => {
  const message = { type: "message", usage: { input_tokens: 3, output_tokens: 1 } };
  expect(JSON.parse(presentedJson(message, { billedMicro: 972_000n }))).toEqual({ ...message, usage: { ...message.usage, cost: 0.972 } });
  expect(JSON.parse(presentedJson(message, null))).toEqual(message);
  const gemini = { candidates: [], usageMetadata: { promptTokenCount: 3 } };
  expect(JSON.parse(presentedJson(gemini, { billedMicro: 972_000n }))).toEqual(gemini);
});
