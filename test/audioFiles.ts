/**
 * Audio files of a known length whose header fields understate it tenfold, for the transcription
 * billing tests. Each generator knows its true length by construction (samples written, frames
 * repeated), never by parsing what it wrote:
 *
 *   WAV:  the simulator's tone, with a `fact` chunk stating a tenth of the samples;
 *   MP3:  lamejs's 144-byte CBR frames (24 kHz mono, 48 kbit/s, 576 samples each) repeated,
 *         behind a Xing frame that counts a tenth of them;
 *   FLAC: the simulator's FLAC, with STREAMINFO's total samples a tenth of the real count;
 *   MP4:  an M4A of the AAC fixture's frames (1,024 samples at 24 kHz each) whose mvhd, tkhd and
 *         mdhd durations are a tenth (the sample tables honest), or whose tables list a tenth,
 *         or a fragmented one (as Safari records) with the same lying durations;
 *   Ogg:  the simulator's Opus, or a Vorbis fixture, with every granule position divided by ten;
 *   WebM: the Opus fixture's 20 ms packets in SimpleBlocks, its Info Duration a tenth.
 */
import { Mp3Encoder } from "@breezystack/lamejs";
import { readFileSync } from "node:fs";
import { simToneWav, simSpeechAudio, SIM_SPEECH_SAMPLE_RATE } from "../src/sim/audio.ts";
import { oggPage, oggPages } from "../src/sim/audioFormats.ts";

export interface GeneratedAudio {
  bytes: Buffer;
  /** The length the generator wrote. */
  seconds: number;
  name: string;
  type: string;
}

const RATE = SIM_SPEECH_SAMPLE_RATE;
export const MP3_FRAME_BYTES = 144;
export const MP3_FRAME_SAMPLES = 576;
export const AAC_FRAME_SAMPLES = 1_024;

export function lyingWav(seconds: number): GeneratedAudio {
  const honest = simToneWav(seconds);
  const samples = Math.round(seconds * RATE);
  const fact = Buffer.alloc(12);
  fact.write("fact", 0, "ascii");
  fact.writeUInt32LE(4, 4);
  fact.writeUInt32LE(Math.round(samples / 10), 8);
  const bytes = Buffer.concat([honest.subarray(0, 36), fact, honest.subarray(36)]);
  bytes.writeUInt32LE(bytes.length - 8, 4);
  return { bytes, seconds: samples / RATE, name: "tone.wav", type: "audio/wav" };
}

/** lamejs's frames of a second of tone: each a whole 144-byte frame. */
function mp3Frames(): Buffer[] {
  const encoder = new Mp3Encoder(1, RATE, 48);
  const tone = new Int16Array(RATE).map((_, i) => Math.round(8_000 * Math.sin((2 * Math.PI * 440 * i) / RATE)));
  const bytes = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
  const all = Buffer.concat([bytes(encoder.encodeBuffer(tone)), bytes(encoder.flush())]);
  const frames: Buffer[] = [];
  for (let at = 0; at < all.length; at += MP3_FRAME_BYTES) frames.push(all.subarray(at, at + MP3_FRAME_BYTES));
  return frames;
}

/** A 16 kbit/s frame at 24 kHz: the Xing frame's size (a bit rate of its own, as in a VBR file). */
export const XING_FRAME_BYTES = 48;

/**
 * A Xing frame like LAME writes first: the stream's header at 16 kbit/s, empty side info, then
 * "Xing", flags (frames and bytes present), a frame count and a byte count.
 */
export function xingFrame(header: Buffer, frames: number, bytes: number): Buffer {
  const frame = Buffer.alloc(XING_FRAME_BYTES);
  header.copy(frame, 0, 0, 4);
  frame[2] = (2 << 4) | (frame[2]! & 0x0f); // bit-rate index 2: 16 kbit/s
  frame.write("Xing", 4 + 9, "ascii"); // MPEG-2 mono: 9 bytes of side info
  frame.writeUInt32BE(0x3, 4 + 9 + 4);
  frame.writeUInt32BE(frames, 4 + 9 + 8);
  frame.writeUInt32BE(bytes, 4 + 9 + 12);
  return frame;
}

/** An MP3 of `frames` audio frames (576 samples at 24 kHz each), its Xing frame counting a tenth. */
export function lyingMp3(frameCount: number): GeneratedAudio {
  const frames = mp3Frames();
  const audio = Array.from({ length: frameCount }, (_, i) => frames[i % frames.length]!);
  const stated = Math.round(frameCount / 10);
  const bytes = Buffer.concat([xingFrame(frames[0]!, stated, stated * MP3_FRAME_BYTES), ...audio]);
  return { bytes, seconds: (frameCount * MP3_FRAME_SAMPLES) / RATE, name: "tone.mp3", type: "audio/mpeg" };
}

export function lyingFlac(seconds: number): GeneratedAudio {
  const bytes = Buffer.from(simSpeechAudio("flac", seconds));
  const samples = BigInt(Math.round(seconds * RATE));
  const packed = bytes.readBigUInt64BE(18);
  bytes.writeBigUInt64BE((packed & ~0xfffffffffn) | (samples / 10n), 18);
  return { bytes, seconds: Number(samples) / RATE, name: "tone.flac", type: "audio/flac" };
}

/** The AAC fixture's raw frames (ADTS headers taken off). */
function aacFrames(): Buffer[] {
  const clip = readFileSync(new URL("../src/sim/fixtures/speech.aac", import.meta.url));
  const frames: Buffer[] = [];
  for (let at = 0; at + 7 <= clip.length; ) {
    const length = ((clip[at + 3]! & 3) << 11) | (clip[at + 4]! << 3) | (clip[at + 5]! >> 5);
    const header = clip[at + 1]! & 1 ? 7 : 9;
    frames.push(clip.subarray(at + header, at + length));
    at += length;
  }
  return frames;
}

const box = (type: string, ...payload: Buffer[]): Buffer => {
  const body = Buffer.concat(payload);
  const head = Buffer.alloc(8);
  head.writeUInt32BE(8 + body.length, 0);
  head.write(type, 4, "ascii");
  return Buffer.concat([head, body]);
};
const u32 = (...values: number[]): Buffer => {
  const out = Buffer.alloc(values.length * 4);
  for (const [i, v] of values.entries()) out.writeUInt32BE(v, i * 4);
  return out;
};

/** An AAC-LC, 24 kHz, mono AudioSpecificConfig inside an esds box. */
function esds(): Buffer {
  const asc = Buffer.from([(2 << 3) | (6 >> 1), ((6 & 1) << 7) | (1 << 3)]);
  const decoderSpecific = Buffer.concat([Buffer.from([0x05, asc.length]), asc]);
  const decoderConfig = Buffer.concat([Buffer.from([0x04, 13 + decoderSpecific.length, 0x40, 0x15, 0, 0, 0]), u32(0, 0), decoderSpecific]);
  const es = Buffer.concat([Buffer.from([0x03, 3 + decoderConfig.length + 3, 0, 1, 0]), decoderConfig, Buffer.from([0x06, 1, 2])]);
  return box("esds", u32(0), es);
}

const mvhd = (stated: number) => box("mvhd", u32(0, 0, 0, 1000, Math.round(stated * 1000), 0x10000), Buffer.alloc(76));

/** The sound track: its sample tables list `sizes` (empty when the samples are in fragments) from `chunkOffset`. */
function soundTrak(statedSeconds: number, sizes: number[], chunkOffset: number): Buffer {
  const listed = sizes.length;
  const sampleEntry = box(
    "mp4a",
    Buffer.alloc(6),
    Buffer.from([0, 1]),
    Buffer.alloc(8),
    Buffer.from([0, 1, 0, 16, 0, 0, 0, 0]),
    u32(RATE * 65536),
    esds(),
  );
  const stbl = box(
    "stbl",
    box("stsd", u32(0, 1), sampleEntry),
    box("stts", listed ? u32(0, 1, listed, AAC_FRAME_SAMPLES) : u32(0, 0)),
    box("stsc", listed ? u32(0, 1, 1, listed, 1) : u32(0, 0)),
    box("stsz", u32(0, 0, listed), ...sizes.map((size) => u32(size))),
    box("stco", listed ? u32(0, 1, chunkOffset) : u32(0, 0)),
  );
  return box(
    "trak",
    box("tkhd", u32(7, 0, 0, 1, 0, Math.round(statedSeconds * 1000)), Buffer.alloc(60)),
    box(
      "mdia",
      box("mdhd", u32(0, 0, 0, RATE, Math.round(statedSeconds * RATE)), Buffer.alloc(4)),
      box("hdlr", u32(0, 0), Buffer.from("soun"), Buffer.alloc(12), Buffer.from("SoundHandler\0")),
      box("minf", box("smhd", u32(0, 0)), box("dinf", box("dref", u32(0, 1), box("url ", u32(1)))), stbl),
    ),
  );
}

const ftypM4a = () => box("ftyp", Buffer.from("M4A "), u32(0), Buffer.from("M4A isommp42"));

/**
 * An M4A of `frameCount` AAC frames. `statedSeconds` goes in mvhd, tkhd and mdhd; `listed` is
 * how many samples the tables describe (all of them for an honest table).
 */
export function m4a(frameCount: number, options: { statedSeconds: number; listed?: number }): Buffer {
  const source = aacFrames();
  const frames = Array.from({ length: frameCount }, (_, i) => source[i % source.length]!);
  const sizes = frames.slice(0, options.listed ?? frameCount).map((f) => f.length);
  const moov = (chunkOffset: number) => box("moov", mvhd(options.statedSeconds), soundTrak(options.statedSeconds, sizes, chunkOffset));
  const head = ftypM4a().length + moov(0).length;
  return Buffer.concat([ftypM4a(), moov(head + 8), box("mdat", ...frames)]);
}

/**
 * A fragmented M4A, as Safari records: empty sample tables, then fragments of `perFragment`
 * frames (`moof` whose `tfhd` defaults each sample to 1,024 ticks, as `trex` does, and one
 * `trun` listing sizes; then its `mdat`). `statedSeconds` goes in mvhd, tkhd and mdhd.
 */
export function fragmentedM4a(frameCount: number, options: { statedSeconds: number; perFragment?: number }): Buffer {
  const source = aacFrames();
  const perFragment = options.perFragment ?? 50;
  const trex = box("trex", u32(0, 1, 1, AAC_FRAME_SAMPLES, 0, 0));
  const parts = [ftypM4a(), box("moov", mvhd(options.statedSeconds), soundTrak(options.statedSeconds, [], 0), box("mvex", trex))];
  for (let first = 0, sequence = 1; first < frameCount; first += perFragment, sequence++) {
    const frames = Array.from({ length: Math.min(perFragment, frameCount - first) }, (_, i) => source[(first + i) % source.length]!);
    const moof = (dataOffset: number) =>
      box(
        "moof",
        box("mfhd", u32(0, sequence)),
        box(
          "traf",
          box("tfhd", u32(0x020008, 1, AAC_FRAME_SAMPLES)),
          box("trun", u32(0x000201, frames.length, dataOffset), ...frames.map((f) => u32(f.length))),
        ),
      );
    parts.push(moof(moof(0).length + 8), box("mdat", ...frames));
  }
  return Buffer.concat(parts);
}

export function lyingMp4(frameCount: number, fragmented = false): GeneratedAudio {
  const seconds = (frameCount * AAC_FRAME_SAMPLES) / RATE;
  const bytes = (fragmented ? fragmentedM4a : m4a)(frameCount, { statedSeconds: seconds / 10 });
  return { bytes, seconds, name: fragmented ? "voice.mp4" : "tone.m4a", type: "audio/mp4" };
}

/** Pages of an Ogg file with every granule position divided by ten. */
const tenthGranules = (ogg: Buffer): Buffer =>
  Buffer.concat(oggPages(ogg).map((page, i) => oggPage({ ...page, granule: page.granule / 10n }, i)));

/** The simulator's Ogg Opus of `seconds`, every granule position divided by ten. */
export function lyingOgg(seconds: number): GeneratedAudio {
  return { bytes: tenthGranules(Buffer.from(simSpeechAudio("opus", seconds))), seconds, name: "tone.ogg", type: "audio/ogg" };
}

/**
 * 12.5 s of the simulator's tone in Ogg Vorbis (fixtures/audio/tone-12.5s.vorbis.ogg, made once
 * with `oggenc -q 0` from vorbis-tools 1.4.2), every granule position divided by ten.
 */
export function lyingVorbis(): GeneratedAudio {
  const honest = readFileSync(new URL("./fixtures/audio/tone-12.5s.vorbis.ogg", import.meta.url));
  return { bytes: tenthGranules(honest), seconds: 12.5, name: "tone.oga", type: "audio/ogg" };
}

/** An EBML element: its ID bytes, an 8-byte size (or the unknown size), the payload. */
function ebml(id: number[], payload: Buffer | null): Buffer {
  const size = Buffer.alloc(8);
  if (payload === null) size.fill(0xff, 1);
  else size.writeBigUInt64BE(BigInt(payload.length));
  size[0] = 0x01;
  return Buffer.concat([Buffer.from(id), size, payload ?? Buffer.alloc(0)]);
}
const ebmlUint = (id: number[], value: number) => ebml(id, Buffer.from([value]));
const ebmlFloat = (id: number[], value: number) => {
  const out = Buffer.alloc(8);
  out.writeDoubleBE(value);
  return ebml(id, out);
};

/** The Opus fixture's audio packets (20 ms each, as ffmpeg's libopus wrote them). */
export const OPUS_PACKET_S = 0.02;
function opusPackets(): Buffer[] {
  const pages = oggPages(readFileSync(new URL("../src/sim/fixtures/speech.opus", import.meta.url)));
  return pages.slice(2).flatMap((p) => p.packets);
}

/** The sizes of all but the last laced frame: Xiph (255s and a remainder) or EBML (a size, then signed differences). */
function lacingSizes(frames: Buffer[], lacing: "xiph" | "ebml"): Buffer {
  const sizes = frames.slice(0, -1).map((f) => f.length);
  if (lacing === "xiph") return Buffer.from(sizes.flatMap((n) => [...Array(Math.floor(n / 255)).fill(255), n % 255]));
  const twoBytes = (v: number) => [0x40 | (v >> 8), v & 0xff];
  return Buffer.from(sizes.flatMap((n, i) => twoBytes(i === 0 ? n : n - sizes[i - 1]! + (2 ** 13 - 1))));
}

/**
 * A WebM of `packetCount` Opus packets, one per SimpleBlock (or three, laced), its Info Duration a
 * tenth of the real length; with `live`, the Segment and Cluster have the unknown size a
 * browser's recorder writes.
 */
export function lyingWebm(packetCount: number, live = false, lacing?: "xiph" | "ebml"): GeneratedAudio {
  const source = opusPackets();
  const packets = Array.from({ length: packetCount }, (_, i) => source[i % source.length]!);
  const seconds = packetCount * OPUS_PACKET_S;
  const header = ebml([0x1a, 0x45, 0xdf, 0xa3], Buffer.concat([ebmlUint([0x42, 0x86], 1), ebml([0x42, 0x82], Buffer.from("webm"))]));
  const info = ebml(
    [0x15, 0x49, 0xa9, 0x66],
    Buffer.concat([ebml([0x2a, 0xd7, 0xb1], Buffer.from([0x0f, 0x42, 0x40])), ebmlFloat([0x44, 0x89], (seconds * 1000) / 10)]),
  );
  const track = ebml(
    [0xae],
    Buffer.concat([ebmlUint([0xd7], 1), ebmlUint([0x83], 2), ebml([0x86], Buffer.from("A_OPUS")), ebml([0xe1], ebmlFloat([0xb5], 48_000))]),
  );
  const perBlock = lacing ? 3 : 1;
  const blocks = Array.from({ length: Math.ceil(packetCount / perBlock) }, (_, i) => {
    const laced = packets.slice(i * perBlock, (i + 1) * perBlock);
    const head = Buffer.from([0x81, 0, 0, 0x80]);
    head.writeInt16BE((i * 20 * perBlock) % 30_000, 1);
    if (laced.length === 1) return ebml([0xa3], Buffer.concat([head, laced[0]!]));
    head[3] = 0x80 | (lacing === "xiph" ? 0x02 : 0x06);
    return ebml([0xa3], Buffer.concat([head, Buffer.from([laced.length - 1]), lacingSizes(laced, lacing!), ...laced]));
  });
  const clusterBody = Buffer.concat([ebmlUint([0xe7], 0), ...blocks]);
  const cluster = live ? Buffer.concat([ebml([0x1f, 0x43, 0xb6, 0x75], null), clusterBody]) : ebml([0x1f, 0x43, 0xb6, 0x75], clusterBody);
  const segmentBody = Buffer.concat([info, ebml([0x16, 0x54, 0xae, 0x6b], track), cluster]);
  const segment = live ? Buffer.concat([ebml([0x18, 0x53, 0x80, 0x67], null), segmentBody]) : ebml([0x18, 0x53, 0x80, 0x67], segmentBody);
  return { bytes: Buffer.concat([header, segment]), seconds, name: "voice.webm", type: "audio/webm" };
}
