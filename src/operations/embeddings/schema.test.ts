import { expect, test } from "bun:test";
import { EMBEDDING_INPUTS_MAX, embeddingInputs, embeddingsRequest } from "./schema.ts";

const parse = (input: unknown) => embeddingsRequest.safeParse({ model: "m", input });

test("every input shape of the spec, normalised to a list", () => {
  const cases: [unknown, unknown][] = [
    ["hello", ["hello"]],
    [
      ["a", "b"],
      ["a", "b"],
    ],
    [[1, 2, 3], [[1, 2, 3]]],
    [
      [[1], [2, 3]],
      [[1], [2, 3]],
    ],
  ];
  for (const [input, list] of cases) {
    const parsed = parse(input);
    expect(parsed.success && embeddingInputs(parsed.data.input)).toEqual(list as string[]);
  }
});

test("bounds: empty strings, too many inputs, bad encodings", () => {
  expect(parse("").success).toBe(false);
  expect(parse([]).success).toBe(false);
  expect(parse(Array(EMBEDDING_INPUTS_MAX + 1).fill("x")).success).toBe(false);
  expect(parse([-1]).success).toBe(false);
  expect(embeddingsRequest.safeParse({ model: "m", input: "x", encoding_format: "int8" }).success).toBe(false);
  expect(embeddingsRequest.safeParse({ model: "m", input: "x", dimensions: 0 }).success).toBe(false);
});
