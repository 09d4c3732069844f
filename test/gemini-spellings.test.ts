/**
 * Gemini's snake_case spellings through the gateway, as real clients send them: the two requests
 * of google-genai's (Python) automatic function calling, recorded (test/fixtures/clients), and
 * Google's curl examples' `system_instruction` and `max_output_tokens`. The simulator calls a
 * tool named in the prompt with arguments built from the schema it was sent, so a call with a
 * `city` proves `parameters_json_schema` arrived.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import recorded from "./fixtures/clients/google-genai-function-calling.json";
import type { Simulator } from "../src/sim/server.ts";
import { SETUP_MS_MAX, type TestGateway } from "./helpers.ts";
import { startWireSuite, UPSTREAM_KEY_ENV, VENDORS } from "./wires.ts";

let sim: Simulator;
let t: TestGateway;
let key: string;

beforeAll(async () => {
  ({ sim, t, key } = await startWireSuite({
    pools: (simUrl) => ({
      "text-embedding-3-small": {
        backends: [{ name: "openai-embed", kind: "openai", url: `${simUrl}/v1`, api_key_env: UPSTREAM_KEY_ENV, region: "abroad" }],
      },
    }),
  }));
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  await sim?.stop();
});

async function post(model: string, action: string, body: unknown) {
  const res = await fetch(`${t.url}/v1beta/models/${model}:${action}`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-goog-api-key": key },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

describe.each(VENDORS.filter((v) => v.kind !== "openai-responses"))("$model ($kind backend)", ({ model }) => {
  test("google-genai's function calling: the tool's parameters_json_schema arrives, the call has its argument", async () => {
    const [call, answer] = recorded.requests;
    const first = await post(model, "generateContent", call);
    expect(first.status).toBe(200);
    const parts = first.body.candidates[0].content.parts as { functionCall?: { name: string; args: Record<string, unknown> } }[];
    const made = parts.find((p) => p.functionCall)?.functionCall;
    expect(made?.name).toBe("get_weather");
    expect(typeof made?.args.city).toBe("string");
    const second = await post(model, "generateContent", answer);
    expect(second.status).toBe(200);
    expect(second.body.candidates[0].content.parts[0].text).toBeString();
  });

  test("Google's curl spellings: system_instruction and generationConfig.max_output_tokens are read", async () => {
    const body = {
      system_instruction: { parts: [{ text: "Be brief." }] },
      contents: [{ parts: [{ text: "Tell me a long story." }] }],
      generationConfig: { max_output_tokens: 3 },
    };
    const reply = await post(model, "generateContent", body);
    expect(reply.status).toBe(200);
    expect(reply.body.usageMetadata.candidatesTokenCount).toBeLessThanOrEqual(3);
    expect(reply.body.candidates[0].finishReason).toBe("MAX_TOKENS");
  });
});

test("an embedding request's output_dimensionality and task_type are read", async () => {
  const body = { content: { parts: [{ text: "hello" }] }, task_type: "RETRIEVAL_DOCUMENT", output_dimensionality: 8 };
  const reply = await post("text-embedding-3-small", "embedContent", body);
  expect(reply.status).toBe(200);
  expect(reply.body.embedding.values).toHaveLength(8);
});

test("an unknown field, in either spelling, is a 400 in Google's shape naming it", async () => {
  const reply = await post("gpt-4o-mini", "generateContent", {
    contents: [{ parts: [{ text: "Hi" }] }],
    generation_config: { speech_config: {} },
  });
  expect(reply.status).toBe(400);
  expect(reply.body.error).toEqual({
    code: 400,
    status: "INVALID_ARGUMENT",
    message: "Unrecognized request argument supplied: generationConfig.speech_config",
  });
});
