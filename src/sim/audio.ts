/**
 * POST /v1/audio/speech and /v1/audio/transcriptions.
 *
 * Speech is real audio of a 440 Hz tone lasting `simSpeechSeconds(input, speed)`: WAV and PCM
 * (24 kHz mono 16-bit) and FLAC written here, MP3 encoded with lamejs, Opus and AAC made by
 * repeating the frames of one-second fixture clips (made once with ffmpeg 5.1 from the same tone,
 * checked in under fixtures/) to the length: every format lasts as long as the input asks. The body is sent in chunks, like a vendor streaming
 * audio as it is made. A transcription measures how long the upload plays from its audio data
 * (audioLength.ts, never its header fields) and returns a deterministic transcript in the asked
 * format, reporting that duration; it logs whole seconds (rounded up).
 */
import { Mp3Encoder } from "@breezystack/lamejs";
import { readFileSync } from "node:fs";
import { z } from "zod";
import { SPEECH_CONTENT_TYPES } from "../operations/audio/schema.ts";
import type { ChatContext } from "./chat.ts";
import { simError, simJson, simOperation } from "./ops.ts";
import { aacOfLength, flacFile, opusOfLength } from "./audioFormats.ts";
import { simAudioSeconds } from "./audioLength.ts";
import { simVocabulary } from "./text.ts";

export const SIM_SPEECH_SAMPLE_RATE = 24_000;
/** Speaking rate of the simulated voice at speed 1. */
export const SIM_SPEECH_CHARS_PER_S = 15;
const SPEECH_CHUNK_BYTES = 4_096;
const MP3_KBPS = 48;

export type SpeechFormat = keyof typeof SPEECH_CONTENT_TYPES;

const fixture = (name: string) => readFileSync(new URL(`./fixtures/${name}`, import.meta.url));
/** One-second clips whose frames are repeated to any length (audioFormats.ts). */
const FIXTURES = { opus: fixture("speech.opus"), aac: fixture("speech.aac") };

const speechRequest = z.looseObject({
  model: z.string().min(1),
  input: z.string().min(1).max(4_096),
  voice: z.union([z.string(), z.looseObject({ id: z.string() })]),
  response_format: z.enum(["mp3", "opus", "aac", "flac", "wav", "pcm"]).default("mp3"),
  speed: z.number().min(0.25).max(4).default(1),
});

/** Seconds of speech for an input, at least a tenth of a second, in whole samples. */
export function simSpeechSeconds(input: string, speed = 1): number {
  const samples = Math.max(
    SIM_SPEECH_SAMPLE_RATE / 10,
    Math.round(([...input].length / SIM_SPEECH_CHARS_PER_S / speed) * SIM_SPEECH_SAMPLE_RATE),
  );
  return samples / SIM_SPEECH_SAMPLE_RATE;
}

function tone(seconds: number): Int16Array {
  const samples = new Int16Array(Math.round(seconds * SIM_SPEECH_SAMPLE_RATE));
  for (let i = 0; i < samples.length; i++) samples[i] = Math.round(8_000 * Math.sin((2 * Math.PI * 440 * i) / SIM_SPEECH_SAMPLE_RATE));
  return samples;
}

/** A canonical 44-byte-header WAV file of 16-bit mono PCM. */
export function wavFile(samples: Int16Array, sampleRate = SIM_SPEECH_SAMPLE_RATE): Buffer {
  const data = Buffer.from(samples.buffer, samples.byteOffset, samples.byteLength);
  const header = Buffer.alloc(44);
  header.write("RIFF", 0, "ascii");
  header.writeUInt32LE(36 + data.length, 4);
  header.write("WAVEfmt ", 8, "ascii");
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(1, 20); // PCM
  header.writeUInt16LE(1, 22); // mono
  header.writeUInt32LE(sampleRate, 24);
  header.writeUInt32LE(sampleRate * 2, 28);
  header.writeUInt16LE(2, 32);
  header.writeUInt16LE(16, 34);
  header.write("data", 36, "ascii");
  header.writeUInt32LE(data.length, 40);
  return Buffer.concat([header, data]);
}

/** A WAV of the simulator's tone lasting `seconds`: test uploads for transcriptions. */
export function simToneWav(seconds: number): Buffer {
  return wavFile(tone(seconds));
}

function mp3File(samples: Int16Array): Buffer {
  const encoder = new Mp3Encoder(1, SIM_SPEECH_SAMPLE_RATE, MP3_KBPS);
  const parts: Uint8Array[] = [];
  const block = 1_152;
  // lamejs hands back Int8Arrays; take their bytes as they are.
  const bytes = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  for (let i = 0; i < samples.length; i += block) parts.push(bytes(encoder.encodeBuffer(samples.subarray(i, i + block))));
  parts.push(bytes(encoder.flush()));
  return Buffer.concat(parts);
}

export function simSpeechAudio(format: SpeechFormat, seconds: number): Buffer {
  if (format === "opus") return opusOfLength(FIXTURES.opus, seconds);
  if (format === "aac") return aacOfLength(FIXTURES.aac, seconds, SIM_SPEECH_SAMPLE_RATE);
  const samples = tone(seconds);
  if (format === "flac") return flacFile(samples, SIM_SPEECH_SAMPLE_RATE);
  if (format === "wav") return wavFile(samples);
  if (format === "pcm") return Buffer.from(samples.buffer, samples.byteOffset, samples.byteLength);
  return mp3File(samples);
}

function chunked(bytes: Buffer): ReadableStream<Uint8Array> {
  let offset = 0;
  return new ReadableStream({
    pull(controller) {
      if (offset >= bytes.length) return controller.close();
      controller.enqueue(bytes.subarray(offset, offset + SPEECH_CHUNK_BYTES));
      offset += SPEECH_CHUNK_BYTES;
    },
  });
}

export function handleSpeech(context: ChatContext, req: Request): Promise<Response> {
  return simOperation(context, req, "speech", async () => {
    const body = await simJson(req, speechRequest);
    if (body instanceof Response) return { response: body, model: "", units: 0 };
    const audio = simSpeechAudio(body.response_format, simSpeechSeconds(body.input, body.speed));
    const response = new Response(chunked(audio), { headers: { "content-type": SPEECH_CONTENT_TYPES[body.response_format] } });
    return { response, model: body.model, units: [...body.input].length };
  });
}

const TRANSCRIPT_WORDS_PER_S = 2;

/** The simulator's transcript of `seconds` of audio: two words a second, from its vocabulary. */
export function simTranscriptWords(seconds: number): string[] {
  const count = Math.max(1, Math.ceil(seconds * TRANSCRIPT_WORDS_PER_S));
  return Array.from({ length: count }, (_, i) => simVocabulary[i % simVocabulary.length]!);
}

function timestamp(seconds: number, separator: "," | "."): string {
  const ms = Math.round(seconds * 1000);
  const pad = (n: number, w = 2) => String(n).padStart(w, "0");
  return `${pad(Math.floor(ms / 3_600_000))}:${pad(Math.floor(ms / 60_000) % 60)}:${pad(Math.floor(ms / 1000) % 60)}${separator}${pad(ms % 1000, 3)}`;
}

/** The transcript in each `response_format`; `words` only with the word granularity. */
export function simTranscript(
  seconds: number,
  format: string,
  granularities: string[],
  language: string,
): { body: string; contentType: string } {
  const words = simTranscriptWords(seconds);
  const text = `${words.join(" ")}.`;
  const segment = {
    id: 0,
    seek: 0,
    start: 0,
    end: seconds,
    text: ` ${text}`,
    tokens: [],
    temperature: 0,
    avg_logprob: -0.1,
    compression_ratio: 1,
    no_speech_prob: 0,
  };
  switch (format) {
    case "text":
      return { body: `${text}\n`, contentType: "text/plain; charset=utf-8" };
    case "srt":
      return { body: `1\n${timestamp(0, ",")} --> ${timestamp(seconds, ",")}\n${text}\n\n`, contentType: "text/plain; charset=utf-8" };
    case "vtt":
      return {
        body: `WEBVTT\n\n${timestamp(0, ".")} --> ${timestamp(seconds, ".")}\n${text}\n\n`,
        contentType: "text/plain; charset=utf-8",
      };
    case "verbose_json": {
      const step = seconds / words.length;
      const reply: Record<string, unknown> = {
        task: "transcribe",
        language,
        duration: seconds,
        text,
        usage: { type: "duration", seconds: Math.ceil(seconds) },
      };
      if (granularities.includes("segment") || !granularities.includes("word")) reply.segments = [segment];
      if (granularities.includes("word")) reply.words = words.map((word, i) => ({ word, start: i * step, end: (i + 1) * step }));
      return { body: JSON.stringify(reply), contentType: "application/json" };
    }
    default:
      return { body: JSON.stringify({ text, usage: { type: "duration", seconds: Math.ceil(seconds) } }), contentType: "application/json" };
  }
}

export function handleTranscription(context: ChatContext, req: Request): Promise<Response> {
  return simOperation(context, req, "transcription", async () => {
    let form: Awaited<ReturnType<Request["formData"]>>;
    try {
      form = await req.formData();
    } catch {
      return { response: simError(400, "The body is not multipart form data."), model: "", units: 0 };
    }
    const file = form.get("file");
    const model = form.get("model");
    if (!(file instanceof File) || typeof model !== "string")
      return { response: simError(400, "`file` and `model` are required.", "file"), model: "", units: 0 };
    const seconds = await simAudioSeconds(Buffer.from(await file.arrayBuffer()), file.name, file.type);
    if (!seconds || !Number.isFinite(seconds))
      return { response: simError(400, "The file is not audio the simulator can read.", "file"), model, units: 0 };
    const granularities = [...form.getAll("timestamp_granularities[]"), ...form.getAll("timestamp_granularities")].map(String);
    const language = typeof form.get("language") === "string" ? String(form.get("language")) : "english";
    const reply = simTranscript(seconds, String(form.get("response_format") ?? "json"), granularities, language);
    return { response: new Response(reply.body, { headers: { "content-type": reply.contentType } }), model, units: Math.ceil(seconds) };
  });
}
