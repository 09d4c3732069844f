/**
 * MP4 / M4A (ISO BMFF): the seconds come from the audio track's sample tables, never from the
 * `mvhd`, `tkhd` or `mdhd` durations, and are checked against the bytes the file carries.
 *
 *   table seconds: the larger of the time-to-sample total (`stts`) over the track's time scale
 *                  and, for AAC, the sample count (`stsz`) × 1,024 over the codec's own rate
 *                  (AudioSpecificConfig), which a decoder plays whatever the timing tables say;
 *   payload check: the table's samples should cover the `mdat` payload. Payload no track
 *                  references is counted as more of the audio at the same bytes per second;
 *                  tables that claim more bytes than the payload holds are scaled down to it.
 * Fragmented files (what Safari records) add their fragments' runs (`moof`/`traf`/`trun`, with the
 * `trex`/`tfhd` defaults) to the track. A file without a sound track is 0 s.
 */
import { fourcc, plausibleRate, u16be, u24be, u32be, u64be, u8 } from "./bytes.ts";

/** Nesting depth of the boxes read (moov/trak/mdia/minf/stbl/stsd/mp4a/esds is 8). */
const BOX_DEPTH_MAX = 10;
/** A box type as the 32-bit number its four bytes make, so walking boxes builds no strings. */
const type = (name: string): number =>
  ((name.charCodeAt(0) << 24) | (name.charCodeAt(1) << 16) | (name.charCodeAt(2) << 8) | name.charCodeAt(3)) >>> 0;
const [TRAK, MDAT, TREX, TRAF, TRUN] = [type("trak"), type("mdat"), type("trex"), type("traf"), type("trun")];
/** Boxes entered on the way to tracks, their defaults and their fragments. */
const CONTAINERS = new Set(["moov", "mdia", "minf", "stbl", "mvex", "moof"].map(type));
const AAC_FRAME_SAMPLES = 1_024;
const AAC_RATES = [96_000, 88_200, 64_000, 48_000, 44_100, 32_000, 24_000, 22_050, 16_000, 12_000, 11_025, 8_000, 7_350] as const;
/** Tracks read: a file may hold more `trak` boxes, but no real one has this many. */
const TRACKS_MAX = 64;
/** Bytes from a sound sample entry's start to its child boxes (box header, SampleEntry, AudioSampleEntry v0). */
const SOUND_ENTRY_CHILDREN = 36;

interface Box {
  type: number;
  /** Payload start and end (clamped to the parent). */
  start: number;
  end: number;
}

interface Track {
  id: number;
  sound: boolean;
  timescale: number;
  ticks: number;
  sampleCount: number;
  sampleBytes: number;
  codec: string;
  codecRate: number;
}

export const isMp4 = (b: Uint8Array): boolean => ["ftyp", "moov", "mdat", "free", "skip", "wide"].includes(fourcc(b, 4));

/** Calls `visit` with each box in `[start, end)` until it returns true; sizes are clamped to `end`. */
function eachBox(b: Uint8Array, start: number, end: number, visit: (box: Box) => boolean | undefined): void {
  for (let at = start; at + 8 <= end; ) {
    const size32 = u32be(b, at);
    const header = size32 === 1 ? 16 : 8;
    const size = size32 === 0 ? end - at : size32 === 1 ? u64be(b, at + 8) : size32;
    if (size < header) return;
    const boxEnd = Math.min(end, at + size);
    if (visit({ type: u32be(b, at + 4), start: at + header, end: boxEnd })) return;
    at = boxEnd;
  }
}

function child(b: Uint8Array, parent: Box, name: string): Box | undefined {
  const wanted = type(name);
  let found: Box | undefined;
  eachBox(b, parent.start, parent.end, (box) => box.type === wanted && (found = box) !== undefined);
  return found;
}

/** The sampling rate in an `esds` box's AudioSpecificConfig, or 0. */
function esdsRate(b: Uint8Array, esds: Box): number {
  let at = esds.start + 4; // version and flags
  const descriptor = (tag: number): number => {
    if (u8(b, at) !== tag) return -1;
    at++;
    let length = 0;
    for (let i = 0; i < 4; i++) {
      const byte = u8(b, at++);
      length = (length << 7) | (byte & 0x7f);
      if (!(byte & 0x80)) break;
    }
    return length;
  };
  if (descriptor(0x03) < 0) return 0;
  const flags = u8(b, at + 2);
  at += 3;
  if (flags & 0x80) at += 2; // dependsOn_ES_ID
  if (flags & 0x40) at += 1 + u8(b, at); // URL
  if (flags & 0x20) at += 2; // OCR_ES_Id
  if (descriptor(0x04) < 0) return 0;
  at += 13;
  if (descriptor(0x05) < 0 || at + 2 > esds.end) return 0;
  const bits = u16be(b, at) * 0x100 + u8(b, at + 2); // 24 bits: object type (5), rate index (4), …
  const objectType = bits >> 19;
  const index = objectType === 31 ? (bits >> 9) & 0xf : (bits >> 15) & 0xf;
  return AAC_RATES[index] ?? 0;
}

function readTrack(b: Uint8Array, trak: Box): Track {
  const track: Track = { id: 0, sound: false, timescale: 0, ticks: 0, sampleCount: 0, sampleBytes: 0, codec: "", codecRate: 0 };
  const tkhd = child(b, trak, "tkhd");
  if (tkhd) track.id = u32be(b, tkhd.start + (u8(b, tkhd.start) === 1 ? 20 : 12));
  const mdia = child(b, trak, "mdia");
  if (!mdia) return track;
  const hdlr = child(b, mdia, "hdlr");
  track.sound = hdlr !== undefined && fourcc(b, hdlr.start + 8) === "soun";
  const mdhd = child(b, mdia, "mdhd");
  if (mdhd) track.timescale = u32be(b, mdhd.start + (u8(b, mdhd.start) === 1 ? 20 : 12));
  const minf = child(b, mdia, "minf");
  const stbl = minf && child(b, minf, "stbl");
  if (!stbl) return track;
  const stts = child(b, stbl, "stts");
  if (stts) {
    for (let at = stts.start + 8, n = u32be(b, stts.start + 4); n > 0 && at + 8 <= stts.end; n--, at += 8)
      track.ticks += u32be(b, at) * u32be(b, at + 4);
  }
  const stsz = child(b, stbl, "stsz");
  if (stsz) {
    const fixed = u32be(b, stsz.start + 4);
    track.sampleCount = u32be(b, stsz.start + 8);
    if (fixed !== 0) track.sampleBytes = fixed * track.sampleCount;
    else {
      const listed = Math.min(track.sampleCount, Math.floor((stsz.end - stsz.start - 12) / 4));
      track.sampleCount = listed;
      for (let i = 0, at = stsz.start + 12; i < listed; i++, at += 4) track.sampleBytes += u32be(b, at);
    }
  }
  const stsd = child(b, stbl, "stsd");
  let entry: Box | undefined;
  if (stsd) eachBox(b, stsd.start + 8, stsd.end, (box) => (entry = box) !== undefined);
  if (entry) {
    track.codec = fourcc(b, entry.start - 4);
    const esds =
      track.codec === "mp4a"
        ? child(b, { type: entry.type, start: entry.start - 8 + SOUND_ENTRY_CHILDREN, end: entry.end }, "esds")
        : undefined;
    track.codecRate = (esds && esdsRate(b, esds)) || u16be(b, entry.start + 24);
  }
  return track;
}

/** A fragmented file's per-sample defaults (`trex`, overridden per fragment by `tfhd`). */
interface Defaults {
  duration: number;
  size: number;
}

/** Adds a track fragment's runs (`traf`: `tfhd`, `trun`s) to its track. */
function readFragment(b: Uint8Array, traf: Box, tracks: Track[], trex: Map<number, Defaults>): void {
  const tfhd = child(b, traf, "tfhd");
  const track = tfhd && tracks.find((t) => t.id === u32be(b, tfhd.start + 4));
  if (!tfhd || !track) return;
  const flags = u24be(b, tfhd.start + 1);
  const defaults = { ...(trex.get(track.id) ?? { duration: 0, size: 0 }) };
  let at = tfhd.start + 8 + (flags & 0x01 ? 8 : 0) + (flags & 0x02 ? 4 : 0); // base data offset, description index
  if (flags & 0x08) [defaults.duration, at] = [u32be(b, at), at + 4];
  if (flags & 0x10) defaults.size = u32be(b, at);
  eachBox(b, traf.start, traf.end, (box) => {
    if (box.type === TRUN) readRun(b, box, track, defaults);
  });
}

/** A `trun`: its samples, with their durations and sizes listed or the defaults. */
function readRun(b: Uint8Array, trun: Box, track: Track, defaults: Defaults): void {
  const flags = u24be(b, trun.start + 1);
  const count = u32be(b, trun.start + 4);
  const start = trun.start + 8 + (flags & 0x001 ? 4 : 0) + (flags & 0x004 ? 4 : 0); // data offset, first sample flags
  const fields = [0x100, 0x200, 0x400, 0x800].filter((f) => flags & f).length;
  const listed = fields === 0 ? count : Math.min(count, Math.floor((trun.end - start) / (4 * fields)));
  track.sampleCount += listed;
  if (!(flags & 0x100)) track.ticks += listed * defaults.duration;
  if (!(flags & 0x200)) track.sampleBytes += listed * defaults.size;
  if (fields === 0) return;
  for (let i = 0, at = start; i < listed; i++, at += 4 * fields) {
    if (flags & 0x100) track.ticks += u32be(b, at);
    if (flags & 0x200) track.sampleBytes += u32be(b, at + (flags & 0x100 ? 4 : 0));
  }
}

function trackSeconds(track: Track): number {
  const timed = track.timescale > 0 ? track.ticks / track.timescale : 0;
  const framed = track.codec === "mp4a" && plausibleRate(track.codecRate) ? (track.sampleCount * AAC_FRAME_SAMPLES) / track.codecRate : 0;
  return Math.max(timed, framed);
}

/** Seconds of audio in an MP4/M4A file's sound track, fragmented or not (0 without one). */
export function mp4Seconds(b: Uint8Array): number {
  const tracks: Track[] = [];
  const trex = new Map<number, Defaults>();
  let payload = 0;
  const walk = (start: number, end: number, depth: number): void => {
    if (depth > BOX_DEPTH_MAX) return;
    eachBox(b, start, end, (box) => {
      if (box.type === MDAT) payload += box.end - box.start;
      else if (box.type === TRAK && tracks.length < TRACKS_MAX) tracks.push(readTrack(b, box));
      else if (box.type === TREX) trex.set(u32be(b, box.start + 4), { duration: u32be(b, box.start + 12), size: u32be(b, box.start + 16) });
      else if (box.type === TRAF) readFragment(b, box, tracks, trex);
      else if (CONTAINERS.has(box.type)) walk(box.start, box.end, depth + 1);
    });
  };
  walk(0, b.length, 0);
  const sound = tracks.find((t) => t.sound && t.sampleBytes > 0);
  if (!sound) return 0;
  const referenced = tracks.reduce((n, t) => n + t.sampleBytes, 0);
  const audioBytes = referenced <= payload ? sound.sampleBytes + (payload - referenced) : (sound.sampleBytes * payload) / referenced;
  return (trackSeconds(sound) * audioBytes) / sound.sampleBytes;
}
