/**
 * `bun run bench/audio-duration.ts`: time to read the duration of a 25 MB upload (the transcription
 * limit) from its audio data (src/audio/duration.ts), for honest files of each container and for
 * files crafted to be slow (sync patterns everywhere), median of 3; then the longest event-loop
 * stall while the slowest one is read on the audio thread (src/audio/measure.ts).
 */
import { audioDuration } from "../src/audio/duration.ts";
import { measureAudio } from "../src/audio/measure.ts";
import { TRANSCRIPTION_FILE_BYTES_MAX } from "../src/operations/audio/schema.ts";
import { simSpeechAudio } from "../src/sim/audio.ts";
import { loopWaitDuring } from "./measurement.ts";
import { fragmentedM4a, lyingMp3, lyingWebm, m4a, MP3_FRAME_BYTES } from "../test/audioFiles.ts";

const SIZE = TRANSCRIPTION_FILE_BYTES_MAX;

/** A generator's output at the length that fills the limit, from the bytes one unit takes. */
function filling(make: (n: number) => Uint8Array, unit: number): Uint8Array {
  const perUnit = make(unit * 10).length / (unit * 10);
  return make(Math.floor((SIZE * 0.98) / perUnit)).subarray(0, SIZE);
}

function pattern(prefix: string, repeat: number[]): Uint8Array {
  const out = new Uint8Array(SIZE);
  for (let i = 0; i < SIZE; i += repeat.length) out.set(repeat.slice(0, SIZE - i), i);
  out.set(new TextEncoder().encode(prefix));
  return out;
}

const random = new Uint8Array(SIZE);
for (let i = 0, x = 1; i < SIZE; i++) random[i] = (x = (x * 1_103_515_245 + 12_345) >>> 0) >>> 24;
const oggHeaders = pattern("", [...new TextEncoder().encode("OggS"), 0, 0, ...new Array(20).fill(0), 1, 255]);
const boxes = new Uint8Array(SIZE);
for (let at = 0; at + 8 <= SIZE; at += 8) boxes.set([0, 0, 0, 8, 0x66, 0x72, 0x65, 0x65], at); // "free" boxes of 8 bytes
const trafs = new Uint8Array(SIZE); // "moof" boxes each holding an empty "traf"
for (let at = 0; at + 16 <= SIZE; at += 16) trafs.set([0, 0, 0, 16, 0x6d, 0x6f, 0x6f, 0x66, 0, 0, 0, 8, 0x74, 0x72, 0x61, 0x66], at);
trafs.set([0, 0, 0, 16, 0x66, 0x74, 0x79, 0x70]); // behind an ftyp box

const inputs: [string, Uint8Array][] = [
  ["honest WAV (24 kHz 16-bit)", filling((s) => simSpeechAudio("wav", s), 1)],
  ["honest MP3 (48 kbit/s)", lyingMp3(Math.floor(SIZE / MP3_FRAME_BYTES) - 1).bytes],
  ["honest FLAC (verbatim)", filling((s) => simSpeechAudio("flac", s), 1)],
  ["honest Ogg Opus", filling((s) => simSpeechAudio("opus", s), 1)],
  ["honest M4A (AAC)", filling((n) => m4a(n, { statedSeconds: 1 }), 100)],
  ["honest fragmented MP4 (AAC)", filling((n) => fragmentedM4a(n, { statedSeconds: 1 }), 100)],
  ["honest WebM Opus", filling((n) => lyingWebm(n, true).bytes, 100)],
  ["random bytes", random],
  ["0xFF everywhere", new Uint8Array(SIZE).fill(0xff)],
  ["MPEG sync every 2 bytes (FF F3)", pattern("", [0xff, 0xf3])],
  ["MPEG header every 4 bytes (FF F3 64 C4)", pattern("", [0xff, 0xf3, 0x64, 0xc4])],
  ["fLaC + FLAC sync every 2 bytes", pattern("fLaC", [0xff, 0xf8])],
  ["fLaC + FLAC header every 6 bytes", pattern("fLaC", [0xff, 0xf8, 0x69, 0x08, 0x00, 0x00])],
  ["OggS capture pattern every 28 bytes", oggHeaders],
  ["ftyp + 8-byte boxes", boxes],
  ["ftyp + moof/traf pairs every 16 bytes", trafs],
];

const results: [string, number, string][] = [];
for (const [name, bytes] of inputs) {
  const times: number[] = [];
  let found = "";
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now();
    const d = audioDuration(bytes);
    times.push(performance.now() - t0);
    found = d === null ? "not audio" : `${d.container} ${d.seconds === null ? "unread" : `${d.seconds.toFixed(1)} s`}`;
  }
  times.sort((a, b) => a - b);
  results.push([name, times[1]!, found]);
}
console.log(`| Input (${(SIZE / 1024 / 1024).toFixed(0)} MiB) | ms (median of 3) | Read as |\n|---|---:|---|`);
for (const [name, ms, found] of results) console.log(`| ${name} | ${ms.toFixed(1)} | ${found} |`);

const slowest = results.reduce((a, b) => (b[1] > a[1] ? b : a));
const bytes = inputs.find(([name]) => name === slowest[0])![1].slice();
await measureAudio(new Uint8Array(16)); // the thread's start-up is paid once per process, not here
const t0 = performance.now();
const stallMs = await loopWaitDuring(() => measureAudio(bytes));
const wall = performance.now() - t0;
console.log(`\nOn the audio thread, "${slowest[0]}": ${wall.toFixed(0)} ms, longest event-loop stall ${stallMs.toFixed(1)} ms`);
