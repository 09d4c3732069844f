/**
 * Ogg (Opus, Vorbis): pages are walked by their headers; where no whole page starts (garbage, a
 * truncated end) the walk resynchronises on the next capture pattern.
 *
 *   Opus:   every packet's TOC byte gives its samples (RFC 6716 §3.1), so the seconds are the
 *           packets present; the last granule position may trim the end only within the last
 *           page (as RFC 7845 §4.5 uses it), and the pre-skip is taken off.
 *   Vorbis: a packet's length needs the codebooks of the setup header, which this does not read:
 *           the seconds are the largest granule position, but at least the audio packets present
 *           × the short block's half (the fewest samples a Vorbis packet can yield).
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

/** Opus samples (48 kHz) of the packet whose first bytes are at `at` (RFC 6716 §3.1). */
export function opusPacketSamples(b: Uint8Array, at: number): number {
  const toc = u8(b, at);
  const config = toc >> 3;
  const frame = config < 12 ? [480, 960, 1_920, 2_880][config % 4]! : config < 16 ? [480, 960][config % 2]! : [120, 240, 480, 960][config % 4]!;
  const code = toc & 3;
  const frames = code === 0 ? 1 : code === 3 ? u8(b, at + 1) & 0x3f : 2;
  return Math.min(OPUS_PACKET_SAMPLES_MAX, frame * frames);
}

interface Stream {
  serial: number;
  codec: "opus" | "vorbis";
  rate: number;
  preSkip: number;
  /** Samples of a short Vorbis block's half: the fewest one packet yields. */
  packetSamplesMin: number;
  packets: number;
  samples: number;
  lastGranule: number;
  lastPageSamples: number;
}

/** The stream a first packet opens, when its codec is one this reads. */
function openStream(b: Uint8Array, serial: number, at: number): Stream | null {
  const base = { serial, preSkip: 0, packetSamplesMin: 0, packets: 0, samples: 0, lastGranule: -1, lastPageSamples: 0 };
  if (fourcc(b, at) === "Opus" && fourcc(b, at + 4) === "Head") return { ...base, codec: "opus", rate: OPUS_RATE, preSkip: u16le(b, at + 10) };
  if (u8(b, at) === 1 && fourcc(b, at + 1) === "vorb") {
    const rate = u32le(b, at + 12);
    return plausibleRate(rate) ? { ...base, codec: "vorbis", rate, packetSamplesMin: (1 << (u8(b, at + 28) & 0xf)) / 2 } : null;
  }
  return null;
}

/** Header packets before the audio: OpusHead and OpusTags; Vorbis identification, comment and setup. */
const HEADER_PACKETS = { opus: 2, vorbis: 3 } as const;

function readPage(b: Uint8Array, at: number, body: number, stream: Stream): void {
  const segments = u8(b, at + 26);
  let pageSamples = 0;
  let start = !(u8(b, at + 5) & CONTINUED);
  for (let i = 0, offset = body; i < segments; i++) {
    const size = u8(b, at + PAGE_HEADER_BYTES + i);
    if (start) {
      if (stream.packets >= HEADER_PACKETS[stream.codec]) {
        pageSamples += stream.codec === "opus" ? opusPacketSamples(b, offset) : stream.packetSamplesMin;
      }
      stream.packets++;
    }
    start = size < 255;
    offset += size;
  }
  stream.samples += pageSamples;
  const granule = u64le(b, at + 6);
  if (pageSamples > 0 && granule < 2 ** 63) [stream.lastGranule, stream.lastPageSamples] = [Math.max(granule, stream.codec === "vorbis" ? stream.lastGranule : 0), pageSamples];
}

function streamSeconds(s: Stream): number {
  if (s.codec === "vorbis") return Math.max(s.lastGranule, s.samples) / s.rate;
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
