import { expect, test } from "bun:test";
import { valueWithUsageCost, withUsageCost } from "./costReply.ts";

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
