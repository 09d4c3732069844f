import { expect, test } from "bun:test";
import { openAISpeech, openAITranscription } from "./audio.ts";
import { base64ToFloats, floatsToBase64, openAIEmbeddings, parseOpenAIEmbeddings } from "./embeddings.ts";
import { openAIImages, parseOpenAIImages } from "./images.ts";

const auth = { authorization: "Bearer up-key" };

test("embeddings ask the upstream for base64 and decode either encoding, in index order", () => {
  const request = openAIEmbeddings(auth).buildEmbeddingsRequest({ body: { input: ["a"], dimensions: 4 }, upstreamModel: "up-model" })!;
  expect(JSON.parse(request.body as string)).toEqual({ input: ["a"], dimensions: 4, model: "up-model", encoding_format: "base64" });
  expect(request.headers.authorization).toBe("Bearer up-key");
  const vector = [0.5, -0.25, 1, Math.fround(0.1)];
  expect(base64ToFloats(floatsToBase64(vector))).toEqual(vector);
  const reply = parseOpenAIEmbeddings(
    JSON.stringify({
      data: [
        { index: 1, embedding: [1, 2] },
        { index: 0, embedding: floatsToBase64([3, 4]) },
      ],
      usage: { prompt_tokens: 7 },
    }),
  );
  expect(reply).toEqual({
    vectors: [
      [3, 4],
      [1, 2],
    ],
    inputTokens: 7,
  });
  expect("code" in parseOpenAIEmbeddings('{"data": 1}')).toBe(true);
});

test("images: GPT image models get no response_format; replies give bytes or a URL", () => {
  const images = openAIImages(auth);
  const gpt = JSON.parse(
    images.buildImagesRequest({ body: { prompt: "p", response_format: "url" }, upstreamModel: "gpt-image-1" }).body as string,
  );
  expect(gpt.response_format).toBeUndefined();
  const dalle = JSON.parse(
    images.buildImagesRequest({ body: { prompt: "p", response_format: "url" }, upstreamModel: "dall-e-3" }).body as string,
  );
  expect(dalle.response_format).toBe("url");
  expect(
    parseOpenAIImages(JSON.stringify({ data: [{ b64_json: "AAA=" }, { url: "https://cdn.example/x.png", revised_prompt: "r" }] })),
  ).toEqual({
    images: [
      { b64: "AAA=", revisedPrompt: undefined },
      { url: "https://cdn.example/x.png", revisedPrompt: "r" },
    ],
  });
  expect("code" in parseOpenAIImages(JSON.stringify({ data: [{}] }))).toBe(true);
});

test("speech is JSON; transcription is a multipart form with the upstream model and repeated fields", async () => {
  const speech = openAISpeech(auth).buildSpeechRequest({ body: { input: "hi", voice: "alloy" }, upstreamModel: "tts-up" });
  expect([speech.path, JSON.parse(speech.body as string).model]).toEqual(["/audio/speech", "tts-up"]);
  const file = new File([new Uint8Array([1, 2, 3])], "a.wav", { type: "audio/wav" });
  const request = openAITranscription(auth).buildTranscriptionRequest({
    body: { fields: { response_format: "verbose_json", "timestamp_granularities[]": ["word", "segment"] }, file },
    upstreamModel: "whisper-up",
  });
  const form = request.body as FormData;
  expect(request.headers["content-type"]).toBeUndefined();
  expect(form.get("model")).toBe("whisper-up");
  expect(form.getAll("timestamp_granularities[]")).toEqual(["word", "segment"]);
  expect(new Uint8Array(await (form.get("file") as File).arrayBuffer())).toEqual(new Uint8Array([1, 2, 3]));
});
