/**
 * The reserve's prompt bound against the honest simulator, by property: for chat bodies with data
 * in every place the OpenAI spec allows (test/fixtures/openai-chat-request.schema.json), in any
 * script, the cheap bound is never below what the simulator bills for the request as each adapter
 * sends it (OpenAI-style as is, Anthropic and Gemini translated).
 */
import { expect, test } from "bun:test";
import fc from "fast-check";
import { openAIToAnthropicRequest } from "../../providers/anthropic/request.ts";
import { openAIToGeminiRequest } from "../../providers/gemini/request.ts";
import { chatToOpenAIRequest } from "../../providers/openai/request.ts";
import { anthropicSimMessages, parseAnthropicRequest, simAnthropicExtraTokens } from "../../sim/anthropic.ts";
import { geminiSimMessages, parseGeminiRequest, simGeminiExtraTokens } from "../../sim/gemini.ts";
import { simChatPromptTokens, simPromptTokens } from "../../sim/tokens.ts";
import { promptTokensUpperBound } from "../../tokens/count.ts";
import { chatRequest, type ChatRequest } from "./schema.ts";

/** Text in any script: graphemes (emoji sequences, combining marks), any code point, lone surrogates, punctuation runs. */
const text = (maxLength = 40) =>
  fc.oneof(
    fc.string({ unit: "grapheme", maxLength }),
    fc.string({ unit: "binary", maxLength }),
    fc.string({ unit: fc.constantFrom("\ud800", "\udfff", '"', "\\", "\n", "{", "}", ":", ",", "!", "🙂", "سلام", "ab"), maxLength }),
  );
/** Function names as the spec allows them, up to 64 characters of which every dash is a token. */
const name = fc.oneof(fc.stringMatching(/^[A-Za-z0-9_-]{1,64}$/), fc.constantFrom("a-".repeat(32), "-".repeat(64)));
/** A JSON Schema-like object: nested records, arrays and numbers (1e21 serializes as 1e+21). */
const jsonObject = fc.dictionary(text(12), fc.jsonValue({ maxDepth: 3, stringUnit: "binary" }), { maxKeys: 6 });
const schema = fc.oneof(
  jsonObject,
  fc.constant({ type: "object", properties: { city: { type: "string", description: "x".repeat(2_000) } } }),
);

const textPart = fc.record({ type: fc.constant("text"), text: text() });
const part = fc.oneof(
  textPart,
  fc.record({
    type: fc.constant("image_url"),
    image_url: fc.record(
      {
        url: fc.oneof(fc.constant("https://x.io/a.png"), fc.constant("data:image/png;base64,AAAA")),
        detail: fc.constantFrom("auto", "low", "high"),
      },
      { requiredKeys: ["url"] },
    ),
  }),
  fc.record({
    type: fc.constant("input_audio"),
    input_audio: fc.record({ data: fc.base64String({ maxLength: 40 }), format: fc.constantFrom("wav", "mp3") }),
  }),
  fc.record({
    type: fc.constant("file"),
    file: fc.record({ filename: text(), file_data: fc.base64String({ maxLength: 40 }) }, { requiredKeys: [] }),
  }),
);
const toolCall = fc.record({
  id: text(10),
  type: fc.constant("function"),
  function: fc.record({
    name,
    arguments: fc.oneof(
      text(),
      jsonObject.map((o) => JSON.stringify(o)),
    ),
  }),
});

const message = fc.oneof(
  fc.record(
    {
      role: fc.constantFrom("system", "developer"),
      content: fc.oneof(text(200), fc.array(textPart, { minLength: 1, maxLength: 3 })),
      name: text(10),
    },
    { requiredKeys: ["role", "content"] },
  ),
  fc.record(
    { role: fc.constant("user"), content: fc.oneof(text(200), fc.array(part, { minLength: 1, maxLength: 4 })), name: text(10) },
    { requiredKeys: ["role", "content"] },
  ),
  fc.record(
    {
      role: fc.constant("assistant"),
      content: fc.oneof(
        fc.constant(null),
        text(100),
        fc.array(fc.oneof(textPart, fc.record({ type: fc.constant("refusal"), refusal: text() })), { minLength: 1, maxLength: 2 }),
      ),
      refusal: text(),
      name: text(10),
      audio: fc.record({ id: text(10) }),
      tool_calls: fc.array(toolCall, { minLength: 1, maxLength: 3 }),
      function_call: fc.record({ name, arguments: text() }),
    },
    { requiredKeys: ["role"] },
  ),
  fc.record({
    role: fc.constant("tool"),
    content: fc.oneof(text(100), fc.array(textPart, { minLength: 1, maxLength: 2 })),
    tool_call_id: text(10),
  }),
  fc.record({ role: fc.constant("function"), content: fc.oneof(text(100), fc.constant(null)), name }),
);

/** A call and its answers: tool messages that name the call's id, as clients send them. */
const toolExchange = fc
  .record({ id: text(6), name, answers: fc.array(text(4), { minLength: 1, maxLength: 24 }) })
  .map(({ id, name, answers }) => [
    { role: "assistant", content: null, tool_calls: [{ id, type: "function", function: { name, arguments: "{}" } }] },
    ...answers.map((content) => ({ role: "tool", tool_call_id: id, content })),
  ]);
const conversation = fc
  .array(
    fc.oneof(
      message.map((m) => [m]),
      toolExchange,
    ),
    { minLength: 1, maxLength: 6 },
  )
  .map((segments) => segments.flat());

const functionObject = fc.record({ name, description: text(300), parameters: schema }, { requiredKeys: ["name"] });
/** Every optional field a model reads or that steers it, each with its arbitrary. */
const fields = {
  max_tokens: fc.integer({ min: 1, max: 1_000 }),
  tools: fc.array(
    fc.record({
      type: fc.constant("function"),
      function: fc.record({ name, description: text(300), parameters: schema, strict: fc.boolean() }, { requiredKeys: ["name"] }),
    }),
    { maxLength: 3 },
  ),
  tool_choice: fc.oneof(
    fc.constantFrom("none", "auto", "required"),
    fc.record({ type: fc.constant("function"), function: fc.record({ name }) }),
  ),
  functions: fc.array(functionObject, { minLength: 1, maxLength: 3 }),
  function_call: fc.oneof(fc.constantFrom("none", "auto"), fc.record({ name })),
  response_format: fc.oneof(
    fc.constant({ type: "text" }),
    fc.constant({ type: "json_object" }),
    fc.record({
      type: fc.constant("json_schema"),
      json_schema: fc.record({ name: text(20), description: text(100), schema, strict: fc.boolean() }, { requiredKeys: ["name"] }),
    }),
  ),
  prediction: fc.record({ type: fc.constant("content"), content: fc.oneof(text(100), fc.array(textPart, { minLength: 1, maxLength: 2 })) }),
  stop: fc.array(text(10), { minLength: 1, maxLength: 4 }),
  metadata: fc.dictionary(text(8), text(8), { maxKeys: 3 }),
  user: text(20),
};
const body = fc.record({ model: fc.constant("m"), messages: conversation, ...fields }, { requiredKeys: ["model", "messages"] });
/** One field beside a one-word message: no other field's bytes leave slack to hide a shortfall. */
const leanBodies = Object.entries(fields).map(([field, arbitrary]) =>
  arbitrary.map((value) => ({ model: "m", messages: [{ role: "user", content: "x" }], [field]: value })),
);

/** What the simulator bills for the request each adapter would send (0 when it would refuse it). */
function simulatorBills(request: ChatRequest): { openai: number; anthropic: number; gemini: number } {
  const input = { body: request, upstreamModel: "upstream-model", maxTokens: 100, stream: false };
  const openai = simChatPromptTokens(JSON.parse(chatToOpenAIRequest(input, "k").body));
  const anthropicBody = parseAnthropicRequest(JSON.parse(openAIToAnthropicRequest(input, "k").body));
  const anthropic =
    typeof anthropicBody === "string" ? 0 : simPromptTokens(anthropicSimMessages(anthropicBody)) + simAnthropicExtraTokens(anthropicBody);
  const geminiBody = parseGeminiRequest(JSON.parse(openAIToGeminiRequest(input, "k").body));
  const gemini = typeof geminiBody === "string" ? 0 : simPromptTokens(geminiSimMessages(geminiBody)) + simGeminiExtraTokens(geminiBody);
  return { openai, anthropic, gemini };
}

/** Checks one body; returns what the OpenAI-style upstream bills for it. */
function expectBoundCovers(generated: unknown): number {
  const parsed = chatRequest.safeParse(generated);
  expect(parsed.error?.issues ?? []).toEqual([]); // the generator writes only what the spec allows
  const request = parsed.data!;
  const raw = JSON.stringify(generated); // compact: the fewest bytes a client can send
  const bound = promptTokensUpperBound(request, () => Buffer.byteLength(raw, "utf8"));
  const bills = simulatorBills(request);
  expect({ bound, ...bills }).toEqual({
    bound,
    openai: Math.min(bills.openai, bound),
    anthropic: Math.min(bills.anthropic, bound),
    gemini: Math.min(bills.gemini, bound),
  });
  return bills.openai;
}

test("the prompt bound covers what the simulator bills, through every adapter", () => {
  let billedMax = 0;
  const check = (generated: unknown) => void (billedMax = Math.max(billedMax, expectBoundCovers(generated)));
  fc.assert(fc.property(body, check), { numRuns: 300, seed: 20_261_123 });
  // Lean bodies, a conversation or one field and nothing else: no other bytes leave slack to hide a shortfall.
  fc.assert(fc.property(fc.record({ model: fc.constant("m"), messages: conversation }), check), { numRuns: 300, seed: 20_261_124 });
  fc.assert(fc.property(fc.oneof(...leanBodies), check), { numRuns: 300, seed: 20_261_125 });
  expect(billedMax).toBeGreaterThan(1_000); // the generators reached large prompts
});

test("a 400 KB JSON schema is bounded by its bytes, not by the few tokens of the messages", () => {
  const properties: Record<string, unknown> = {};
  for (let i = 0; i < 5_000; i++) properties[`field_${i}`] = { type: "string", description: `value number ${i} of the record, as text` };
  const generated = {
    model: "m",
    messages: [{ role: "user", content: "Hi" }],
    max_tokens: 1,
    response_format: { type: "json_schema", json_schema: { name: "big", schema: { type: "object", properties } } },
  };
  const raw = JSON.stringify(generated);
  expect(raw.length).toBeGreaterThan(400_000);
  const request = chatRequest.parse(generated);
  const bills = simulatorBills(request);
  expect(bills.openai).toBeGreaterThan(100_000);
  expect(promptTokensUpperBound(request, () => raw.length)).toBeGreaterThanOrEqual(Math.max(bills.openai, bills.anthropic, bills.gemini));
});
