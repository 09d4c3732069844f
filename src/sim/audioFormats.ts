/**
 * Speech in Opus, AAC and FLAC of any length, for the simulator, without an encoder at run time:
 *
 *   FLAC: written here from the samples, each block a verbatim subframe (valid, uncompressed).
 *   Opus: the Ogg fixture's Opus packets repeated into new pages; the last page's granule
 *         position trims the end to the exact length, as Ogg Opus allows (RFC 7845 §4.5).
 *   AAC:  the ADTS fixture's frames repeated, to the whole frame (1,024 samples) at or past the
 *         length (and at least AAC_FRAMES_MIN frames).
 * Each codec's frames are self-contained enough for a tone: decoders play the repetition back
 * as the same sound, and parsers (music-metadata) read the intended duration.
 */

/** Samples per FLAC block (a common encoder default). */
const FLAC_BLOCK_SAMPLES = 4_096;
/** Opus always counts granule positions at 48 kHz. */
const OPUS_GRANULE_RATE = 48_000;
/** Opus packets in one Ogg page of the output (a page holds at most 255 lacing values). */
const OPUS_PACKETS_PER_PAGE_MAX = 50;
const AAC_FRAME_SAMPLES = 1_024;
/** Parsers need a few ADTS frames to find the stream (music-metadata reads no duration from 3). */
const AAC_FRAMES_MIN = 4;

function crc8(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes) {
    crc ^= byte;
    for (let i = 0; i < 8; i++) crc = crc & 0x80 ? ((crc << 1) ^ 0x07) & 0xff : (crc << 1) & 0xff;
  }
  return crc;
}

function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes) {
    crc ^= byte << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x8005) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

/** FLAC's UTF-8-style coding of a frame number (up to 31 bits). */
export function flacFrameNumber(n: number): number[] {
  if (n < 0x80) return [n];
  const count = n < 0x800 ? 2 : n < 0x10000 ? 3 : n < 0x200000 ? 4 : n < 0x4000000 ? 5 : 6;
  const out: number[] = [];
  let value = n;
  for (let i = 1; i < count; i++) {
    out.unshift(0x80 | (value & 0x3f));
    value = Math.floor(value / 64);
  }
  const lead = (0xff00 >> count) & 0xff;
  return [lead | value, ...out];
}

/** A FLAC file of 16-bit mono samples. */
export function flacFile(samples: Int16Array, sampleRate: number): Buffer {
  const info = Buffer.alloc(4 + 4 + 34);
  info.write("fLaC", 0, "ascii");
  info[4] = 0x80; // last metadata block, type 0 (STREAMINFO)
  info.writeUIntBE(34, 5, 3);
  info.writeUInt16BE(FLAC_BLOCK_SAMPLES, 8);
  info.writeUInt16BE(FLAC_BLOCK_SAMPLES, 10);
  // Sample rate (20 bits), channels − 1 (3 bits), bits per sample − 1 (5 bits), total samples (36 bits).
  const total = BigInt(samples.length);
  const packed = (BigInt(sampleRate) << 44n) | (0n << 41n) | (15n << 36n) | total;
  info.writeBigUInt64BE(packed, 18);
  const frames: Buffer[] = [info];
  for (let start = 0, n = 0; start < samples.length; start += FLAC_BLOCK_SAMPLES, n++) {
    const block = samples.subarray(start, start + FLAC_BLOCK_SAMPLES);
    // Sync + fixed blocking; block size from the 16 bits after the number; rate from STREAMINFO; mono, 16 bits.
    const header = [0xff, 0xf8, 0x70, 0x08, ...flacFrameNumber(n), (block.length - 1) >> 8, (block.length - 1) & 0xff];
    header.push(crc8(Uint8Array.from(header)));
    const frame = Buffer.alloc(header.length + 1 + block.length * 2 + 2);
    frame.set(header, 0);
    frame[header.length] = 0x02; // verbatim subframe, no wasted bits
    for (let i = 0; i < block.length; i++) frame.writeInt16BE(block[i]!, header.length + 1 + i * 2);
    frame.writeUInt16BE(crc16(frame.subarray(0, frame.length - 2)), frame.length - 2);
    frames.push(frame);
  }
  return Buffer.concat(frames);
}

export interface OggPage {
  flags: number;
  granule: bigint;
  serial: number;
  packets: Buffer[];
}

export function oggPages(file: Buffer): OggPage[] {
  const pages: OggPage[] = [];
  for (let at = 0; at + 27 <= file.length; ) {
    const segments = file[at + 26]!;
    const lacing = file.subarray(at + 27, at + 27 + segments);
    let body = at + 27 + segments;
    const packets: Buffer[] = [];
    let open: Buffer[] = [];
    for (const size of lacing) {
      open.push(file.subarray(body, body + size));
      body += size;
      if (size < 255) {
        packets.push(Buffer.concat(open));
        open = [];
      }
    }
    pages.push({ flags: file[at + 5]!, granule: file.readBigInt64LE(at + 6), serial: file.readUInt32LE(at + 14), packets });
    at = body;
  }
  return pages;
}

const OGG_CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    let r = i << 24;
    for (let j = 0; j < 8; j++) r = r & 0x80000000 ? (r << 1) ^ 0x04c11db7 : r << 1;
    table[i] = r >>> 0;
  }
  return table;
})();

export function oggPage(page: OggPage, sequence: number): Buffer {
  const lacing: number[] = [];
  for (const packet of page.packets) {
    for (let left = packet.length; ; left -= 255) {
      lacing.push(Math.min(left, 255));
      if (left < 255) break;
    }
  }
  const out = Buffer.alloc(27 + lacing.length + page.packets.reduce((n, p) => n + p.length, 0));
  out.write("OggS", 0, "ascii");
  out[5] = page.flags;
  out.writeBigInt64LE(page.granule, 6);
  out.writeUInt32LE(page.serial, 14);
  out.writeUInt32LE(sequence, 18);
  out[26] = lacing.length;
  out.set(lacing, 27);
  Buffer.concat(page.packets).copy(out, 27 + lacing.length);
  let crc = 0;
  for (const byte of out) crc = ((crc << 8) ^ OGG_CRC_TABLE[((crc >>> 24) ^ byte) & 0xff]!) >>> 0;
  out.writeUInt32LE(crc, 22);
  return out;
}

/** Opus samples (at 48 kHz) in one packet, from its TOC byte (RFC 6716 §3.1). */
export function opusPacketSamples(packet: Buffer): number {
  const toc = packet[0]!;
  const config = toc >> 3;
  const frameMs = config < 12 ? [10, 20, 40, 60][config % 4]! : config < 16 ? [10, 20][config % 2]! : [2.5, 5, 10, 20][config % 4]!;
  const code = toc & 3;
  const frames = code === 0 ? 1 : code === 3 ? packet[1]! & 0x3f : 2;
  return (frameMs * OPUS_GRANULE_RATE * frames) / 1000;
}

/** The Ogg Opus clip's audio packets repeated to last exactly `seconds`. */
export function opusOfLength(clip: Buffer, seconds: number): Buffer {
  const pages = oggPages(clip);
  const head = pages[0]!.packets[0]!;
  const preSkip = head.readUInt16LE(10);
  const audio = pages.slice(2).flatMap((p) => p.packets);
  const end = BigInt(preSkip + Math.round(seconds * OPUS_GRANULE_RATE));
  const out = [oggPage(pages[0]!, 0), oggPage(pages[1]!, 1)];
  let granule = 0n;
  for (let i = 0, sequence = 2; granule < end; sequence++) {
    const packets: Buffer[] = [];
    while (packets.length < OPUS_PACKETS_PER_PAGE_MAX && granule < end) {
      const packet = audio[i++ % audio.length]!;
      packets.push(packet);
      granule += BigInt(opusPacketSamples(packet));
    }
    const last = granule >= end;
    out.push(oggPage({ flags: last ? 0x04 : 0, granule: last ? end : granule, serial: pages[0]!.serial, packets }, sequence));
  }
  return Buffer.concat(out);
}

/** The ADTS clip's frames repeated to at least `seconds` (whole frames). */
export function aacOfLength(clip: Buffer, seconds: number, sampleRate: number): Buffer {
  const frames: Buffer[] = [];
  for (let at = 0; at + 7 <= clip.length; ) {
    const length = ((clip[at + 3]! & 3) << 11) | (clip[at + 4]! << 3) | (clip[at + 5]! >> 5);
    frames.push(clip.subarray(at, at + length));
    at += length;
  }
  const count = Math.max(AAC_FRAMES_MIN, Math.ceil((seconds * sampleRate) / AAC_FRAME_SAMPLES));
  return Buffer.concat(Array.from({ length: count }, (_, i) => frames[i % frames.length]!));
}
