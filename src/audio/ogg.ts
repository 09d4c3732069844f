/**
 * Ogg (Opus, Vorbis): pages are walked by their headers; where no whole page starts (garbage, a
 * truncated end) the walk resynchronises on the next capture pattern.
 *
 *   Opus:   every packet's TOC byte gives its samples (RFC 6716 §3.1), so the seconds are the
 *           packets present; the last granule position may trim the end only within the last
 *           page (as RFC 7845 §4.5 uses it), and the pre-skip is taken off.
 *   Vorbis: each packet's mode (its first bits) gives its block size, from the modes of the setup
 *           header (read backwards, see vorbisModes); a packet yields a quarter of its block and
 *           of the one before. The last granule position trims as for Opus. A setup header whose
 *           modes cannot be found gives null.
 * Other codecs in Ogg give null.
 */
import { fourcc, plausibleRate, u16le, u32le, u64le, u8 } from "./bytes.ts";

const OPUS_RATE = 48_000;
/** A packet of Opus holds at most 120 ms. */
const OPUS_PACKET_SAMPLES_MAX = 5_760;
const PAGE_HEADER_BYTES = 27;
const CONTINUED = 0x01;

export const isOgg = (b: Uint8Array): boolean => fourcc(b, 0) === "OggS";

const OGGS = [0x4f, 0x67, 0x67, 0x53] as const;

/**
 * The page at `at` and where it ends, or null when it is not a whole page. CRCs are not checked:
 * the walk steps from page to page by their sizes, so nothing inside a page body is read as a
 * page, and a page that only looks valid adds its own packets, never hides others.
 */
function page(b: Uint8Array, at: number): { end: number; body: number } | null {
  if (b[at] !== OGGS[0] || b[at + 1] !== OGGS[1] || b[at + 2] !== OGGS[2] || b[at + 3] !== OGGS[3] || b[at + 4] !== 0) return null;
  const segments = u8(b, at + 26);
  const body = at + PAGE_HEADER_BYTES + segments;
  let end = body;
  for (let i = 0; i < segments; i++) end += u8(b, at + PAGE_HEADER_BYTES + i);
  return end > b.length ? null : { end, body };
}

/** Samples (48 kHz) of one Opus frame by TOC configuration: SILK 10–60 ms, hybrid 10–20 ms, CELT 2.5–20 ms. */
const OPUS_FRAME_SAMPLES = Array.from({ length: 32 }, (_, config) =>
  config < 12 ? [480, 960, 1_920, 2_880][config % 4]! : config < 16 ? [480, 960][config % 2]! : [120, 240, 480, 960][config % 4]!,
);

/** Opus samples (48 kHz) of the packet whose first bytes are at `at` (RFC 6716 §3.1). */
export function opusPacketSamples(b: Uint8Array, at: number): number {
  const toc = u8(b, at);
  const frame = OPUS_FRAME_SAMPLES[toc >> 3]!;
  const code = toc & 3;
  const frames = code === 0 ? 1 : code === 3 ? u8(b, at + 1) & 0x3f : 2;
  return Math.min(OPUS_PACKET_SAMPLES_MAX, frame * frames);
}

interface Stream {
  serial: number;
  codec: "opus" | "vorbis";
  rate: number;
  preSkip: number;
  /** Vorbis: short and long block sizes, each mode's block flag (from the setup header), the last block's size. */
  blocks: [number, number];
  modes: boolean[] | null;
  setup: Uint8Array[];
  previousBlock: number;
  packets: number;
  samples: number;
  lastGranule: number;
  lastPageSamples: number;
}

/** Bytes of a Vorbis setup header kept to read its modes (real ones are a few KB; codebooks may make tens). */
const VORBIS_SETUP_BYTES_MAX = 1024 * 1024;
const VORBIS_MODES_MAX = 64;

/** The stream a first packet opens, when its codec is one this reads. */
function openStream(b: Uint8Array, serial: number, at: number): Stream | null {
  const base = {
    serial,
    preSkip: 0,
    blocks: [0, 0] as [number, number],
    modes: null,
    setup: [],
    previousBlock: 0,
    packets: 0,
    samples: 0,
    lastGranule: -1,
    lastPageSamples: 0,
  };
  if (fourcc(b, at) === "Opus" && fourcc(b, at + 4) === "Head")
    return { ...base, codec: "opus", rate: OPUS_RATE, preSkip: u16le(b, at + 10) };
  if (u8(b, at) === 1 && fourcc(b, at + 1) === "vorb") {
    const rate = u32le(b, at + 12);
    const blocks: [number, number] = [1 << (u8(b, at + 28) & 0xf), 1 << (u8(b, at + 28) >> 4)];
    const valid = plausibleRate(rate) && blocks[0] >= 64 && blocks[0] <= blocks[1] && blocks[1] <= 8192;
    return valid ? { ...base, codec: "vorbis", rate, blocks } : null;
  }
  return null;
}

/**
 * The block flag of each mode of a Vorbis setup header, or null. The modes are the header's last
 * fields, after codebooks whose lengths need a full parse, so they are read backwards from the
 * framing bit, as ffmpeg's vorbis_parser does: each mode is a mapping (< 64), two zero 16-bit
 * types and the flag, and the count field before them must match.
 */
export function vorbisModes(setup: Uint8Array): boolean[] | null {
  let bit = setup.length * 8 - 1;
  const next = () => ((setup[bit >> 3] ?? 0) >> (bit-- & 7)) & 1;
  // Reading an LSB-first stream backwards gives each field most significant bit first.
  const read = (n: number) => {
    let value = 0;
    for (let i = 0; i < n; i++) value = value * 2 + next();
    return value;
  };
  while (bit >= 0 && next() === 0); // padding, then the framing bit
  const modesEnd = bit;
  let count = 0;
  let found = 0;
  while (bit >= 97 && count < VORBIS_MODES_MAX) {
    if (read(8) > 63 || read(16) !== 0 || read(16) !== 0) break;
    read(1);
    count++;
    const mark = bit;
    if (read(6) + 1 === count) found = count;
    bit = mark;
  }
  if (found === 0) return null;
  bit = modesEnd;
  const flags: boolean[] = new Array(found);
  for (let i = found - 1; i >= 0; i--) {
    read(40);
    flags[i] = read(1) === 1;
  }
  return flags;
}

/** Samples a Vorbis audio packet yields (a quarter of its block and of the one before), from its first byte. */
function vorbisPacketSamples(stream: Stream, first: number): number {
  const modes = stream.modes;
  if (!modes || first & 1) return 0; // not an audio packet
  const mode = (first >> 1) & ((1 << Math.ceil(Math.log2(modes.length))) - 1);
  if (mode >= modes.length) return 0;
  const block = stream.blocks[modes[mode] ? 1 : 0];
  const samples = stream.previousBlock === 0 ? 0 : (stream.previousBlock + block) / 4;
  stream.previousBlock = block;
  return samples;
}

/** Header packets before the audio: OpusHead and OpusTags; Vorbis identification, comment and setup. */
const HEADER_PACKETS = { opus: 2, vorbis: 3 } as const;
const VORBIS_SETUP_PACKET = 2;

function readPage(b: Uint8Array, at: number, body: number, stream: Stream): void {
  const segments = u8(b, at + 26);
  let pageSamples = 0;
  let start = !(u8(b, at + 5) & CONTINUED);
  for (let i = 0, offset = body; i < segments; i++) {
    const size = u8(b, at + PAGE_HEADER_BYTES + i);
    if (start) {
      if (stream.packets >= HEADER_PACKETS[stream.codec]) {
        pageSamples += stream.codec === "opus" ? opusPacketSamples(b, offset) : vorbisPacketSamples(stream, u8(b, offset));
      }
      stream.packets++;
    }
    if (stream.codec === "vorbis" && stream.packets - 1 === VORBIS_SETUP_PACKET && stream.modes === null) {
      if (stream.setup.length * 255 < VORBIS_SETUP_BYTES_MAX) stream.setup.push(b.subarray(offset, offset + size));
      if (size < 255) stream.modes = vorbisModes(Buffer.concat(stream.setup));
    }
    start = size < 255;
    offset += size;
  }
  stream.samples += pageSamples;
  const granule = u64le(b, at + 6);
  if (pageSamples > 0 && granule < 2 ** 63) [stream.lastGranule, stream.lastPageSamples] = [granule, pageSamples];
}

/** The stream's samples, ended where the last granule position says only when that lies within the last page. */
function streamSeconds(s: Stream): number | null {
  if (s.codec === "vorbis" && s.modes === null) return null;
  const trimmed = s.lastGranule >= s.samples - s.lastPageSamples && s.lastGranule <= s.samples ? s.lastGranule : s.samples;
  return Math.max(0, trimmed - s.preSkip) / s.rate;
}

/** Seconds of the first Opus or Vorbis stream in an Ogg file: 0 without a page, null for other codecs. */
export function oggSeconds(b: Uint8Array): number | null {
  let stream: Stream | null = null;
  let pages = 0;
  for (let at = 0; at + PAGE_HEADER_BYTES <= b.length; ) {
    const found = page(b, at);
    if (!found) {
      at = b.indexOf(OGGS[0], at + 1);
      if (at === -1) break;
      continue;
    }
    pages++;
    const serial = u32le(b, at + 14);
    if (!stream && u8(b, at + 26) > 0) stream = openStream(b, serial, found.body);
    if (stream?.serial === serial) readPage(b, at, found.body, stream);
    at = found.end;
  }
  if (!stream) return pages === 0 ? 0 : null;
  return streamSeconds(stream);
}
