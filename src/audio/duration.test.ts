import { describe, expect, test } from "bun:test";
import { parseBuffer } from "music-metadata";
import {
  fragmentedM4a,
  lyingFlac,
  lyingMp3,
  lyingMp4,
  lyingOgg,
  lyingVorbis,
  lyingWav,
  lyingWebm,
  m4a,
  AAC_FRAME_SAMPLES,
  MP3_FRAME_BYTES,
  XING_FRAME_BYTES,
  type GeneratedAudio,
} from "../../test/audioFiles.ts";
import { SIM_SPEECH_SAMPLE_RATE, simSpeechAudio, simToneWav } from "../sim/audio.ts";
import { audioDuration, secondsBound } from "./duration.ts";
import { vorbisModes } from "./ogg.ts";

const RATE = SIM_SPEECH_SAMPLE_RATE;
const seconds = (bytes: Uint8Array) => audioDuration(bytes)?.seconds;

describe("honest files are their own length", () => {
  test.each([
    ["wav", "wav", 0],
    ["flac", "flac", 0],
    ["opus", "ogg", 0],
    // lamejs adds its encoder delay and pads to whole 576-sample frames; AAC pads to 1,024.
    ["mp3", "mpeg", 0.08],
    ["aac", "mpeg", AAC_FRAME_SAMPLES / RATE],
  ] as const)("%s", (format, container, slack) => {
    for (const length of [0.5, 2.4667, 61.25]) {
      const found = audioDuration(simSpeechAudio(format, length));
      expect(found?.container).toBe(container);
      expect(found!.seconds!).toBeGreaterThanOrEqual(length - 0.001);
      expect(found!.seconds! - length).toBeLessThanOrEqual(slack + 0.001);
    }
  });

  test("ogg vorbis: packets by their modes' block sizes, the last granule trimming the last page", async () => {
    const honest = new Uint8Array(
      await Bun.file(new URL("../../test/fixtures/audio/tone-12.5s.vorbis.ogg", import.meta.url)).arrayBuffer(),
    );
    expect(audioDuration(honest)).toEqual({ container: "ogg", seconds: 12.5 });
    // A setup header whose modes cannot be found leaves Vorbis unread rather than guessed.
    expect(vorbisModes(new Uint8Array(4_000).fill(0x5a))).toBeNull();
    expect(vorbisModes(new Uint8Array(0))).toBeNull();
  });

  test("m4a: frames × 1,024 at the codec's rate", () => {
    expect(audioDuration(m4a(300, { statedSeconds: 12.8 }))).toEqual({ container: "mp4", seconds: (300 * AAC_FRAME_SAMPLES) / RATE });
  });
});

describe("headers that understate tenfold are not read", () => {
  const cases: [string, GeneratedAudio][] = [
    ["wav with a lying fact", lyingWav(12.5)],
    ["mp3 with a lying Xing count", lyingMp3(521)],
    ["flac with a lying STREAMINFO total", lyingFlac(12.5)],
    ["m4a with lying mvhd/tkhd/mdhd", lyingMp4(293)],
    ["fragmented mp4 (as Safari records) with lying mvhd/tkhd/mdhd", lyingMp4(293, true)],
    ["ogg with granules divided by ten", lyingOgg(12.5)],
    ["ogg vorbis with granules divided by ten", lyingVorbis()],
    ["webm with a lying Info Duration", lyingWebm(625)],
  ];
  test.each(cases)("%s", async (_, file) => {
    // The lie is real: a header parser reads about a tenth.
    const meta = await parseBuffer(new Uint8Array(file.bytes), { mimeType: file.type, path: file.name }, { duration: true });
    expect(meta.format.duration!).toBeLessThan(file.seconds / 5);
    // Opus counts whole 20 ms packets; the generator trims the last one with the granule it lied about.
    expect(seconds(file.bytes)!).toBeGreaterThanOrEqual(file.seconds);
    expect(seconds(file.bytes)! - file.seconds).toBeLessThan(0.02);
  });

  test("webm as a browser records it (unknown sizes): the Opus blocks present", () => {
    expect(audioDuration(lyingWebm(625, true).bytes)).toEqual({ container: "webm", seconds: 12.5 });
    expect(audioDuration(lyingWebm(0, true).bytes)).toEqual({ container: "webm", seconds: 0 });
    for (const lacing of ["xiph", "ebml"] as const)
      expect(audioDuration(lyingWebm(625, true, lacing).bytes)).toEqual({ container: "webm", seconds: 12.5 });
  });

  test("m4a whose sample tables list a tenth of the payload is bounded by the payload", () => {
    const file = m4a(300, { statedSeconds: 1.28, listed: 30 });
    const found = seconds(file)!;
    // The unlisted frames count at the listed frames' bytes per second: about the real length.
    expect(Math.abs(found - (300 * AAC_FRAME_SAMPLES) / RATE)).toBeLessThan(0.5);
  });
});

describe("wav data sizes", () => {
  const honest = simToneWav(3);
  const withDataSize = (size: number) => {
    const copy = Buffer.from(honest);
    copy.writeUInt32LE(size, 40);
    return copy;
  };
  test("a data size larger than the file, or unset, is the file", () => {
    expect(seconds(withDataSize(0xffffffff))).toBe(3);
    expect(seconds(withDataSize(honest.length * 10))).toBe(3);
  });
  test("bytes after a short data chunk that form no chunk are audio", () => {
    expect(seconds(withDataSize(4_800))).toBe(3);
  });
  test("a format that is not PCM, or a sample rate beyond reason, has no decoded length", () => {
    const adpcm = Buffer.from(honest);
    adpcm.writeUInt16LE(0x11, 20);
    expect(audioDuration(adpcm)).toEqual({ container: "wav", seconds: null });
    const fast = Buffer.from(honest);
    fast.writeUInt32LE(4_000_000_000, 24);
    expect(audioDuration(fast)).toEqual({ container: "wav", seconds: null });
  });
  test("the declared byte rate and block align are not read", () => {
    const lying = Buffer.from(honest);
    lying.writeUInt32LE(48_000 * 100, 28);
    lying.writeUInt16LE(200, 32);
    expect(seconds(lying)).toBe(3);
  });
});

describe("mp3 resynchronises on garbage and skips ID3v2", () => {
  test("garbage between frames is not counted, frames after it are", () => {
    const file = lyingMp3(100);
    const audio = file.bytes.subarray(XING_FRAME_BYTES);
    const garbage = Buffer.alloc(5_000, 0xff);
    garbage.fill(0x5a, 2_000, 3_000);
    const joined = Buffer.concat([audio.subarray(0, 50 * MP3_FRAME_BYTES), garbage, audio.subarray(50 * MP3_FRAME_BYTES)]);
    expect(seconds(joined)).toBe(file.seconds);
  });
  test("an ID3v2 tag is skipped by its size", () => {
    const file = lyingMp3(100);
    const tag = Buffer.alloc(10 + 300);
    tag.write("ID3", 0, "ascii");
    tag[3] = 4;
    tag[9] = 300 & 0x7f;
    tag[8] = 300 >> 7;
    tag.fill(0xff, 10); // sync-like bytes inside the tag
    expect(audioDuration(Buffer.concat([tag, file.bytes]))).toEqual({ container: "mpeg", seconds: file.seconds });
  });
});

describe("truncated files and garbage never throw", () => {
  const files = [
    simSpeechAudio("wav", 3),
    simSpeechAudio("mp3", 3),
    simSpeechAudio("flac", 3),
    simSpeechAudio("opus", 3),
    simSpeechAudio("aac", 3),
    m4a(100, { statedSeconds: 4 }),
    fragmentedM4a(100, { statedSeconds: 4, perFragment: 30 }),
    lyingWebm(150, true).bytes,
    lyingVorbis().bytes,
  ];
  test("every cut of each file reads as at most its whole length", () => {
    for (const file of files) {
      const whole = seconds(file) ?? 0;
      for (const cut of [0, 1, 4, 12, 13, 27, 44, 100, 1_000, Math.floor(file.length / 2), file.length - 1]) {
        const part = audioDuration(file.subarray(0, cut));
        expect(part === null || part.seconds === null || part.seconds <= whole + 0.001).toBe(true);
      }
    }
  });
  test("half of a file is about half its length", () => {
    for (const file of [
      simSpeechAudio("wav", 4),
      simSpeechAudio("mp3", 4),
      simSpeechAudio("flac", 4),
      simSpeechAudio("opus", 4),
      lyingWebm(200, true).bytes,
    ]) {
      const half = seconds(file.subarray(0, file.length / 2))!;
      expect(Math.abs(half - 2)).toBeLessThan(0.3);
    }
  });

  const random = (n: number, seed: number) => {
    const out = new Uint8Array(n);
    let x = seed;
    for (let i = 0; i < n; i++) out[i] = (x = (x * 1_103_515_245 + 12_345) >>> 0) >>> 24;
    return out;
  };
  const magics = ["RIFF\0\0\0\0WAVEfmt ", "fLaC", "OggS", "\x1a\x45\xdf\xa3", "\0\0\0\x20ftypM4A ", "ID3\x04\0\0\0\0\0\x10"];
  test("random bytes behind every container's magic", () => {
    for (const magic of magics) {
      for (const seed of [1, 2, 3]) {
        const bytes = random(200_000, seed);
        bytes.set(new TextEncoder().encode(magic).subarray(0, magic.length));
        for (let i = 0; i < magic.length; i++) bytes[i] = magic.charCodeAt(i);
        const found = audioDuration(bytes);
        expect(found === null || found.seconds === null || found.seconds >= 0).toBe(true);
      }
    }
  });
  test("sync floods: 0xFF everywhere, or a sync pattern every other byte", () => {
    const flood = new Uint8Array(2_000_000).fill(0xff);
    expect(audioDuration(flood)).toBeNull();
    for (const second of [0xf3, 0xf8, 0xf1]) {
      const pattern = new Uint8Array(2_000_000);
      for (let i = 0; i < pattern.length; i += 2) [pattern[i], pattern[i + 1]] = [0xff, second];
      expect(() => audioDuration(pattern)).not.toThrow();
      const flac = Buffer.concat([Buffer.from("fLaC"), pattern]);
      expect(() => audioDuration(flac)).not.toThrow();
    }
  });
  test("nested or endless MP4 boxes", () => {
    const deep = Buffer.alloc(10_000);
    for (let at = 0; at + 8 <= deep.length; at += 8) {
      deep.writeUInt32BE(deep.length - at, at);
      deep.write("moov", at + 4, "ascii");
    }
    deep.write("ftyp", 4, "ascii");
    expect(audioDuration(deep)).toEqual({ container: "mp4", seconds: 0 });
  });
});

test("the size bound is the bytes at the container's lowest byte rate", () => {
  expect(secondsBound({ container: "mpeg", seconds: 1 }, 25 * 1024 * 1024)).toBe(26_214.4);
  expect(secondsBound({ container: "wav", seconds: 1 }, 8_000)).toBe(1);
  // A WAV codec that is not read may be as lean as 8 kbit/s.
  expect(secondsBound({ container: "wav", seconds: null }, 8_000)).toBe(8);
  // An honest file's decoded seconds never exceed its bound.
  for (const format of ["wav", "mp3", "opus"] as const) {
    const file = simSpeechAudio(format, 5);
    const found = audioDuration(file)!;
    expect(found.seconds!).toBeLessThan(secondsBound(found, file.length));
  }
});
