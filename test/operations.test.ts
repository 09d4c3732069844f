/**
 * Embeddings, images, speech and transcription through the official `openai` client against a
 * gateway on the suite's upstream simulator: replies match what the simulator made, and every call is
 * billed exactly (hand-computed constants, the simulator's log, the usage record).
 */
import { afterAll, beforeAll, describe, expect, setSystemTime, test } from "bun:test";
import OpenAI from "openai";
import { parseBuffer } from "music-metadata";
import { simSpeechSeconds, simToneWav, simTranscriptWords, SIM_SPEECH_SAMPLE_RATE } from "../src/sim/audio.ts";
import { simEmbedding } from "../src/sim/embeddings.ts";
import { simImage, simImageTokens } from "../src/sim/images.ts";
import { inflateSync } from "node:zlib";
import { SETUP_MS_MAX, startTestGateway, type TestGateway, until } from "./helpers.ts";
import { simCountTokens } from "../src/sim/tokens.ts";

/** Toman per 1M units at the seed rate (USD × 90,000): micro-toman per unit. */
const EMBEDDING_MICRO_PER_TOKEN = 1_800n; // text-embedding-3-small, $0.02/1M
const SPEECH_MICRO_PER_CHAR = 1_350_000n; // tts-1, $15/1M characters
const TRANSCRIPTION_MICRO_PER_S = 9_000_000n; // whisper-1, $0.006/minute
const DALLE2_256_MICRO = 1_440_000_000n; // dall-e-2 256x256, $0.016 an image
const DALLE3_HD_MICRO = 7_200_000_000n; // dall-e-3 1024x1024 hd, $0.08 an image
const GPT_IMAGE_1024_LOW_MICRO = 990_000_000n; // gpt-image-1 1024x1024 low, $0.011 an image: the bound of its usage

let t: TestGateway;
let key: string;
let accountId: string;
let client: OpenAI;

beforeAll(async () => {
  t = await startTestGateway({ MEDIA_TTL_S: "2" });
  ({ key, accountId } = await t.fundedKey(100_000));
  client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
}, SETUP_MS_MAX);
afterAll(async () => t.stop(), SETUP_MS_MAX);

async function balanceMicro(apiKey = key): Promise<bigint> {
  const response = await fetch(`${t.url}/v1/credits`, { headers: { authorization: `Bearer ${apiKey}` } });
  return BigInt(((await response.json()) as { balance_micro_toman: string }).balance_micro_toman);
}

/** The gateway's usage record and the simulator's log entry of one request. */
/** The request's usage record, once written (usage is recorded just after the reply), and the simulator's log of it. */
async function billing(requestId: string) {
  let record: { request_id: string; billed_micro_toman: string } | undefined;
  await until(async () => {
    const account = await t.admin("GET", `/admin/accounts/${accountId}`);
    record = account.body.recent_usage.find((u: { request_id: string }) => u.request_id === requestId);
    return record !== undefined;
  }, 10_000);
  const sim = t.sim!.log.byRequestId(requestId);
  return { record: record!, sim };
}

describe("embeddings", () => {
  test("the default (base64, decoded by the client) returns the simulator's vectors, billed per token", async () => {
    const before = await balanceMicro();
    const { data, response } = await client.embeddings
      .create({ model: "text-embedding-3-small", input: ["Hello, world!", "naïve café"] })
      .withResponse();
    expect(data.data.map((d) => d.embedding)).toEqual([
      simEmbedding("text-embedding-3-small", "Hello, world!"),
      simEmbedding("text-embedding-3-small", "naïve café"),
    ]);
    // Simulator tokens: Hello , world ! = 4; naïve café = 2.
    // The reply states its cost, in toman: the wallet's drop.
    expect(data.usage as object).toEqual({ prompt_tokens: 6, total_tokens: 6, cost: Number(6n * EMBEDDING_MICRO_PER_TOKEN) / 1e6 });
    expect(before - (await balanceMicro())).toBe(6n * EMBEDDING_MICRO_PER_TOKEN);
    const { record, sim } = await billing(response.headers.get("x-request-id")!);
    expect(sim.map((e) => [e.operation, e.units])).toEqual([["embeddings", 6]]);
    expect(record).toMatchObject({ input_units: "6", billed_micro_toman: (6n * EMBEDDING_MICRO_PER_TOKEN).toString(), status: 200 });
  });

  test("float encoding and dimensions pass through; token arrays are billed by their length", async () => {
    const floats = await client.embeddings.create({
      model: "text-embedding-3-small",
      input: "Hello",
      encoding_format: "float",
      dimensions: 8,
    });
    expect(floats.data[0]!.embedding).toEqual(simEmbedding("text-embedding-3-small", "Hello", 8));
    const before = await balanceMicro();
    const tokens = await client.embeddings.create({
      model: "text-embedding-3-small",
      input: [
        [1, 2, 3],
        [4, 5],
      ],
      encoding_format: "float",
    });
    expect(tokens.data[1]!.embedding).toEqual(simEmbedding("text-embedding-3-small", [4, 5]));
    expect(tokens.usage.prompt_tokens).toBe(5);
    expect(before - (await balanceMicro())).toBe(5n * EMBEDDING_MICRO_PER_TOKEN);
  });

  test("an empty input or a chat model is a 400 naming the field", async () => {
    const empty = await client.embeddings.create({ model: "text-embedding-3-small", input: "" }).catch((e) => e);
    expect(empty).toBeInstanceOf(OpenAI.BadRequestError);
    expect(empty.param).toBe("input");
    const chat = await client.embeddings.create({ model: "gpt-4o-mini", input: "x" }).catch((e) => e);
    expect([chat.status, chat.param]).toEqual([400, "model"]);
  });
});

describe("speech", () => {
  const input = "The gateway speaks in a steady voice."; // 37 characters
  const formats = [
    ["mp3", "audio/mpeg", "MPEG", "MPEG 2 Layer 3"],
    ["wav", "audio/wav", "WAVE", "PCM"],
    ["opus", "audio/opus", "Ogg", "Opus"],
    ["aac", "audio/aac", "ADTS/MPEG-4", "AAC"],
    ["flac", "audio/flac", "FLAC", "FLAC"],
  ] as const;

  test.each(formats)(
    "%s: the body parses as %s audio of the simulated length, billed per character",
    async (format, contentType, container, codec) => {
      const before = await balanceMicro();
      const response = await client.audio.speech.create({ model: "tts-1", voice: "alloy", input, response_format: format });
      expect(response.headers.get("content-type")).toBe(contentType);
      const audio = new Uint8Array(await response.arrayBuffer());
      const meta = await parseBuffer(audio, { mimeType: contentType }, { duration: true });
      expect([meta.format.container, meta.format.codec]).toEqual([container, codec]);
      // Every format follows the input: 37 characters at 15 a second.
      expect(Math.abs(meta.format.duration! - simSpeechSeconds(input))).toBeLessThan(0.1);
      expect(before - (await balanceMicro())).toBe(37n * SPEECH_MICRO_PER_CHAR);
      const { record, sim } = await billing(response.headers.get("x-request-id")!);
      expect(sim.map((e) => [e.operation, e.units])).toEqual([["speech", 37]]);
      expect(record).toMatchObject({ input_units: "37", billed_micro_toman: (37n * SPEECH_MICRO_PER_CHAR).toString() });
    },
  );

  test("pcm is raw 24 kHz 16-bit samples at half speed", async () => {
    const response = await client.audio.speech.create({ model: "tts-1", voice: "alloy", input, response_format: "pcm", speed: 0.5 });
    expect(response.headers.get("content-type")).toBe("audio/pcm");
    const bytes = (await response.arrayBuffer()).byteLength;
    expect(bytes).toBe(Math.round(simSpeechSeconds(input, 0.5) * SIM_SPEECH_SAMPLE_RATE) * 2);
  });

  test("input over 4,096 characters is a 400 before any upstream call", async () => {
    const requests = t.sim!.log.totals.requests;
    const error = await client.audio.speech.create({ model: "tts-1", voice: "alloy", input: "a".repeat(4_097) }).catch((e) => e);
    expect([error.status, error.param]).toEqual([400, "input"]);
    expect(t.sim!.log.totals.requests).toBe(requests);
  });
});

describe("transcriptions", () => {
  const seconds = 2.4; // billed as 3 seconds
  const wav = () => new File([simToneWav(seconds)], "tone.wav", { type: "audio/wav" });
  const text = `${simTranscriptWords(seconds).join(" ")}.`;

  test("json: the transcript, billed per second of the file's own duration, rounded up", async () => {
    const before = await balanceMicro();
    const { data, response } = await client.audio.transcriptions.create({ model: "whisper-1", file: wav() }).withResponse();
    expect(data.text).toBe(text);
    expect(before - (await balanceMicro())).toBe(3n * TRANSCRIPTION_MICRO_PER_S);
    const { record, sim } = await billing(response.headers.get("x-request-id")!);
    expect(sim.map((e) => [e.operation, e.units])).toEqual([["transcription", 3]]);
    expect(record).toMatchObject({ input_units: "3", billed_micro_toman: (3n * TRANSCRIPTION_MICRO_PER_S).toString() });
  });

  test("text, srt and vtt come back as text/plain", async () => {
    for (const format of ["text", "srt", "vtt"] as const) {
      const { data, response } = await client.audio.transcriptions
        .create({ model: "whisper-1", file: wav(), response_format: format })
        .withResponse();
      expect(response.headers.get("content-type")).toStartWith("text/plain");
      expect(String(data)).toContain(text);
      if (format === "srt") expect(String(data)).toContain("00:00:00,000 --> 00:00:02,400");
      if (format === "vtt") expect(String(data)).toStartWith("WEBVTT");
    }
  });

  test("verbose_json with word and segment timestamps", async () => {
    const data = await client.audio.transcriptions.create({
      model: "whisper-1",
      file: wav(),
      response_format: "verbose_json",
      timestamp_granularities: ["word", "segment"],
      language: "en",
      temperature: 0,
    });
    expect(data.duration).toBe(seconds);
    expect(data.language).toBe("en");
    expect(data.words!.map((w) => w.word)).toEqual(simTranscriptWords(seconds));
    expect(data.segments).toHaveLength(1);
  });

  test("the bare `timestamp_granularities` field name is read too", async () => {
    const form = new FormData();
    form.set("file", wav());
    form.set("model", "whisper-1");
    form.set("response_format", "verbose_json");
    form.set("timestamp_granularities", "word");
    const response = await fetch(`${t.url}/v1/audio/transcriptions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}` },
      body: form,
    });
    const body = (await response.json()) as { words?: unknown[]; segments?: unknown[] };
    expect([response.status, body.words?.length, body.segments]).toEqual([200, simTranscriptWords(seconds).length, undefined]);
  });

  test("a wrong extension or a file that is not audio is a 400; an oversized file is a 413", async () => {
    const requests = t.sim!.log.totals.requests;
    const before = await balanceMicro();
    const text = await client.audio.transcriptions.create({ model: "whisper-1", file: new File(["hello"], "notes.txt") }).catch((e) => e);
    expect([text.status, text.param, text.type]).toEqual([400, "file", "invalid_request_error"]);
    const fake = await client.audio.transcriptions
      .create({ model: "whisper-1", file: new File(["not audio at all"], "fake.wav") })
      .catch((e) => e);
    expect([fake.status, fake.param]).toEqual([400, "file"]);
    const huge = new File([new Uint8Array(25 * 1024 * 1024 + 1)], "huge.wav", { type: "audio/wav" });
    const large = await client.audio.transcriptions.create({ model: "whisper-1", file: huge }).catch((e) => e);
    expect(large.status).toBe(413);
    expect(large.error).toMatchObject({ type: "invalid_request_error", param: "file" });
    expect(large.message).toContain(String(25 * 1024 * 1024));
    expect(t.sim!.log.totals.requests).toBe(requests);
    expect(await balanceMicro()).toBe(before);
  });
});

/** Checks a PNG's structure: signature, chunk CRCs, IHDR size and the inflated pixel rows. */
function pngSize(bytes: Uint8Array): { width: number; height: number } {
  const buf = Buffer.from(bytes);
  expect(buf.subarray(0, 8)).toEqual(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
  let offset = 8;
  let width = 0;
  let height = 0;
  const idat: Buffer[] = [];
  while (offset < buf.length) {
    const length = buf.readUInt32BE(offset);
    const type = buf.toString("ascii", offset + 4, offset + 8);
    const data = buf.subarray(offset + 8, offset + 8 + length);
    expect(buf.readUInt32BE(offset + 8 + length)).toBe(Bun.hash.crc32(buf.subarray(offset + 4, offset + 8 + length)));
    if (type === "IHDR") [width, height] = [data.readUInt32BE(0), data.readUInt32BE(4)];
    if (type === "IDAT") idat.push(data);
    offset += 12 + length;
  }
  expect(inflateSync(Buffer.concat(idat)).length).toBe((width * 3 + 1) * height);
  return { width, height };
}

describe("images", () => {
  test("url: a link on the gateway's own origin to a valid PNG, gone after its lifetime", async () => {
    const before = await balanceMicro();
    const { data, response } = await client.images
      .generate({ model: "dall-e-2", prompt: "a river stone", size: "256x256", n: 2, response_format: "url" })
      .withResponse();
    expect(data.data).toHaveLength(2);
    expect(before - (await balanceMicro())).toBe(2n * DALLE2_256_MICRO);
    const { record, sim } = await billing(response.headers.get("x-request-id")!);
    expect(sim.map((e) => [e.operation, e.units])).toEqual([["images", 2]]);
    expect(record).toMatchObject({ input_units: "2", billed_micro_toman: (2n * DALLE2_256_MICRO).toString() });
    const url = data.data![0]!.url!;
    expect(url.startsWith(`${t.url}/v1/media/med_`)).toBe(true);
    expect(url).not.toContain(t.sim!.url);
    const image = await fetch(url);
    expect(image.headers.get("content-type")).toBe("image/png");
    const bytes = new Uint8Array(await image.arrayBuffer());
    expect(pngSize(bytes)).toEqual({ width: 256, height: 256 });
    expect(Buffer.from(bytes).equals(simImage("a river stone", 256, 256, 0))).toBe(true);
    // MEDIA_TTL_S is 2 in this suite; the gateway runs in this process, so its wall clock moves
    // past the lifetime instead of the test waiting it out.
    setSystemTime(new Date(Date.now() + 2_500));
    const gone = await fetch(url).finally(() => setSystemTime());
    expect(gone.status).toBe(404);
    expect(((await gone.json()) as { error: { type: string } }).error.type).toBe("invalid_request_error");
  });

  test("b64_json: the PNG bytes inline, billed by size and quality", async () => {
    const before = await balanceMicro();
    const data = await client.images.generate({
      model: "dall-e-3",
      prompt: "a green window",
      size: "1024x1024",
      quality: "hd",
      response_format: "b64_json",
    });
    const bytes = Buffer.from(data.data![0]!.b64_json!, "base64");
    expect(pngSize(bytes)).toEqual({ width: 1024, height: 1024 });
    expect(data.data![0]!.revised_prompt).toBe("A simulated picture of: a green window");
    expect(before - (await balanceMicro())).toBe(DALLE3_HD_MICRO);
    // Billed per image, as OpenAI's dall-e replies: no usage (the header tells the cost).
    expect(data.usage).toBeUndefined();
  });

  test("gpt-image-1 without a format: b64_json, as OpenAI answers for GPT image models", async () => {
    const before = await balanceMicro();
    const { data, response } = await client.images
      .generate({ model: "gpt-image-1", prompt: "a quiet pier", size: "1024x1024", quality: "low" })
      .withResponse();
    expect(data.data![0]!.url).toBeUndefined();
    const bytes = Buffer.from(data.data![0]!.b64_json!, "base64");
    expect(pngSize(bytes)).toEqual({ width: 1024, height: 1024 });
    // Billed from the reply's usage, within the per-image price.
    const { record } = await billing(response.headers.get("x-request-id")!);
    const charged = before - (await balanceMicro());
    expect(charged).toBe(BigInt(record.billed_micro_toman));
    expect(charged).toBeGreaterThan(0n);
    expect(charged).toBeLessThanOrEqual(GPT_IMAGE_1024_LOW_MICRO);
    // The usage OpenAI sends for GPT image models: the simulator's (honest) counts, and what they cost.
    const text = simCountTokens("a quiet pier");
    const output = simImageTokens(1024, 1024, "low");
    expect(data.usage).toEqual({
      total_tokens: text + output,
      input_tokens: text,
      output_tokens: output,
      input_tokens_details: { text_tokens: text, image_tokens: 0 },
      cost: Number(charged) / 1_000_000,
    } as never);
    expect(response.headers.get("x-darvaze-cost")).toBe(charged.toString());
  });

  test("gpt-image-1: a 29,720-character prompt costs its text tokens more than a 30-character one ($5 per 1M)", async () => {
    const charge = async (prompt: string) => {
      const before = await balanceMicro();
      const { response } = await client.images.generate({ model: "gpt-image-1", prompt, size: "1024x1024", quality: "low" }).withResponse();
      await billing(response.headers.get("x-request-id")!);
      return before - (await balanceMicro());
    };
    const short = "a quiet pier at dawn, gulls..."; // 30 characters
    const long = "a quiet pier at dawn, gulls, ".repeat(1_025).slice(0, 29_720);
    expect([short.length, long.length]).toEqual([30, 29_720]);
    // The vendor bills the prompt's text tokens (the simulator's own count) at $5 per 1M × 90,000.
    const textMicroPerToken = 450_000n;
    const extraTokens = BigInt(simCountTokens(long) - simCountTokens(short));
    expect(extraTokens).toBeGreaterThan(6_000n);
    expect((await charge(long)) - (await charge(short))).toBe(extraTokens * textMicroPerToken);
  });

  test("a size or quality the model does not price is a 400 naming it", async () => {
    const size = await client.images.generate({ model: "dall-e-3", prompt: "x", size: "256x256" }).catch((e) => e);
    expect([size.status, size.param]).toEqual([400, "size"]);
    const quality = await client.images.generate({ model: "dall-e-2", prompt: "x", quality: "hd" }).catch((e) => e);
    expect([quality.status, quality.param]).toEqual([400, "quality"]);
  });
});

describe("admission", () => {
  test("an unaffordable request of each kind is a 402 before any upstream call", async () => {
    const poor = await t.fundedKey(5); // 5 toman
    const poorClient = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: poor.key, maxRetries: 0 });
    const requests = t.sim!.log.totals.requests;
    const calls = [
      () => poorClient.images.generate({ model: "dall-e-3", prompt: "x", quality: "hd", response_format: "b64_json" }),
      () => poorClient.audio.speech.create({ model: "tts-1", voice: "alloy", input: "four characters each".repeat(4) }),
      () => poorClient.audio.transcriptions.create({ model: "whisper-1", file: new File([simToneWav(1)], "a.wav") }),
      () =>
        poorClient.embeddings.create({
          model: "text-embedding-3-small",
          input: [[1, 2, 3]].concat(Array.from({ length: 2000 }, () => Array(100).fill(7))),
        }),
    ];
    for (const call of calls) {
      const error = await call().catch((e) => e);
      expect(error).toBeInstanceOf(OpenAI.APIError);
      expect([error.status, error.code]).toEqual([402, "insufficient_quota"]);
    }
    expect(t.sim!.log.totals.requests).toBe(requests);
    expect(await balanceMicro(poor.key)).toBe(5_000_000n);
  });

  test("a failing upstream is a 502 for each operation, settled once at zero", async () => {
    const sim = t.sim!;
    const before = await balanceMicro();
    sim.options.failRate = 1;
    try {
      const calls = [
        () => client.embeddings.create({ model: "text-embedding-3-small", input: "x" }),
        () => client.images.generate({ model: "dall-e-2", prompt: "x", size: "256x256" }),
        () => client.audio.speech.create({ model: "tts-1", voice: "alloy", input: "x" }),
        () => client.audio.transcriptions.create({ model: "whisper-1", file: new File([simToneWav(1)], "a.wav") }),
      ];
      for (const call of calls) expect((await call().catch((e) => e)).status).toBe(502);
    } finally {
      sim.options.failRate = 0;
    }
    expect(await balanceMicro()).toBe(before);
    const account = await t.admin("GET", `/admin/accounts/${accountId}`);
    const failures = account.body.recent_usage.filter((u: { status: number }) => u.status === 502);
    expect(failures.map((u: { billed_micro_toman: string }) => u.billed_micro_toman)).toEqual(["0", "0", "0", "0"]);
  });

  test("embeddings whose byte bound does not fit the wallet are counted exactly, admitted and billed at use", async () => {
    const poor = await t.fundedKey(5); // 5 toman: 2,777 tokens
    const poorClient = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: poor.key, maxRetries: 0 });
    const input = Array(1_000).fill("hello").join(" "); // 5,999 bytes (10.8 toman), 1,000 tokens (1.8 toman)
    const data = await poorClient.embeddings.create({ model: "text-embedding-3-small", input });
    expect(data.usage.prompt_tokens).toBe(1_000);
    expect(5_000_000n - (await balanceMicro(poor.key))).toBe(1_000n * EMBEDDING_MICRO_PER_TOKEN);
  });
});

describe("catalog", () => {
  test("/v1/models shows each operation's pricing units", async () => {
    const models = new Map(
      (await client.models.list()).data.map((m) => [m.id, m as unknown as { operation: string; pricing: Record<string, any> }]),
    );
    expect(models.get("text-embedding-3-small")).toMatchObject({
      operation: "embeddings",
      pricing: { input: 1_800, per: 1_000_000, currency: "toman" },
    });
    expect(models.get("tts-1")).toMatchObject({ operation: "speech", pricing: { character: 1_350_000 } });
    expect(models.get("whisper-1")).toMatchObject({ operation: "transcription", pricing: { audio_second: 9_000_000, per_second: 9 } });
    expect(models.get("dall-e-3")!.pricing.per_image).toEqual({
      "1024x1024": { standard: 3_600, hd: 7_200 },
      "1024x1792": { standard: 7_200, hd: 10_800 },
      "1792x1024": { standard: 7_200, hd: 10_800 },
    });
    expect(models.get("dall-e-2")!.pricing.per_image["256x256"]).toEqual({ standard: 1_440 });
    expect(models.get("gemini-embedding-001")).toMatchObject({ operation: "embeddings", pricing: { input: 13_500 } });
  });
});
