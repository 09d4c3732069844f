/**
 * Bounds-checked reads of an untrusted file: every reader returns 0 past the end instead of
 * throwing, so a truncated or lying file ends a parse by its own checks, never by an exception.
 */

export const u8 = (b: Uint8Array, at: number): number => b[at] ?? 0;
export const u16be = (b: Uint8Array, at: number): number => (u8(b, at) << 8) | u8(b, at + 1);
export const u16le = (b: Uint8Array, at: number): number => u8(b, at) | (u8(b, at + 1) << 8);
export const u24be = (b: Uint8Array, at: number): number => (u8(b, at) << 16) | u16be(b, at + 1);
export const u32be = (b: Uint8Array, at: number): number => u8(b, at) * 0x1000000 + u24be(b, at + 1);
export const u32le = (b: Uint8Array, at: number): number => u16le(b, at) + u16le(b, at + 2) * 0x10000;
/** A 64-bit field as a Number (exact below 2^53, which every length in a bounded file is). */
export const u64be = (b: Uint8Array, at: number): number => u32be(b, at) * 0x100000000 + u32be(b, at + 4);
export const u64le = (b: Uint8Array, at: number): number => u32le(b, at) + u32le(b, at + 4) * 0x100000000;

/** Four bytes as ASCII (a chunk or box type). */
export function fourcc(b: Uint8Array, at: number): string {
  return String.fromCharCode(u8(b, at), u8(b, at + 1), u8(b, at + 2), u8(b, at + 3));
}

/**
 * Samples counted per sample rate, so the seconds are one exact division per rate: a sum of
 * per-frame fractions would drift, and a duration of exactly 12 s must not round up to 13.
 */
export class SampleCount {
  readonly #byRate = new Map<number, number>();

  add(samples: number, rate: number): void {
    this.#byRate.set(rate, (this.#byRate.get(rate) ?? 0) + samples);
  }

  seconds(): number {
    let seconds = 0;
    for (const [rate, samples] of this.#byRate) seconds += samples / rate;
    return seconds;
  }
}

/** Sample rates a decoder is asked to play: outside this, a rate is a lie or a broken field. */
export const SAMPLE_RATE_MIN_HZ = 1_000;
export const SAMPLE_RATE_MAX_HZ = 768_000;
export const plausibleRate = (hz: number): boolean => Number.isInteger(hz) && hz >= SAMPLE_RATE_MIN_HZ && hz <= SAMPLE_RATE_MAX_HZ;

/**
 * The next byte at or after `from` that can start a frame header (0xFF; frame syncs are 0xFF
 * then 0xE0 or more), or -1. A run of 0xFF is crossed in one tight loop: inside it no header
 * starts (two 0xFF after the first make an invalid bit-rate or layer), so a file flooded with
 * 0xFF costs a byte comparison per byte, not a header parse.
 */
export function nextSync(b: Uint8Array, from: number): number {
  const at = b.indexOf(0xff, from);
  if (at === -1 || b[at + 1] !== 0xff || b[at + 2] !== 0xff) return at;
  let run = at + 2;
  while (b[run + 1] === 0xff) run++;
  return run - 1;
}
