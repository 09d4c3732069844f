/**
 * The seconds a transcription reserves and bills, from the audio itself and the upstream's report:
 *
 *   reserve: the file's size bound (its bytes at the lowest byte rate its container plausibly
 *            has, src/audio/duration.ts), or the decoded seconds if longer; when the wallet
 *            cannot hold that, the decoded seconds alone (the exact figure, as chat's exact count).
 *   billed:  the larger of the decoded seconds and what the upstream reports (`duration` of
 *            verbose_json, `usage.seconds` of a duration usage), rounded up to whole seconds.
 *            A report beyond the size bound is not a plausible decode of these bytes and is cut
 *            to it. A file whose codec is not read, transcribed to a format that reports
 *            nothing, is billed its reserve.
 */
import { z } from "zod";
import { secondsBound, type AudioDuration } from "../../audio/duration.ts";

/** Float noise below one sample at any plausible rate: 12.0000000001 s is 12 s, not 13. */
const SECONDS_TOLERANCE = 1e-6;

/** Whole seconds, rounded up. */
export const wholeSeconds = (seconds: number): number => Math.max(0, Math.ceil(seconds - SECONDS_TOLERANCE));

export interface AudioSeconds {
  /** Decoded from the data; null when the codec is not read. */
  decoded: number | null;
  /** The most the file's size can carry (see AUDIO_BYTES_PER_S_MIN). */
  bound: number;
}

export function audioSeconds(duration: AudioDuration, bytes: number): AudioSeconds {
  return { decoded: duration.seconds, bound: secondsBound(duration, bytes) };
}

/** Units to reserve first, and the exact units to fall back to when those do not fit the wallet. */
export function reserveSeconds(s: AudioSeconds): { units: number; exactUnits?: number } {
  const units = wholeSeconds(Math.max(s.bound, s.decoded ?? 0));
  return s.decoded === null ? { units } : { units, exactUnits: wholeSeconds(s.decoded) };
}

const durationReply = z.looseObject({
  duration: z.number().finite().nonnegative().optional(),
  usage: z.looseObject({ type: z.string(), seconds: z.number().finite().nonnegative().optional() }).optional(),
});

/** The seconds an upstream's JSON transcript reports, or null (text formats report none). */
export function reportedSeconds(reply: Uint8Array, json: boolean): number | null {
  if (!json) return null;
  let body: unknown;
  try {
    body = JSON.parse(new TextDecoder().decode(reply));
  } catch {
    return null;
  }
  const parsed = durationReply.safeParse(body);
  if (!parsed.success) return null;
  const usage = parsed.data.usage?.type === "duration" ? parsed.data.usage.seconds : undefined;
  const figures = [parsed.data.duration, usage].filter((n) => n !== undefined);
  return figures.length === 0 ? null : Math.max(...figures);
}

/** Whole seconds to bill. */
export function billedSeconds(s: AudioSeconds, reported: number | null): number {
  if (s.decoded === null && reported === null) return reserveSeconds(s).units;
  const plausible = Math.max(s.bound, s.decoded ?? 0);
  return wholeSeconds(Math.max(s.decoded ?? 0, Math.min(reported ?? 0, plausible)));
}
