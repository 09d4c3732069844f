/**
 * FLAC: the frames are found by their headers and their block sizes summed; STREAMINFO's total
 * sample count is never read (only its sample rate, which frames may defer to).
 *
 * A frame header is a sync code, valid fields and a matching CRC-8. Compressed audio holds the
 * sync pattern by chance, and some of those pass the CRC-8, so a header counts only when it
 * continues the frame numbering of a neighbour (the frame before it, or one of the next few
 * headers continues it): a decoder plays one chain of frames, and chance headers do not chain.
 * Work: one pass over the bytes, then one over the headers found.
 */
import { fourcc, nextSync, plausibleRate, SampleCount, u16be, u24be, u8 } from "./bytes.ts";

const FRAME_RATES = [0, 88_200, 176_400, 192_000, 8_000, 16_000, 22_050, 24_000, 32_000, 44_100, 48_000, 96_000] as const;
/** Headers after a candidate that may continue its numbering (the real next frame, past chance headers inside it). */
const CHAIN_LOOKAHEAD = 8;
const STREAMINFO = 0;

interface Header {
  at: number;
  variable: boolean;
  /** Frame number (fixed blocking) or first sample number (variable blocking). */
  number: number;
  samples: number;
  rate: number;
}

export const isFlac = (b: Uint8Array): boolean => fourcc(b, 0) === "fLaC";

const crc8Table = (() => {
  const table = new Uint8Array(256);
  for (let i = 0; i < 256; i++) {
    let crc = i;
    for (let j = 0; j < 8; j++) crc = crc & 0x80 ? ((crc << 1) ^ 0x07) & 0xff : (crc << 1) & 0xff;
    table[i] = crc;
  }
  return table;
})();

/** The UTF-8-style coded number at `at` and its length in bytes (FLAC allows up to 7 bytes, 36 bits). */
function codedNumber(b: Uint8Array, at: number): [number, number] | null {
  const lead = u8(b, at);
  if (lead < 0x80) return [lead, 1];
  let count = 0;
  while (count < 8 && lead & (0x80 >> count)) count++;
  if (count < 2 || count > 7) return null;
  let value = lead & (0xff >> (count + 1));
  for (let i = 1; i < count; i++) {
    const next = u8(b, at + i);
    if ((next & 0xc0) !== 0x80) return null;
    value = value * 64 + (next & 0x3f);
  }
  return [value, count];
}

function frameHeader(b: Uint8Array, at: number, streamRate: number): Header | null {
  if (u8(b, at) !== 0xff || (u8(b, at + 1) & 0xfe) !== 0xf8) return null;
  const sizeCode = u8(b, at + 2) >> 4;
  const rateCode = u8(b, at + 2) & 0xf;
  if (sizeCode === 0 || rateCode === 15 || u8(b, at + 3) >> 4 >= 11 || u8(b, at + 3) & 1) return null;
  const coded = codedNumber(b, at + 4);
  if (!coded) return null;
  let end = at + 4 + coded[1];
  let samples = sizeCode === 1 ? 192 : sizeCode <= 5 ? 576 << (sizeCode - 2) : sizeCode >= 8 ? 256 << (sizeCode - 8) : 0;
  if (sizeCode === 6) samples = u8(b, end++) + 1;
  if (sizeCode === 7) [samples, end] = [u16be(b, end) + 1, end + 2];
  let rate: number = rateCode === 0 ? streamRate : (FRAME_RATES[rateCode] ?? 0);
  if (rateCode === 12) rate = u8(b, end++) * 1000;
  if (rateCode === 13) [rate, end] = [u16be(b, end), end + 2];
  if (rateCode === 14) [rate, end] = [u16be(b, end) * 10, end + 2];
  if (end >= b.length || !plausibleRate(rate)) return null;
  let crc = 0;
  for (let i = at; i < end; i++) crc = crc8Table[crc ^ b[i]!]!;
  if (crc !== b[end]) return null;
  return { at, variable: (u8(b, at + 1) & 1) === 1, number: coded[0], samples, rate };
}

const continues = (a: Header, next: Header): boolean =>
  a.variable === next.variable && next.at > a.at && next.number === a.number + (a.variable ? a.samples : 1);

/** Where the frames start (after the metadata blocks) and STREAMINFO's sample rate (0 when absent). */
function metadata(b: Uint8Array): { start: number; rate: number } {
  let rate = 0;
  for (let at = 4; at + 4 <= b.length; ) {
    const type = u8(b, at) & 0x7f;
    const length = u24be(b, at + 1);
    if (type === STREAMINFO && length >= 18) rate = u24be(b, at + 14) >> 4;
    const end = at + 4 + length;
    if (u8(b, at) & 0x80 || end > b.length) return { start: end > b.length ? 4 : end, rate };
    at = end;
  }
  return { start: 4, rate };
}

/** Seconds of audio in a FLAC file's frames (0 when it has none). */
export function flacSeconds(b: Uint8Array): number {
  const { start, rate } = metadata(b);
  const count = new SampleCount();
  // Headers wait in a window until the ones after them are known, so memory stays bounded.
  const window: Header[] = [];
  let previous: Header | null = null;
  let seen = 0;
  const decide = () => {
    const header = window.shift()!;
    const chained =
      (previous !== null && continues(previous, header)) ||
      window.some((next) => continues(header, next)) ||
      (seen === 1 && header.number === 0);
    if (!chained) return;
    count.add(header.samples, header.rate);
    previous = header;
  };
  for (let at = nextSync(b, start); at !== -1 && at + 6 <= b.length; at = nextSync(b, at + 1)) {
    if (((b[at + 1] ?? 0) & 0xfe) !== 0xf8) continue;
    const header = frameHeader(b, at, rate);
    if (!header) continue;
    seen++;
    window.push(header);
    if (window.length > CHAIN_LOOKAHEAD) decide();
  }
  while (window.length > 0) decide();
  return count.seconds();
}
