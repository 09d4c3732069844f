/**
 * MPEG audio (MP3, MP2) and ADTS AAC: the frames are walked and their samples summed. Each
 * frame's header gives its length and sample count, so the walk jumps frame to frame; the
 * stream-level counts that encoders put in the first frame (Xing, Info, VBRI) are never read,
 * and that frame, which decoders skip, is not counted. ID3v2 tags are skipped by their size.
 *
 * Garbage is resynchronised byte by byte: a header is taken only when the frame it describes
 * ends at the file's end or at another valid header (or continues a run of such frames), so a
 * stray sync pattern inside garbage is not counted. Work: each byte is looked at a bounded
 * number of times.
 */
import { fourcc, nextSync, SampleCount, u8 } from "./bytes.ts";

interface Frame {
  bytes: number;
  samples: number;
  rate: number;
}
type FrameReader = (b: Uint8Array, at: number) => Frame | null;

/** Bit rates in kbit/s by [version 1, version 2/2.5][layer I, II, III][index 1..14]. */
const MPEG_KBPS = [
  [
    [32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448],
    [32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384],
    [32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320],
  ],
  [
    [32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256],
    [8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],
    [8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],
  ],
] as const;
const MPEG1_RATES = [44_100, 48_000, 32_000] as const;
const ADTS_RATES = [96_000, 88_200, 64_000, 48_000, 44_100, 32_000, 24_000, 22_050, 16_000, 12_000, 11_025, 8_000, 7_350] as const;
const AAC_FRAME_SAMPLES = 1_024;
const ADTS_HEADER_BYTES = 7;

/** An MPEG-1/2/2.5 Layer I–III frame header at `at`; free-format frames (no length) are not taken. */
export const mpegFrame: FrameReader = (b, at) => {
  if (u8(b, at) !== 0xff || (u8(b, at + 1) & 0xe0) !== 0xe0) return null;
  const version = (u8(b, at + 1) >> 3) & 3; // 0: 2.5, 1: reserved, 2: 2, 3: 1
  const layer = (u8(b, at + 1) >> 1) & 3; // 1: III, 2: II, 3: I, 0: reserved
  const bitrateIndex = u8(b, at + 2) >> 4;
  const rateIndex = (u8(b, at + 2) >> 2) & 3;
  if (version === 1 || layer === 0 || bitrateIndex === 0 || bitrateIndex === 15 || rateIndex === 3) return null;
  const v1 = version === 3;
  const layerIndex = 3 - layer; // 0: I, 1: II, 2: III
  const bps = MPEG_KBPS[v1 ? 0 : 1][layerIndex]![bitrateIndex - 1]! * 1000;
  const rate = MPEG1_RATES[rateIndex]! / (v1 ? 1 : version === 2 ? 2 : 4);
  const padding = (u8(b, at + 2) >> 1) & 1;
  if (layerIndex === 0) return { bytes: (Math.floor((12 * bps) / rate) + padding) * 4, samples: 384, rate };
  const perSample = layerIndex === 2 && !v1 ? 72 : 144;
  return { bytes: Math.floor((perSample * bps) / rate) + padding, samples: layerIndex === 2 && !v1 ? 576 : 1152, rate };
};

/** An ADTS (raw AAC) frame header at `at`. */
export const adtsFrame: FrameReader = (b, at) => {
  if (u8(b, at) !== 0xff || (u8(b, at + 1) & 0xf6) !== 0xf0) return null;
  const rate = ADTS_RATES[(u8(b, at + 2) >> 2) & 0xf];
  const bytes = ((u8(b, at + 3) & 3) << 11) | (u8(b, at + 4) << 3) | (u8(b, at + 5) >> 5);
  if (rate === undefined || bytes < ADTS_HEADER_BYTES) return null;
  return { bytes, samples: AAC_FRAME_SAMPLES * ((u8(b, at + 6) & 3) + 1), rate };
};

/** Whether the MPEG frame at `at` carries an encoder's Xing/Info/VBRI tag rather than audio. */
function isTagFrame(b: Uint8Array, at: number): boolean {
  const v1 = ((u8(b, at + 1) >> 3) & 3) === 3;
  const mono = u8(b, at + 3) >> 6 === 3;
  const sideInfo = v1 ? (mono ? 17 : 32) : mono ? 9 : 17;
  const xing = fourcc(b, at + 4 + sideInfo);
  return xing === "Xing" || xing === "Info" || fourcc(b, at + 36) === "VBRI";
}

/** Bytes of the ID3v2 tags at the start of a file (a tag's size is synch-safe, plus a footer when flagged). */
export function id3v2Bytes(b: Uint8Array): number {
  let at = 0;
  while (fourcc(b, at).slice(0, 3) === "ID3" && at + 10 <= b.length) {
    const size = ((u8(b, at + 6) & 0x7f) << 21) | ((u8(b, at + 7) & 0x7f) << 14) | ((u8(b, at + 8) & 0x7f) << 7) | (u8(b, at + 9) & 0x7f);
    at += 10 + size + (u8(b, at + 5) & 0x10 ? 10 : 0);
  }
  return at;
}

/**
 * Bytes searched for the first two frames in a row: a decoder probing a file looks as far
 * (ffmpeg's probe reads at most 1 MiB), and garbage is refused without a walk of all of it.
 */
export const FRAMED_PROBE_BYTES_MAX = 1024 * 1024;

/** The frame reader of the first confirmed frame after `start` (two in a row), or null. */
export function framedKind(b: Uint8Array, start: number): FrameReader | null {
  const end = Math.min(b.length, start + FRAMED_PROBE_BYTES_MAX);
  for (let at = nextSync(b, start); at !== -1 && at + 4 <= end; at = nextSync(b, at + 1)) {
    for (const read of [mpegFrame, adtsFrame]) {
      const frame = read(b, at);
      if (frame && (at + frame.bytes === b.length || read(b, at + frame.bytes))) return read;
    }
  }
  return null;
}

/** Seconds of audio in the frames of `b` from `start`, read with `read`. */
export function framedSeconds(b: Uint8Array, start: number, read: FrameReader): number {
  const count = new SampleCount();
  let locked = false;
  let first = true;
  for (let at = start; at + 4 <= b.length; ) {
    const frame = read(b, at);
    const end = frame ? at + frame.bytes : 0;
    if (!frame || end > b.length || !(locked || end === b.length || read(b, end))) {
      locked = false;
      at = nextSync(b, at + 1);
      if (at === -1) break;
      continue;
    }
    if (!(first && read === mpegFrame && isTagFrame(b, at))) count.add(frame.samples, frame.rate);
    first = false;
    locked = true;
    at = end;
  }
  return count.seconds();
}
