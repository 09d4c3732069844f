import { expect, test } from "bun:test";
import { audioExtensionOk, speechRequest, transcriptionFields } from "./schema.ts";

test("speech input is bounded in characters, not UTF-16 units", () => {
  const base = { model: "tts-1", voice: "alloy" };
  expect(speechRequest.safeParse({ ...base, input: "😀".repeat(4_096) }).success).toBe(true);
  expect(speechRequest.safeParse({ ...base, input: "a".repeat(4_097) }).success).toBe(false);
  expect(speechRequest.safeParse({ ...base, input: "hi", response_format: "ogg" }).success).toBe(false);
  expect(speechRequest.safeParse({ ...base, input: "hi", speed: 5 }).success).toBe(false);
});

test("timestamp granularities need verbose_json; temperature comes as form text", () => {
  expect(transcriptionFields.safeParse({ model: "whisper-1", timestamp_granularities: ["word"] }).success).toBe(false);
  const ok = transcriptionFields.safeParse({
    model: "whisper-1",
    response_format: "verbose_json",
    timestamp_granularities: ["word"],
    temperature: "0.2",
  });
  expect(ok.success && ok.data.temperature).toBe(0.2);
});

test("file extensions", () => {
  expect(["a.wav", "b.MP3", "c.webm", "d.m4a"].map(audioExtensionOk)).toEqual([true, true, true, true]);
  expect(["a.txt", "wav", "a.wav.exe"].map(audioExtensionOk)).toEqual([false, false, false]);
});
