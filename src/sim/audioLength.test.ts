import { expect, test } from "bun:test";
import { lyingFlac, lyingMp3, lyingMp4, lyingOgg, lyingVorbis, lyingWav, lyingWebm } from "../../test/audioFiles.ts";
import { simAudioSeconds } from "./audioLength.ts";

test.each([
  ["wav", lyingWav(7.25), 0],
  ["mp3", lyingMp3(521), 0],
  ["flac", lyingFlac(20.1), 0],
  ["m4a", lyingMp4(293), 0],
  ["fragmented mp4", lyingMp4(400, true), 0],
  // Whole 20 ms packets: the generator's granule that trimmed the last one is the lie.
  ["ogg", lyingOgg(30.5), 0.02],
  ["ogg vorbis", lyingVorbis(), 0.01],
  ["webm", lyingWebm(301, true), 0],
] as const)("the simulator measures a %s by its audio, not its lying header", async (_, file, slack) => {
  const seconds = (await simAudioSeconds(file.bytes, file.name, file.type))!;
  expect(seconds).toBeGreaterThanOrEqual(file.seconds - 1e-9);
  expect(seconds - file.seconds).toBeLessThanOrEqual(slack);
});

test("broken files are not audio to the simulator, and never throw", async () => {
  for (const bytes of [Buffer.from("RIFF\0\0\0\0WAVE"), Buffer.alloc(64, 0xff), lyingMp4(10).bytes.subarray(0, 40), Buffer.from("fLaC")]) {
    expect(await simAudioSeconds(bytes, "x.bin", "")).toBeNull();
  }
});
