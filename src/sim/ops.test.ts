import { afterAll, beforeAll, expect, test } from "bun:test";
import { parseBuffer } from "music-metadata";
import { simSpeechSeconds } from "./audio.ts";
import { simEmbedding } from "./embeddings.ts";
import { simImage } from "./images.ts";
import { startSimulator, type Simulator } from "./server.ts";

let sim: Simulator;
beforeAll(async () => {
  sim = await startSimulator();
});
afterAll(() => sim.stop());

const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${sim.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-request-id": "r-ops", ...headers },
    body: JSON.stringify(body),
  });

test("speech in mp3 transcribes back to its own length, and both are logged with their units", async () => {
  sim.log.clear();
  const input = "Every request gets one reply.";
  const speech = await post("/v1/audio/speech", { model: "tts-1", voice: "alloy", input, response_format: "mp3" });
  const mp3 = new Uint8Array(await speech.arrayBuffer());
  const meta = await parseBuffer(mp3, { mimeType: "audio/mpeg" }, { duration: true });
  expect(Math.abs(meta.format.duration! - simSpeechSeconds(input))).toBeLessThan(0.1);
  const form = new FormData();
  form.set("file", new File([mp3], "speech.mp3", { type: "audio/mpeg" }));
  form.set("model", "whisper-1");
  const transcript = await fetch(`${sim.url}/v1/audio/transcriptions`, { method: "POST", body: form });
  expect(((await transcript.json()) as { usage: { seconds: number } }).usage.seconds).toBe(Math.ceil(meta.format.duration!));
  expect(sim.log.entries().map((e) => [e.operation, e.units])).toEqual([
    ["speech", [...input].length],
    ["transcription", Math.ceil(meta.format.duration!)],
  ]);
});

test("images by URL are served by the simulator; embeddings are the documented vectors", async () => {
  const reply = (await (
    await post("/v1/images/generations", { model: "dall-e-2", prompt: "stone", size: "64x32", response_format: "url" })
  ).json()) as {
    data: { url: string }[];
  };
  const png = Buffer.from(await (await fetch(reply.data[0]!.url)).arrayBuffer());
  expect(png.equals(simImage("stone", 64, 32))).toBe(true);
  const embeddings = (await (await post("/v1/embeddings", { model: "e", input: ["a b"], dimensions: 3 })).json()) as {
    data: { embedding: number[] }[];
    usage: { prompt_tokens: number };
  };
  expect(embeddings.data[0]!.embedding).toEqual(simEmbedding("e", "a b", 3));
  expect(embeddings.usage.prompt_tokens).toBe(2);
});

test("operations roll 429s like chat does, and log them with no units", async () => {
  sim.log.clear();
  sim.options.rateLimitRate = 1;
  try {
    const refused = await post("/v1/embeddings", { model: "e", input: "x" });
    expect([refused.status, refused.headers.get("retry-after")]).toEqual([429, "1"]);
  } finally {
    sim.options.rateLimitRate = 0;
  }
  expect(sim.log.entries().map((e) => [e.operation, e.status, e.units])).toEqual([["embeddings", 429, 0]]);
});
