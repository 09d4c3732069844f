/**
 * PCM WAV: the seconds are the audio bytes over the byte rate that the format fields imply
 * (sample rate × channels × bytes per sample), never `fact`, the declared byte rate or a
 * data size that the file does not back.
 *
 * Audio bytes are every byte not inside a well-formed chunk other than `data`: a `data` size
 * larger than the file (or 0xFFFFFFFF, as streaming writers leave it) is clamped to the file, and
 * bytes that follow a short `data` chunk without forming a chunk (a printable type and a size
 * that fits) count as audio too, since a decoder that ignores the size plays them.
 */
import { fourcc, plausibleRate, u16le, u32le } from "./bytes.ts";

/** Channels a PCM stream may declare (WAVE_FORMAT_EXTENSIBLE names up to 18 speakers; 32 leaves room). */
const WAV_CHANNELS_MAX = 32;
/** Format tags whose bytes are samples at a fixed width: PCM, IEEE float, A-law, µ-law. */
const FIXED_WIDTH_FORMATS = new Set([1, 3, 6, 7]);
const WAVE_FORMAT_EXTENSIBLE = 0xfffe;
const SAMPLE_BITS = new Set([8, 16, 24, 32, 64]);

export const isWav = (b: Uint8Array): boolean => (fourcc(b, 0) === "RIFF" || fourcc(b, 0) === "RF64") && fourcc(b, 8) === "WAVE";

/** Bytes per second of a `fmt ` chunk's payload at `at`, or null when it is not plain PCM or is implausible. */
function pcmByteRate(b: Uint8Array, at: number, size: number): number | null {
  if (size < 16) return null;
  let format = u16le(b, at);
  if (format === WAVE_FORMAT_EXTENSIBLE && size >= 40) format = u16le(b, at + 24); // the sub-format GUID starts with the tag
  const channels = u16le(b, at + 2);
  const rate = u32le(b, at + 4);
  const bits = u16le(b, at + 14);
  if (!FIXED_WIDTH_FORMATS.has(format) || channels < 1 || channels > WAV_CHANNELS_MAX || !plausibleRate(rate) || !SAMPLE_BITS.has(bits))
    return null;
  return rate * channels * (bits / 8);
}

const printable = (b: Uint8Array, at: number): boolean => {
  for (let i = at; i < at + 4; i++) if ((b[i] ?? 0) < 0x20 || (b[i] ?? 0) > 0x7e) return false;
  return true;
};

/** Seconds of PCM audio in a RIFF/WAVE file: 0 without a format chunk, null when its format is not PCM this can time. */
export function wavSeconds(b: Uint8Array): number | null {
  let byteRate: number | null = null;
  let audioBytes = 0;
  let at = 12;
  while (at + 8 <= b.length) {
    const id = fourcc(b, at);
    const size = u32le(b, at + 4);
    const end = at + 8 + size;
    if (id === "data") {
      audioBytes += Math.min(size, b.length - at - 8);
    } else if (!printable(b, at) || end > b.length) {
      audioBytes += b.length - at; // not a chunk: whatever follows is played as audio
      break;
    } else if (id === "fmt " && byteRate === null) {
      byteRate = pcmByteRate(b, at + 8, size);
      if (byteRate === null) return null;
    }
    at = end + (size & 1); // chunks are padded to even sizes
  }
  return byteRate === null ? 0 : audioBytes / byteRate;
}
