/**
 * Residency holds for every paid operation, whatever asks for it: a key whose setting is
 * `in-country` never reaches an abroad backend, even when that backend is the faster one and
 * would win every pick. The simulators' own logs are the evidence.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { simToneWav } from "../src/sim/audio.ts";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";

let t: TestGateway;
const started: Simulator[] = [];

beforeAll(async () => {
  t = await startTestGateway();
}, SETUP_MS_MAX);

afterAll(async () => {
  await t.stop();
  await Promise.all(started.map((s) => s.stop()));
}, SETUP_MS_MAX);

/** One call of each operation, as the official client makes it. */
const OPERATIONS: { name: string; model: string; call: (c: OpenAI) => Promise<unknown> }[] = [
  {
    name: "chat",
    model: "llama-3.3-70b-instruct",
    call: (c) =>
      c.chat.completions.create({ model: "llama-3.3-70b-instruct", messages: [{ role: "user", content: "Salaam" }], max_tokens: 5 }),
  },
  {
    name: "chat stream",
    model: "llama-3.3-70b-instruct",
    call: async (c) => {
      for await (const _ of await c.chat.completions.create({
        model: "llama-3.3-70b-instruct",
        messages: [{ role: "user", content: "Salaam" }],
        stream: true,
      })) {
      }
    },
  },
  {
    name: "embeddings",
    model: "text-embedding-3-small",
    call: (c) => c.embeddings.create({ model: "text-embedding-3-small", input: "Salaam" }),
  },
  {
    name: "images",
    model: "dall-e-2",
    call: (c) => c.images.generate({ model: "dall-e-2", prompt: "a river stone", size: "256x256", response_format: "b64_json" }),
  },
  {
    name: "speech",
    model: "tts-1",
    call: async (c) => (await c.audio.speech.create({ model: "tts-1", voice: "alloy", input: "Salaam" })).arrayBuffer(),
  },
  {
    name: "transcription",
    model: "whisper-1",
    call: (c) => c.audio.transcriptions.create({ model: "whisper-1", file: new File([simToneWav(2)], "tone.wav", { type: "audio/wav" }) }),
  },
];

describe("a key that must stay in the country", () => {
  for (const op of OPERATIONS) {
    test(`${op.name}: nothing reaches the faster abroad backend; without the setting it wins`, async () => {
      const home = await startSimulator({ ttftMs: 40, outputTokens: 5 });
      const away = await startSimulator({ ttftMs: 0, outputTokens: 5 });
      started.push(home, away);
      const reply = await t.admin("PUT", `/admin/pools/${op.model}`, {
        backends: [
          { name: "home", kind: "openai", url: `${home.url}/v1`, region: "in-country" },
          // Faster, and weighted far above the other: it would win every pick.
          { name: "away", kind: "openai", url: `${away.url}/v1`, region: "abroad", weight: 1_000 },
        ],
      });
      expect(reply.status).toBe(200);
      const { key: residentKey } = await t.fundedKey(100_000, { residency: "in-country" });
      const { key: freeKey } = await t.fundedKey(100_000);
      const resident = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: residentKey, maxRetries: 0 });
      const free = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: freeKey, maxRetries: 0 });

      // The control: without the key's setting the pool learns that abroad is faster and sends it most.
      for (let i = 0; i < 12; i++) await op.call(free);
      const awayServed = away.log.totals.requests;
      expect(awayServed).toBeGreaterThan(home.log.totals.requests);
      const homeServed = home.log.totals.requests;
      for (let i = 0; i < 6; i++) await op.call(resident);
      expect(away.log.totals.requests).toBe(awayServed);
      expect(home.log.totals.requests).toBe(homeServed + 6);
    }, 60_000);
  }
});
