import { expect, test } from "bun:test";
import { zodFailure } from "../../errors.ts";
import { CHAT_ADAPTER_EXTRAS, chatMessage, chatRequest, isPlainChatRequest } from "./schema.ts";

/** Random bodies near the edges of every rule the hot path checks, and some it leaves to zod. */
function randomBody(random: () => number): unknown {
  const pick = <T>(values: T[]): T => values[Math.floor(random() * values.length)]!;
  const maybe = <T>(value: T) => (random() < 0.7 ? undefined : value);
  const message = () =>
    pick([
      { role: "user", content: "hi" },
      { role: "user", content: "hi" },
      {
        role: pick(["user", "system", "assistant", "tool", "robot", "", 5]),
        content: pick(["hi", "", null, [{ type: "text", text: "x" }], 5, {}, undefined]),
      },
      { role: "user", content: "x", name: pick(["n", 5, null, undefined]) },
      {
        role: "user",
        content: [
          pick([
            { type: "text", text: "x", extra: 1 },
            { type: "image_url", image_url: { url: "u" } },
            { type: "text" },
            { type: "video" },
          ]),
        ],
      },
      { role: "user", content: "x", [pick(["tool_call_id", "secret", "audio"])]: "y" },
      pick([null, "text", [], 7]),
    ]);
  const body: Record<string, unknown> = {
    model: pick(["gpt-4o-mini", "gpt-4o-mini", "gpt-4o-mini", "", "x".repeat(256), "x".repeat(257), 42, null, undefined]),
    messages: pick([[message()], [message()], [message()], [message(), message()], [], "messages", null, undefined]),
  };
  for (const [field, values] of Object.entries({
    stream: [true, false, null, "yes", 1],
    stream_options: [{ include_usage: true }, { include_usage: "yes" }, {}, null, [], "x", { continuous_usage_stats: true }, { leak: 1 }],
    max_tokens: [1, 0, -1, 1.5, 100_000_000, 100_000_001, null, "10"],
    max_completion_tokens: [1, 0, 2.5, null, "1"],
    n: [1, 8, 9, 0, null, 1.5],
    tools: [[], [{}], null, {}, "t", [{ type: "function", function: { name: "f" } }]],
    temperature: [0.2, "hot", 3, null],
    top_p: [1, 1.5],
  })) {
    const value = maybe(pick(values as unknown[]));
    if (value !== undefined) body[field] = value;
  }
  return pick([body, body, body, body, null, [], "body"]);
}

test("the hot-path check never accepts a body the schema refuses, and accepts ordinary ones", () => {
  let seed = 42; // mulberry32: integer arithmetic, no short cycles
  const random = () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
  let accepted = 0;
  let leftToZod = 0;
  for (let i = 0; i < 20_000; i++) {
    const body = randomBody(random);
    const quick = isPlainChatRequest(body);
    const schema = chatRequest.safeParse(body).success;
    if (quick) accepted++;
    if (!quick && schema) leftToZod++;
    expect({ body, quick, schema }).toEqual({ body, quick, schema: quick ? true : schema });
  }
  expect(accepted).toBeGreaterThan(20);
  expect(leftToZod).toBeGreaterThan(20); // bodies with tools or image parts: valid, but zod's to check
  const ordinary = {
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: "hi" }],
    stream: true,
    stream_options: { include_usage: true },
    max_tokens: 10,
    temperature: 0.7,
  };
  expect(isPlainChatRequest(ordinary)).toBe(true);
});

const base = { model: "m", messages: [{ role: "user", content: "hi" }] };
const refusal = (body: unknown) => {
  expect(isPlainChatRequest(body)).toBe(false);
  const parsed = chatRequest.safeParse(body);
  expect(parsed.success).toBe(false);
  return zodFailure(parsed.error!);
};

test("an unknown field anywhere is refused with a 400 naming it", () => {
  expect(refusal({ ...base, guided_json: {} })).toMatchObject({ code: "invalid_request", param: "guided_json" });
  expect(refusal({ ...base, messages: [{ role: "user", content: "hi", secret: "x" }] }).param).toBe("messages.0.secret");
  expect(refusal({ ...base, messages: [{ role: "user", content: [{ type: "text", text: "", data: "x".repeat(1000) }] }] }).param).toBe(
    "messages.0.content.0.data",
  );
  expect(refusal({ ...base, stream_options: { include_usage: true, leak: 1 } }).param).toBe("stream_options.leak");
  expect(refusal({ ...base, tools: [{ type: "function", function: { name: "f", extra: 1 } }] }).param).toBe("tools.0.function.extra");
  expect(refusal({ ...base, response_format: { type: "json_schema", json_schema: { name: "x", schema: {}, more: 1 } } }).param).toBe(
    "response_format.json_schema.more",
  );
  expect(refusal({ ...base, tools: [{ type: "function", function: { name: "f".repeat(65) } }] }).param).toBe("tools.0.function.name");
});

test("the spec's fields and the adapters' named extras are accepted", () => {
  const full = {
    ...base,
    messages: [
      { role: "system", content: "be brief", name: "s" },
      {
        role: "user",
        content: [
          { type: "text", text: "look" },
          { type: "image_url", image_url: { url: "https://x/y.png", detail: "low" } },
          { type: "input_audio", input_audio: { data: "AAAA", format: "wav" } },
          { type: "file", file: { filename: "a.pdf", file_data: "data:application/pdf;base64,AAAA" } },
        ],
      },
      { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "get", arguments: "{}" } }] },
      { role: "tool", tool_call_id: "c1", content: "sunny" },
    ],
    tools: [{ type: "function", function: { name: "get", description: "d", parameters: { type: "object" }, strict: true } }],
    tool_choice: { type: "function", function: { name: "get" } },
    functions: [{ name: "old", parameters: {} }],
    function_call: { name: "old" },
    response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object" }, strict: true } },
    stream: true,
    stream_options: { include_usage: true, continuous_usage_stats: true },
    stop: ["a", "b"],
    logit_bias: { "50256": -100 },
    seed: 1,
    user: "u",
    metadata: { a: "b" },
    reasoning_effort: "low",
    service_tier: "auto",
    store: false,
  };
  const parsed = chatRequest.safeParse(full);
  expect(parsed.error?.issues ?? []).toEqual([]);
});

type SpecSchema = {
  properties?: Record<string, unknown>;
  allOf?: { $ref?: string }[];
  oneOf?: { $ref?: string }[];
  anyOf?: SpecSchema[];
  $ref?: string;
};
const spec = (await Bun.file(new URL("../../../test/fixtures/openai-chat-request.schema.json", import.meta.url)).json()) as {
  components: { schemas: Record<string, SpecSchema> };
};
const specSchema = (ref: string) => spec.components.schemas[ref.split("/").pop()!]!;

/** The properties of a schema, through allOf and $ref. */
function specProperties(schema: SpecSchema): string[] {
  const own = Object.keys(schema.properties ?? {});
  const inherited = (schema.allOf ?? []).flatMap((part) => specProperties(part.$ref ? specSchema(part.$ref) : (part as SpecSchema)));
  return [...new Set([...own, ...inherited])].sort();
}

test("the gateway knows exactly the spec's fields of the request and of its messages, plus named extras", () => {
  const extrasAt = (prefix: string) =>
    CHAT_ADAPTER_EXTRAS.filter((path) => path.startsWith(prefix) && !path.slice(prefix.length).includes(".")).map((path) =>
      path.slice(prefix.length),
    );
  expect(Object.keys(chatRequest.shape).sort()).toEqual(
    [...specProperties(specSchema("CreateChatCompletionRequest")), ...extrasAt("")].sort(),
  );
  const roles = specSchema("ChatCompletionRequestMessage").oneOf!.map((option) => specSchema(option.$ref!));
  expect(Object.keys(chatMessage.shape).sort()).toEqual([...new Set(roles.flatMap(specProperties)), ...extrasAt("messages.")].sort());
  const streamOptions = specSchema("ChatCompletionStreamOptions").anyOf![0]!;
  const extras = CHAT_ADAPTER_EXTRAS.filter((path) => path.startsWith("stream_options.")).map((path) => path.split(".")[1]!);
  expect(Object.keys(chatRequest.shape.stream_options.unwrap().unwrap().shape).sort()).toEqual(
    [...specProperties(streamOptions), ...extras].sort(),
  );
});
