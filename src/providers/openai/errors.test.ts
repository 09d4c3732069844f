import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { openAIErrorToFailure } from "./errors.ts";
import { OpenAIStreamDecoder } from "./stream.ts";

const fixture = (name: string) => readFileSync(new URL(`../../../test/fixtures/openai/${name}`, import.meta.url), "utf8");

test("vLLM's bare error object with an integer code: a context-length refusal keeps its message", () => {
  const failure = openAIErrorToFailure(400, fixture("vllm-error-context.json"));
  expect(failure.code).toBe("context_length_exceeded");
  expect(failure.message).toContain("maximum context length is 4096");
  expect(failure.retryable).toBe(false);
});

test("vLLM's nested error with an integer code: a 404 is worth another backend", () => {
  const failure = openAIErrorToFailure(404, fixture("vllm-error-nested.json"));
  expect(failure.code).toBe("upstream_error");
  expect(failure.retryable).toBe(true);
});

test("TGI's string error is read as the message of a refused request", () => {
  const failure = openAIErrorToFailure(422, fixture("tgi-error.json"));
  expect(failure.code).toBe("invalid_request");
  expect(failure.message).toContain("Input validation error");
});

test("an error body sent with status 200 takes its status from vLLM's integer code", () => {
  expect(openAIErrorToFailure(200, '{"object":"error","message":"bad","code":400}').code).toBe("invalid_request");
  expect(openAIErrorToFailure(200, "not json").code).toBe("upstream_error");
});

test("OpenAI's own error: 429 and 5xx are retryable upstream errors, 401 hides the upstream's words", () => {
  const body =
    '{"error":{"message":"Incorrect API key provided: sk-abc","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}';
  const unauthorized = openAIErrorToFailure(401, body);
  expect(unauthorized.message).not.toContain("sk-abc");
  expect(openAIErrorToFailure(429, body).retryable).toBe(true);
  expect(openAIErrorToFailure(503, "").retryable).toBe(true);
});

test("vLLM's bare error object mid-stream becomes a failure after the frames before it", () => {
  const out = new OpenAIStreamDecoder().push(fixture("vllm-error-midstream.sse"));
  expect(out.frames.map((f) => f.text).join("")).toBe("Hi");
  expect(out.error?.code).toBe("upstream_error");
  expect(out.error?.message).toContain("The engine loop has stopped.");
});
