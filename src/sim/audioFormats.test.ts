import { describe, expect, test } from "bun:test";
import { parseBuffer } from "music-metadata";
import { SIM_SPEECH_SAMPLE_RATE, simSpeechAudio } from "./audio.ts";
import { flacFrameNumber } from "./audioFormats.ts";

/** One AAC frame (1,024 samples at 24 kHz): the coarsest step of any of the three formats. */
const AAC_FRAME_S = 1_024 / SIM_SPEECH_SAMPLE_RATE;

describe.each([
  ["opus", "audio/opus", "Ogg", "Opus", 0.001],
  ["aac", "audio/aac", "ADTS/MPEG-4", "AAC", AAC_FRAME_S],
  ["flac", "audio/flac", "FLAC", "FLAC", 0.001],
] as const)("%s speech lasts as long as asked", (format, mimeType, container, codec, tolerance) => {
  test.each([0.5, 2.4667, 61.25])("%p s", async (seconds) => {
    const meta = await parseBuffer(simSpeechAudio(format, seconds), { mimeType }, { duration: true });
    expect([meta.format.container, meta.format.codec, meta.format.sampleRate]).toEqual([container, codec, SIM_SPEECH_SAMPLE_RATE]);
    expect(meta.format.duration).toBeGreaterThanOrEqual(seconds - 0.001);
    expect(meta.format.duration! - seconds).toBeLessThanOrEqual(tolerance);
  });
});

test("FLAC frame numbers are coded as UTF-8 codes their value", () => {
  for (const n of [0, 1, 127, 128, 1_000, 0x7ff, 0x800, 3_516, 0xffff, 0x10000, 0x10ffff]) {
    expect(flacFrameNumber(n)).toEqual([...new TextEncoder().encode(String.fromCodePoint(n))]);
  }
});
