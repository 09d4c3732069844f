/**
 * WebM / Matroska: the audio track's blocks are walked. For Opus (what browsers record) each
 * frame's TOC byte gives its samples, as in Ogg, so the seconds are the frames present; block
 * timestamps and the Info `Duration` are never read. Other codecs give null (the upstream's
 * report and the size bound then decide).
 *
 * Elements are read in one linear pass: the master elements on the way to the blocks (Segment,
 * Tracks, TrackEntry, Cluster, BlockGroup) are entered rather than skipped, so the unknown sizes
 * that live recorders write need no special case.
 */
import { u8 } from "./bytes.ts";
import { opusPacketSamples } from "./ogg.ts";

const EBML = 0x1a45dfa3;
const ENTERED = new Set([0x18538067, 0x1654ae6b, 0xae, 0x1f43b675, 0xa0]);
const TRACK_NUMBER = 0xd7;
const CODEC_ID = 0x86;
const SIMPLE_BLOCK = 0xa3;
const BLOCK = 0xa1;
const OPUS_RATE = 48_000;

export const isWebm = (b: Uint8Array): boolean => u8(b, 0) === 0x1a && u8(b, 1) === 0x45 && u8(b, 2) === 0xdf && u8(b, 3) === 0xa3;

/** An EBML variable-length integer at `at`: its value (marker kept for IDs), length, and whether all value bits are set. */
function vint(b: Uint8Array, at: number, keepMarker: boolean): { value: number; length: number; unknown: boolean } | null {
  const first = u8(b, at);
  if (first === 0) return null;
  const length = Math.clz32(first) - 23;
  let value = keepMarker ? first : first & (0xff >> length);
  let unknown = value === 0xff >> length;
  for (let i = 1; i < length; i++) {
    value = value * 256 + u8(b, at + i);
    unknown &&= u8(b, at + i) === 0xff;
  }
  return { value, length, unknown };
}

/** An unsigned big-endian integer element's value. */
const uint = (b: Uint8Array, start: number, end: number): number => {
  let value = 0;
  for (let i = start; i < end && i < start + 6; i++) value = value * 256 + u8(b, i);
  return value;
};

/** Byte offsets of the frames in a block's payload from `at` to `end`, by its lacing. */
function blockFrames(b: Uint8Array, at: number, end: number, lacing: number): number[] {
  if (lacing === 0) return [at];
  const count = u8(b, at) + 1;
  let offset = at + 1;
  const sizes: number[] = [];
  if (lacing === 2) {
    for (let i = 0; i < count - 1; i++) {
      let size = 0;
      while (offset < end && u8(b, offset) === 255) [size, offset] = [size + 255, offset + 1];
      sizes.push(size + u8(b, offset++));
    }
  } else if (lacing === 3) {
    const first = vint(b, offset, false);
    if (!first) return [];
    offset += first.length;
    sizes.push(first.value);
    for (let i = 1; i < count - 1; i++) {
      const delta = vint(b, offset, false);
      if (!delta) return [];
      offset += delta.length;
      sizes.push(sizes[i - 1]! + delta.value - (2 ** (7 * delta.length - 1) - 1));
    }
  } else {
    const size = Math.floor((end - offset) / count);
    for (let i = 0; i < count - 1; i++) sizes.push(size);
  }
  const frames = [offset];
  for (const size of sizes) frames.push((offset += size));
  return frames.filter((f) => f < end);
}

/** Seconds of an Opus audio track in a WebM file, or null. */
export function webmSeconds(b: Uint8Array): number | null {
  let opusTrack = -1;
  let lastTrack = -1;
  let samples = 0;
  for (let at = 0; at < b.length; ) {
    const id = vint(b, at, true);
    const size = id && vint(b, at + id.length, false);
    if (!id || !size) break; // garbage: the blocks read so far stand
    const start = at + id.length + size.length;
    const end = size.unknown ? b.length : Math.min(b.length, start + size.value);
    if (id.value !== EBML && ENTERED.has(id.value)) {
      at = start;
      continue;
    }
    if (id.value === TRACK_NUMBER) lastTrack = uint(b, start, end);
    if (id.value === CODEC_ID && new TextDecoder().decode(b.subarray(start, end)) === "A_OPUS") opusTrack = lastTrack;
    if ((id.value === SIMPLE_BLOCK || id.value === BLOCK) && opusTrack >= 0) {
      const track = vint(b, start, false);
      if (track && track.value === opusTrack) {
        const payload = start + track.length + 3; // timecode (2) and flags (1)
        const lacing = (u8(b, start + track.length + 2) >> 1) & 3;
        for (const frame of blockFrames(b, payload, end, lacing)) samples += opusPacketSamples(b, frame);
      }
    }
    at = end;
  }
  return opusTrack >= 0 ? samples / OPUS_RATE : null;
}
