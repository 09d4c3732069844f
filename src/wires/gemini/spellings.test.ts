/** Both spellings of a Gemini field: read either, refuse both at once, name an unknown one as sent. */
import { expect, test } from "bun:test";
import { isFailure } from "../../errors.ts";
import { failureToGoogleError } from "./errors.ts";
import { generateContentToChat } from "./request.ts";

const contents = [{ role: "user", parts: [{ text: "Hi" }] }];
const refusal = (body: unknown) => {
  const out = generateContentToChat(body, "gpt-4o-mini", false);
  if (!isFailure(out)) throw new Error("answered");
  return failureToGoogleError(out);
};

test("snake_case fields as Google's curl examples send them are read", () => {
  const out = generateContentToChat(
    { contents, system_instruction: { parts: [{ text: "Be brief." }] }, generation_config: { max_output_tokens: 3 } },
    "gpt-4o-mini",
    false,
  );
  if (isFailure(out)) throw new Error(out.message);
  expect(out.chat.max_tokens).toBe(3);
  expect((out.chat.messages as unknown[])[0]).toEqual({ role: "system", content: "Be brief." });
});

test("one field in both spellings is a 400 naming both", () => {
  const { status, body } = refusal({ contents, generationConfig: { maxOutputTokens: 3, max_output_tokens: 4 } });
  expect(status).toBe(400);
  expect(body.error.status).toBe("INVALID_ARGUMENT");
  expect(body.error.message).toContain("`max_output_tokens` and `maxOutputTokens`");
});

test("an unknown field is named as sent, in either spelling; `__proto__` is a field like any other", () => {
  expect(refusal({ contents, generationConfig: { speech_config: {} } }).body.error.message).toBe(
    "Unrecognized request argument supplied: generationConfig.speech_config",
  );
  expect(refusal({ contents, generation_config: { speechConfig: {} } }).body.error.message).toBe(
    "Unrecognized request argument supplied: generationConfig.speechConfig",
  );
  const proto = JSON.parse('{"contents":[{"parts":[{"text":"Hi"}]}],"generation_config":{"__proto__":{"x":1}}}');
  expect(refusal(proto).body.error.message).toBe("Unrecognized request argument supplied: generationConfig.__proto__");
});

test("a Google schema's keywords in snake_case, as google-genai sends a pydantic model, become JSON Schema's; its property names stay", () => {
  const responseSchema = {
    type: "OBJECT",
    properties: {
      max_items: { type: "ARRAY", items: { type: "INTEGER" }, max_items: "3", min_items: 1 },
      c: { any_of: [{ type: "INTEGER" }, { type: "STRING", max_length: 5 }] },
    },
    property_ordering: ["max_items", "c"],
    required: ["max_items"],
  };
  const out = generateContentToChat(
    { contents, generationConfig: { response_mime_type: "application/json", response_schema: responseSchema } },
    "gpt-4o-mini",
    false,
  );
  if (isFailure(out)) throw new Error(out.message);
  expect(out.chat.response_format).toEqual({
    type: "json_schema",
    json_schema: {
      name: "response",
      schema: {
        type: "object",
        properties: {
          max_items: { type: "array", items: { type: "integer" }, maxItems: 3, minItems: 1 },
          c: { anyOf: [{ type: "integer" }, { type: "string", maxLength: 5 }] },
        },
        propertyOrdering: ["max_items", "c"],
        required: ["max_items"],
      },
    },
  });
});

test("a keyword Google's schema does not have is a 400 naming it", () => {
  const parameters = { type: "OBJECT", properties: { city: { type: "STRING" } }, additionalProperties: false };
  expect(refusal({ contents, tools: [{ functionDeclarations: [{ name: "f", parameters }] }] }).body.error.message).toBe(
    "Unrecognized request argument supplied: tools.0.functionDeclarations.0.parameters.additionalProperties",
  );
});
