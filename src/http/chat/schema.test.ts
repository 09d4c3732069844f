import { expect, test } from "bun:test";
import { chatRequest, isPlainChatRequest } from "./schema.ts";

/** Random bodies near the edges of every rule. */
function randomBody(random: () => number): unknown {
  const pick = <T>(values: T[]): T => values[Math.floor(random() * values.length)]!;
  const maybe = <T>(value: T) => (random() < 0.5 ? undefined : value);
  const message = () =>
    pick([
      {
        role: pick(["user", "system", "assistant", "tool", "robot", "", 5]),
        content: pick(["hi", "", null, [{ type: "text", text: "x" }], 5, {}, undefined]),
      },
      { role: "user", content: "x", name: pick(["n", 5, null, undefined]) },
      pick([null, "text", [], 7]),
    ]);
  const body: Record<string, unknown> = {
    model: pick(["gpt-4o-mini", "", "x".repeat(256), "x".repeat(257), 42, null, undefined]),
    messages: pick([[message()], [message(), message()], [], "messages", null, undefined]),
  };
  for (const [field, values] of Object.entries({
    stream: [true, false, null, "yes", 1],
    stream_options: [{ include_usage: true }, { include_usage: "yes" }, {}, null, [], "x"],
    max_tokens: [1, 0, -1, 1.5, 100_000_000, 100_000_001, null, "10"],
    max_completion_tokens: [1, 0, 2.5, null, "1"],
    n: [1, 8, 9, 0, null, 1.5],
    tools: [[], [{}], null, {}, "t"],
    temperature: [0.2, "hot"],
  })) {
    const value = maybe(pick(values as unknown[]));
    if (value !== undefined) body[field] = value;
  }
  return pick([body, body, body, body, null, [], "body"]);
}

test("the hot-path check never accepts a body the schema refuses, and accepts ordinary ones", () => {
  let seed = 42;
  const random = () => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
  let accepted = 0;
  for (let i = 0; i < 20_000; i++) {
    const body = randomBody(random);
    const quick = isPlainChatRequest(body);
    const schema = chatRequest.safeParse(body).success;
    if (quick) accepted++;
    expect({ body, quick, schema }).toEqual({ body, quick, schema: quick ? true : schema });
    expect(quick).toBe(schema); // the two agree both ways on these rules
  }
  expect(accepted).toBeGreaterThan(20);
  const ordinary = {
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: "hi" }],
    stream: true,
    stream_options: { include_usage: true },
    max_tokens: 10,
  };
  expect(isPlainChatRequest(ordinary)).toBe(true);
});
