import { expect, test } from "bun:test";
import { simToneWav } from "../sim/audio.ts";
import { AUDIO_MEASURES_PENDING_MAX, measureAudio } from "./measure.ts";

test("the audio thread reads the duration and hands the same bytes back", async () => {
  const wav = new Uint8Array(simToneWav(2));
  const copy = wav.slice();
  const measured = await measureAudio(wav);
  expect(measured.duration).toEqual({ container: "wav", seconds: 2 });
  expect(wav.byteLength).toBe(0); // moved to the thread, not copied
  expect(measured.bytes).toEqual(copy);
});

test("more files than the pending bound are refused, not queued", async () => {
  const files = Array.from({ length: AUDIO_MEASURES_PENDING_MAX + 1 }, () => new Uint8Array(simToneWav(0.1)));
  const outcomes = await Promise.allSettled(files.map(measureAudio));
  expect(outcomes.filter((o) => o.status === "rejected").length).toBeGreaterThanOrEqual(1);
  expect(outcomes.filter((o) => o.status === "fulfilled").length).toBe(AUDIO_MEASURES_PENDING_MAX);
});
