import { expect, test } from "bun:test";
import { GEMINI_EMBEDDING_INPUTS_MAX, geminiEmbeddings, geminiEmbeddingsToReply } from "./embeddings.ts";
import { geminiErrorToFailure } from "./errors.ts";

test("builds one batchEmbedContents request with the key header and output dimensions", () => {
  const request = geminiEmbeddings("g-key").buildEmbeddingsRequest({
    body: { input: ["hello", "world"], dimensions: 8 },
    upstreamModel: "gemini-embedding-001",
  })!;
  expect(request.path).toBe("/models/gemini-embedding-001:batchEmbedContents");
  expect(request.headers["x-goog-api-key"]).toBe("g-key");
  expect(request.headers.authorization).toBeUndefined();
  expect(JSON.parse(request.body as string)).toEqual({
    requests: [
      { model: "models/gemini-embedding-001", content: { parts: [{ text: "hello" }] }, outputDimensionality: 8 },
      { model: "models/gemini-embedding-001", content: { parts: [{ text: "world" }] }, outputDimensionality: 8 },
    ],
  });
});

test("token arrays are not built: the pool skips a Gemini backend for them", () => {
  const request = geminiEmbeddings("g-key").buildEmbeddingsRequest({ body: { input: [[1, 2, 3]] }, upstreamModel: "m" });
  expect(request).toBeUndefined();
});

test("reads the vectors in order and reports no token count", () => {
  const reply = geminiEmbeddingsToReply(JSON.stringify({ embeddings: [{ values: [0.5, -1] }, { values: [2, 3] }] }));
  expect(reply).toEqual({
    vectors: [
      [0.5, -1],
      [2, 3],
    ],
    inputTokens: null,
  });
  expect("code" in geminiEmbeddingsToReply("{}")).toBe(true);
});

test("maps Gemini's error reply", () => {
  const failure = geminiErrorToFailure(400, JSON.stringify({ error: { code: 400, message: "bad text", status: "INVALID_ARGUMENT" } }));
  expect(failure).toMatchObject({ code: "invalid_request", message: "bad text", retryable: false });
  expect(geminiErrorToFailure(503, "").retryable).toBe(true);
});

test("more inputs than one Gemini batch takes are not built, so the pool tries another backend", () => {
  const adapter = geminiEmbeddings("g-key");
  const input = (n: number) => ({ body: { input: Array.from({ length: n }, () => "x") }, upstreamModel: "gemini-embedding-001" });
  expect(adapter.inputsMax).toBe(GEMINI_EMBEDDING_INPUTS_MAX);
  expect(adapter.buildEmbeddingsRequest(input(GEMINI_EMBEDDING_INPUTS_MAX))).toBeDefined();
  expect(adapter.buildEmbeddingsRequest(input(GEMINI_EMBEDDING_INPUTS_MAX + 1))).toBeUndefined();
});
