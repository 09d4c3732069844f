/**
 * The duration of an uploaded audio file, read from its audio data, never from the header
 * fields that state a duration (WAV `fact`, Xing/VBRI frame counts, FLAC STREAMINFO's total,
 * MP4 `mvhd`/`mdhd`, WebM `Duration`): a client writes those, and an upstream decodes and bills
 * the audio itself. Pure, no I/O; the work is linear in the file's bytes for every input.
 *
 *   container → the format's walk (wav.ts, mpeg.ts, flac.ts, mp4.ts, ogg.ts, webm.ts) → seconds,
 *               or null where the data gives no honest duration (a codec that is not read);
 *   secondsBound: the most seconds the file's SIZE can carry at the lowest byte rate its
 *               container plausibly has: the reserve, since no honest decoder plays more.
 */
import { isFlac, flacSeconds } from "./flac.ts";
import { framedKind, framedSeconds, id3v2Bytes } from "./mpeg.ts";
import { isMp4, mp4Seconds } from "./mp4.ts";
import { isOgg, oggSeconds } from "./ogg.ts";
import { isWav, wavSeconds } from "./wav.ts";
import { isWebm, webmSeconds } from "./webm.ts";

export type AudioContainer = "wav" | "mpeg" | "flac" | "mp4" | "ogg" | "webm";

export interface AudioDuration {
  container: AudioContainer;
  /** Seconds decoded from the data (0: no audio in it); null when the container holds a codec this does not read. */
  seconds: number | null;
}

/**
 * The lowest bytes per second each container's audio plausibly has, for `secondsBound`:
 *
 *   wav   8,000: PCM at 8 kHz, 8 bits, mono (telephone audio) is the least PCM a recorder writes;
 *         the compressed codecs a WAV may hold instead (ADPCM, GSM 6.10 at 1,625 B/s, G.729 at
 *         1,000), which are not read, take WAV_COMPRESSED_BYTES_PER_S_MIN.
 *   mpeg  1,000: 8 kbit/s, the lowest bit rate an MPEG audio frame header can state (MPEG-2.5
 *         Layer III); ADTS AAC is read by the same walk.
 *   flac  2,000: lossless audio of 8 kHz 8-bit mono compresses to about half; silence goes lower,
 *         but FLAC's frames are always counted, so the bound only matters for broken files.
 *   mp4, ogg, webm  750: 6 kbit/s, the lowest rate of Opus and of HE-AAC v2 as encoders ship them.
 */
export const AUDIO_BYTES_PER_S_MIN: Record<AudioContainer, number> = {
  wav: 8_000,
  mpeg: 1_000,
  flac: 2_000,
  mp4: 750,
  ogg: 750,
  webm: 750,
};
/** A WAV whose codec is not PCM: 8 kbit/s, G.729's rate, the lowest of the speech codecs WAV carries. */
export const WAV_COMPRESSED_BYTES_PER_S_MIN = 1_000;

/**
 * The seconds of audio in a file, read from its data; null when it is not audio in a container
 * this reads.
 *
 * @example audioDuration(wavBytes) // { container: "wav", seconds: 600 } even when `fact` says 1 sample
 */
export function audioDuration(b: Uint8Array): AudioDuration | null {
  if (isWav(b)) return { container: "wav", seconds: wavSeconds(b) };
  if (isFlac(b)) return { container: "flac", seconds: flacSeconds(b) };
  if (isOgg(b)) return { container: "ogg", seconds: oggSeconds(b) };
  if (isWebm(b)) return { container: "webm", seconds: webmSeconds(b) };
  if (isMp4(b)) return { container: "mp4", seconds: mp4Seconds(b) };
  // MPEG audio and ADTS have no file header: two frames in a row, past any ID3 tags, make one.
  const start = id3v2Bytes(b);
  const read = framedKind(b, start);
  return read ? { container: "mpeg", seconds: framedSeconds(b, start, read) } : null;
}

/** The most seconds `bytes` of a file read as `d` can plausibly last (see AUDIO_BYTES_PER_S_MIN). */
export function secondsBound(d: AudioDuration, bytes: number): number {
  const floor = d.container === "wav" && d.seconds === null ? WAV_COMPRESSED_BYTES_PER_S_MIN : AUDIO_BYTES_PER_S_MIN[d.container];
  return bytes / floor;
}
