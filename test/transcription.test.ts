/**
 * Transcriptions are billed by the audio, never by its headers: files whose header fields
 * understate their length tenfold, sent through the official `openai` client, are billed the
 * length the test generated: checked against hand-computed micro-toman, the simulator's own log
 * (it measures uploads with its own decoder, src/sim/audioLength.ts) and the usage record.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { simToneWav } from "../src/sim/audio.ts";
import { lyingFlac, lyingMp3, lyingMp4, lyingOgg, lyingVorbis, lyingWav, lyingWebm, type GeneratedAudio } from "./audioFiles.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";

/** whisper-1 at $0.006 a minute, 90,000 toman a dollar: 9 toman a second. */
const MICRO_PER_S = 9_000_000n;

let t: TestGateway;
let accountId: string;
let client: OpenAI;

beforeAll(async () => {
  t = await startTestGateway();
  const funded = await t.fundedKey(100_000);
  accountId = funded.accountId;
  client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: funded.key, maxRetries: 0 });
}, SETUP_MS_MAX);
afterAll(async () => t.stop(), SETUP_MS_MAX);

/** The key's wallet as it sees it (GET /v1/credits), and the usage record of `requestId` as operators see it. */
async function account(id: string, as: OpenAI, requestId?: string) {
  const credits = await as.get<{ balance_micro_toman: string }>("/credits");
  const { body } = await t.admin("GET", `/admin/accounts/${id}`);
  const usage = body.recent_usage.find((u: { request_id: string }) => u.request_id === requestId);
  return { balanceMicro: BigInt(credits.balance_micro_toman), usage };
}

const upload = (file: GeneratedAudio) => new File([file.bytes], file.name, { type: file.type });

describe("headers that understate the length tenfold", () => {
  // [what lies, the file, whole seconds generated (hand-computed), micro-toman]
  const cases: [string, GeneratedAudio, number, bigint][] = [
    ["WAV fact: 7.25 s", lyingWav(7.25), 8, 72_000_000n],
    ["MP3 Xing: 521 frames × 576 / 24 kHz = 12.504 s", lyingMp3(521), 13, 117_000_000n],
    ["FLAC STREAMINFO: 20.1 s", lyingFlac(20.1), 21, 189_000_000n],
    ["MP4 mvhd/tkhd/mdhd: 293 frames × 1,024 / 24 kHz = 12.501 s", lyingMp4(293), 13, 117_000_000n],
    ["fragmented MP4 (Safari) mvhd/tkhd/mdhd: 400 frames × 1,024 / 24 kHz = 17.067 s", lyingMp4(400, true), 18, 162_000_000n],
    ["Ogg Opus granules: 30.5 s", lyingOgg(30.5), 31, 279_000_000n],
    ["Ogg Vorbis granules: 12.5 s", lyingVorbis(), 13, 117_000_000n],
    ["WebM Duration, as a browser records it: 301 packets × 20 ms = 6.02 s", lyingWebm(301, true), 7, 63_000_000n],
  ];

  // `text` reports no duration, so its bill is the gateway's own reading; `json` carries the upstream's.
  const runs = cases.flatMap(([what, ...rest]) => (["text", "json"] as const).map((format) => [what, format, ...rest] as const));

  test.each(runs)("%s, as %s, is billed what was generated", async (_, format, file, seconds, micro) => {
    expect(Math.ceil(file.seconds)).toBe(seconds);
    expect(BigInt(seconds) * MICRO_PER_S).toBe(micro);
    const before = await account(accountId, client);
    const { data, response } = await client.audio.transcriptions
      .create({ model: "whisper-1", file: upload(file), response_format: format })
      .withResponse();
    expect(JSON.stringify(data).length).toBeGreaterThan(10);
    const requestId = response.headers.get("x-request-id")!;
    const after = await account(accountId, client, requestId);
    expect(before.balanceMicro - after.balanceMicro).toBe(micro);
    expect(t.sim!.log.byRequestId(requestId).map((e) => [e.operation, e.units])).toEqual([["transcription", seconds]]);
    expect(after.usage).toMatchObject({ input_units: String(seconds), billed_micro_toman: micro.toString(), status: 200 });
  });

  test("verbose_json relays the upstream's duration and bills the same", async () => {
    const file = lyingMp3(521);
    const before = await account(accountId, client);
    const data = await client.audio.transcriptions.create({ model: "whisper-1", file: upload(file), response_format: "verbose_json" });
    expect(data.duration).toBeCloseTo(12.504, 3);
    expect(before.balanceMicro - (await account(accountId, client)).balanceMicro).toBe(117_000_000n);
  });
});

test("a wallet that holds the decoded seconds but not the size bound is served, billed the decoded seconds", async () => {
  // 7.25 s of 24 kHz 16-bit PCM is 348,116 bytes: 44 s at the 8,000 B/s floor (396 toman), 8 s decoded (72 toman).
  const poor = await t.fundedKey(100);
  const poorClient = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: poor.key, maxRetries: 0 });
  const { response } = await poorClient.audio.transcriptions.create({ model: "whisper-1", file: upload(lyingWav(7.25)) }).withResponse();
  const after = await account(poor.accountId, poorClient, response.headers.get("x-request-id")!);
  expect([after.balanceMicro, after.usage?.input_units]).toEqual([100_000_000n - 72_000_000n, "8"]);
});

test("a file that is audio by none of its bytes is a 400 before any upstream call", async () => {
  const requests = t.sim!.log.totals.requests;
  const garbage = new Uint8Array(100_000).map((_, i) => (i * 7919) & 0xff);
  garbage.set(new TextEncoder().encode("RIFF\0\0\0\0WAVE"));
  for (const bytes of [garbage, new Uint8Array(50_000).fill(0xff)]) {
    const error = await client.audio.transcriptions.create({ model: "whisper-1", file: new File([bytes], "x.wav") }).catch((e) => e);
    expect([error.status, error.param]).toEqual([400, "file"]);
  }
  expect(t.sim!.log.totals.requests).toBe(requests);
});

describe("a codec the gateway does not time (IMA ADPCM in WAV)", () => {
  // simToneWav(3) is 144,044 bytes; tagged IMA ADPCM at 4 bits, the simulator plays its 144,000
  // data bytes at 24,000 × 4 / 8 = 12,000 B/s: 12 s. The gateway reads no ADPCM.
  const adpcm = () => {
    const bytes = Buffer.from(simToneWav(3));
    bytes.writeUInt16LE(0x11, 20);
    bytes.writeUInt16LE(4, 34);
    return new File([bytes], "voice.wav", { type: "audio/wav" });
  };

  test("json: billed the upstream's reported seconds", async () => {
    const before = await account(accountId, client);
    const { response } = await client.audio.transcriptions.create({ model: "whisper-1", file: adpcm() }).withResponse();
    const requestId = response.headers.get("x-request-id")!;
    const after = await account(accountId, client, requestId);
    expect(t.sim!.log.byRequestId(requestId).map((e) => e.units)).toEqual([12]);
    expect([before.balanceMicro - after.balanceMicro, after.usage?.input_units]).toEqual([108_000_000n, "12"]);
  });

  test("text (no report): billed the size bound, 144,044 B at 1,000 B/s = 144.044 s → 145 s", async () => {
    const before = await account(accountId, client);
    const { response } = await client.audio.transcriptions
      .create({ model: "whisper-1", file: adpcm(), response_format: "text" })
      .withResponse();
    const after = await account(accountId, client, response.headers.get("x-request-id")!);
    expect([before.balanceMicro - after.balanceMicro, after.usage?.input_units]).toEqual([1_305_000_000n, "145"]);
  });
});
