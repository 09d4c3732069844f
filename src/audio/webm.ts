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

/** The last `vint`'s length in bytes, and whether all its value bits were set (an unknown size). */
let vintLength = 0;
let vintUnknown = false;

/**
 * An EBML variable-length integer at `at` (marker kept for IDs), or -1; its length and
 * unknown-ness are left in `vintLength`/`vintUnknown`, so a walk of a million blocks allocates nothing.
 */
function vint(b: Uint8Array, at: number, keepMarker: boolean): number {
  const first = u8(b, at);
  if (first === 0) return -1;
  vintLength = Math.clz32(first) - 23;
  let value = keepMarker ? first : first & (0xff >> vintLength);
  vintUnknown = value === 0xff >> vintLength;
  for (let i = 1; i < vintLength; i++) {
    value = value * 256 + u8(b, at + i);
    vintUnknown &&= u8(b, at + i) === 0xff;
  }
  return value;
}

/** An unsigned big-endian integer element's value. */
const uint = (b: Uint8Array, start: number, end: number): number => {
  let value = 0;
  for (let i = start; i < end && i < start + 6; i++) value = value * 256 + u8(b, i);
  return value;
};

/** Byte offsets of the frames in a block's payload from `at` to `end`, by its lacing (1 Xiph, 2 fixed-size, 3 EBML). */
function blockFrames(b: Uint8Array, at: number, end: number, lacing: number): number[] {
  if (lacing === 0) return [at];
  const count = u8(b, at) + 1;
  let offset = at + 1;
  const sizes: number[] = [];
  if (lacing === 1) {
    for (let i = 0; i < count - 1; i++) {
      let size = 0;
      while (offset < end && u8(b, offset) === 255) [size, offset] = [size + 255, offset + 1];
      sizes.push(size + u8(b, offset++));
    }
  } else if (lacing === 3) {
    const first = vint(b, offset, false);
    if (first < 0) return [];
    offset += vintLength;
    sizes.push(first);
    for (let i = 1; i < count - 1; i++) {
      const delta = vint(b, offset, false);
      if (delta < 0) return [];
      offset += vintLength;
      sizes.push(sizes[i - 1]! + delta - (2 ** (7 * vintLength - 1) - 1));
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
    const idLength = vintLength;
    const size = id < 0 ? -1 : vint(b, at + idLength, false);
    if (size < 0) break; // garbage: the blocks read so far stand
    const start = at + idLength + vintLength;
    const end = vintUnknown ? b.length : Math.min(b.length, start + size);
    if (id !== EBML && ENTERED.has(id)) {
      at = start;
      continue;
    }
    if (id === TRACK_NUMBER) lastTrack = uint(b, start, end);
    if (id === CODEC_ID && new TextDecoder().decode(b.subarray(start, end)) === "A_OPUS") opusTrack = lastTrack;
    if ((id === SIMPLE_BLOCK || id === BLOCK) && opusTrack >= 0 && vint(b, start, false) === opusTrack) {
      const payload = start + vintLength + 3; // timecode (2) and flags (1)
      const lacing = (u8(b, start + vintLength + 2) >> 1) & 3;
      if (lacing === 0) samples += opusPacketSamples(b, payload);
      else for (const frame of blockFrames(b, payload, end, lacing)) samples += opusPacketSamples(b, frame);
    }
    at = end;
  }
  return opusTrack >= 0 ? samples / OPUS_RATE : null;
}
