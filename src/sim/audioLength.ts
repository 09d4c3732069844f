/**
 * How long an uploaded file plays, as a decoding upstream measures it: the simulator bills
 * transcriptions by this. It shares no code with the gateway's reader (src/audio): frames are
 * found by codec-parser (MP3, ADTS AAC, FLAC, Ogg Opus/Vorbis/FLAC); WAV and MP4 are read here
 * the way ffmpeg's demuxers play them, and WebM's Opus blocks (unlaced, as browsers record them)
 * are counted by their TOC byte. Header durations (WAV `fact`, Xing counts, STREAMINFO totals,
 * `mvhd`/`mdhd`, WebM `Duration`) are never used. Anything else falls back to music-metadata.
 */
import CodecParser, { type CodecFrame, type OggPage } from "codec-parser";
import { parseBuffer } from "music-metadata";
import { opusPacketSamples } from "./audioFormats.ts";

type Mime = "audio/mpeg" | "audio/aac" | "audio/flac";

const ascii = (b: Buffer, at: number, n = 4) => b.toString("latin1", at, at + n);

/** PCM WAV: the `data` chunk's bytes (to the end of the file when its size is unset or too large) over the byte rate. */
function wavSeconds(b: Buffer): number | null {
  let byteRate = 0;
  for (let at = 12; at + 8 <= b.length; ) {
    const id = ascii(b, at);
    const size = b.readUInt32LE(at + 4);
    if (id === "fmt ") byteRate = b.readUInt32LE(at + 12) * b.readUInt16LE(at + 10) * (b.readUInt16LE(at + 22) / 8);
    if (id === "data") {
      const bytes = size === 0 || at + 8 + size > b.length ? b.length - at - 8 : size;
      return byteRate > 0 ? bytes / byteRate : null;
    }
    at += 8 + size + (size % 2);
  }
  return null;
}

/** A box's payload inside `b[start, end)` by a path of types, e.g. moov/trak/mdia. */
function box(b: Buffer, path: string[], start = 0, end = b.length): { start: number; end: number } | null {
  for (let at = start; at + 8 <= end; ) {
    const size = b.readUInt32BE(at);
    if (size < 8) return null;
    if (ascii(b, at + 4) === path[0])
      return path.length === 1 ? { start: at + 8, end: Math.min(end, at + size) } : box(b, path.slice(1), at + 8, Math.min(end, at + size));
    at += size;
  }
  return null;
}

const AAC_RATES = [96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350];

/** AAC in MP4: every sample in the tables (or the fragments' runs) is one access unit that decodes to 1,024 samples at the AudioSpecificConfig's rate. */
function mp4Seconds(b: Buffer): number | null {
  const stbl = box(b, ["moov", "trak", "mdia", "minf", "stbl"]);
  const stsz = stbl && box(b, ["stsz"], stbl.start, stbl.end);
  const stsd = stbl && box(b, ["stsd"], stbl.start, stbl.end);
  if (!stsz || !stsd || ascii(b, stsd.start + 12) !== "mp4a") return null;
  const esds = box(b, ["esds"], stsd.start + 8 + 36, stsd.end);
  if (!esds) return null;
  // ES_Descriptor (3) → DecoderConfigDescriptor (4) → DecoderSpecificInfo (5): the AudioSpecificConfig.
  let at = esds.start + 4;
  const descriptor = () => {
    at++;
    while (b[at++]! & 0x80);
  };
  descriptor();
  at += 3; // ES_ID and flags (no optional fields, as encoders write it)
  descriptor();
  at += 13;
  descriptor();
  const rate = AAC_RATES[(b.readUInt16BE(at) >> 7) & 0xf];
  // Fragmented files (Safari's recordings) list their samples in each fragment's runs.
  let samples = b.readUInt32BE(stsz.start + 8);
  for (let top = 0; top + 8 <= b.length && b.readUInt32BE(top) >= 8; top += b.readUInt32BE(top)) {
    if (ascii(b, top + 4) !== "moof") continue;
    const traf = box(b, ["traf"], top + 8, top + b.readUInt32BE(top));
    for (let run = traf?.start ?? 0; traf && run + 8 <= traf.end; run += b.readUInt32BE(run)) {
      if (ascii(b, run + 4) === "trun") samples += b.readUInt32BE(run + 12);
      if (b.readUInt32BE(run) < 8) break;
    }
  }
  return rate ? (samples * 1024) / rate : null;
}

/** STREAMINFO's sample rate, which FLAC frames may defer to. */
const flacStreamRate = (b: Buffer): number => (b.readUInt32BE(18) >>> 12) & 0xfffff;

function framedSeconds(b: Buffer, mime: Mime): number | null {
  const codecFrames = new CodecParser(mime, { enableLogging: false }).parseAll(new Uint8Array(b)) as CodecFrame[];
  // An encoder's Xing/Info frame is silent and skipped by decoders.
  const first = codecFrames[0]?.data;
  if (mime === "audio/mpeg" && first && /Xing|Info/.test(Buffer.from(first.subarray(0, 64)).toString("latin1"))) codecFrames.shift();
  const streamRate = mime === "audio/flac" ? flacStreamRate(b) : 0;
  // Samples summed per rate, then one division each: a sum of per-frame fractions drifts past whole seconds.
  const byRate = new Map<number, number>();
  for (const frame of codecFrames) {
    // FLAC frames that defer to STREAMINFO carry a note instead of a number.
    const rate = typeof frame.header.sampleRate === "number" ? frame.header.sampleRate : streamRate;
    byRate.set(rate, (byRate.get(rate) ?? 0) + frame.samples);
  }
  let seconds = 0;
  for (const [rate, samples] of byRate) seconds += samples / rate;
  return seconds > 0 && Number.isFinite(seconds) ? seconds : null;
}

/**
 * Ogg (Opus, Vorbis): codec-parser counts each packet's samples (Opus by its TOC, Vorbis by its
 * mode's block size) but trims the page it is told is the last to that page's granule position,
 * which a file may state as anything; so that flag is cleared first, and the stream ends where
 * the last granule position says only when that lies within the last page (RFC 7845 §4.5).
 */
function oggSeconds(b: Buffer): number | null {
  const copy = Buffer.from(b);
  for (let at = 0; at + 27 <= copy.length && ascii(copy, at) === "OggS"; ) {
    copy[at + 5] = copy[at + 5]! & ~0x04;
    let size = 27 + copy[at + 26]!;
    for (let i = 0; i < copy[at + 26]!; i++) size += copy[at + 27 + i]!;
    at += size;
  }
  const pages = new CodecParser("audio/ogg", { enableLogging: false }).parseAll(new Uint8Array(copy)) as OggPage[];
  const frames = pages.flatMap((p) => p.codecFrames);
  const header = frames[0]?.header;
  if (!header) return null;
  // Opus frames already leave out the pre-skip; its granule positions count it.
  const preSkip = "preSkip" in header ? header.preSkip : 0;
  const samples = frames.reduce((n, f) => n + f.samples, 0);
  const last = pages.findLast((p) => p.codecFrames.length > 0)!;
  const lastPage = last.codecFrames.reduce((n, f) => n + f.samples, 0);
  const end = Number(last.absoluteGranulePosition) - preSkip;
  return (end <= samples && end >= samples - lastPage ? end : samples) / header.sampleRate;
}

/** EBML elements the walk descends into: Segment, Tracks, TrackEntry, Cluster, BlockGroup. */
const WEBM_PARENTS = [0x18538067, 0x1654ae6b, 0xae, 0x1f43b675, 0xa0];

/** WebM: the Opus track's unlaced SimpleBlocks and Blocks, each one packet. */
function webmSeconds(b: Buffer): number | null {
  /** An EBML number at `at`: [value, bytes]; the length marker stays in IDs. */
  const number = (at: number, id: boolean): [number, number] => {
    const bytes = Math.clz32(b[at]!) - 23;
    let value = id ? b[at]! : b[at]! & (0xff >> bytes);
    for (let i = 1; i < bytes; i++) value = value * 256 + b[at + i]!;
    return [value, bytes];
  };
  let track = -1;
  let opus = -1;
  let samples = 0;
  let at = 0;
  while (at < b.length && b[at] !== 0) {
    const [id, idBytes] = number(at, true);
    const [size, sizeBytes] = number(at + idBytes, false);
    const body = at + idBytes + sizeBytes;
    const unknown = size === 2 ** (7 * sizeBytes) - 1;
    at = WEBM_PARENTS.includes(id) ? body : unknown ? b.length : body + size;
    if (id === 0xd7) track = b.readUIntBE(body, size);
    else if (id === 0x86 && b.toString("latin1", body, body + size) === "A_OPUS") opus = track;
    else if ((id === 0xa3 || id === 0xa1) && opus >= 0 && number(body, false)[0] === opus)
      samples += opusPacketSamples(b.subarray(body + number(body, false)[1] + 3, body + size));
  }
  return opus >= 0 && samples > 0 ? samples / 48_000 : null;
}

/** Seconds the file plays for, or null when it is not audio the simulator can decode. */
export async function simAudioSeconds(bytes: Buffer, name: string, type: string): Promise<number | null> {
  try {
    return await decodedSeconds(bytes, name, type);
  } catch {
    return null; // a read past the end of a broken file
  }
}

async function decodedSeconds(bytes: Buffer, name: string, type: string): Promise<number | null> {
  if (ascii(bytes, 0) === "RIFF" && ascii(bytes, 8) === "WAVE") return wavSeconds(bytes);
  if (ascii(bytes, 4) === "ftyp") return mp4Seconds(bytes);
  if (ascii(bytes, 0) === "fLaC") return framedSeconds(bytes, "audio/flac");
  if (ascii(bytes, 0) === "OggS") return oggSeconds(bytes);
  if (bytes.readUInt32BE(0) === 0x1a45dfa3) return webmSeconds(bytes);
  if (bytes[0] === 0xff && (bytes[1]! & 0xf6) === 0xf0) return framedSeconds(bytes, "audio/aac");
  if (ascii(bytes, 0, 3) === "ID3" || (bytes[0] === 0xff && (bytes[1]! & 0xe0) === 0xe0)) return framedSeconds(bytes, "audio/mpeg");
  const meta = await parseBuffer(new Uint8Array(bytes), { mimeType: type || undefined, path: name }, { duration: true });
  return meta.format.duration ?? null;
}
