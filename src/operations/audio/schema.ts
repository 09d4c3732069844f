/**
 * Bodies of POST /v1/audio/speech (OpenAI's CreateSpeechRequest) and the fields of
 * POST /v1/audio/transcriptions (CreateTranscriptionRequest), with named bounds.
 */
import { z } from "zod";

/** Characters of text one speech request may turn into audio, as OpenAI allows. */
export const SPEECH_INPUT_CHARS_MAX = 4_096;
/** Bytes of one uploaded audio file, as OpenAI allows. */
export const TRANSCRIPTION_FILE_BYTES_MAX = 25 * 1024 * 1024;
/** Room for the multipart framing and the other fields around the file. */
export const TRANSCRIPTION_FORM_OVERHEAD_BYTES_MAX = 64 * 1024;
/** Characters of the `prompt` field (OpenAI reads its last 224 tokens; this bounds the bytes). */
export const TRANSCRIPTION_PROMPT_CHARS_MAX = 8_192;
/** File name endings OpenAI accepts for transcription. */
export const AUDIO_EXTENSIONS = ["flac", "mp3", "mp4", "mpeg", "mpga", "m4a", "ogg", "oga", "wav", "webm"] as const;

export const SPEECH_CONTENT_TYPES = {
  mp3: "audio/mpeg",
  opus: "audio/opus",
  aac: "audio/aac",
  flac: "audio/flac",
  wav: "audio/wav",
  pcm: "audio/pcm",
} as const;

const codePoints = (max: number) =>
  z
    .string()
    .min(1, "must not be empty")
    .refine((s) => [...s].length <= max, `must be at most ${max} characters`);

export const speechRequest = z.object({
  model: z.string().min(1).max(256),
  input: codePoints(SPEECH_INPUT_CHARS_MAX),
  instructions: z.string().max(SPEECH_INPUT_CHARS_MAX).optional(),
  voice: z.union([z.string().min(1).max(128), z.object({ id: z.string().min(1).max(128) })]),
  response_format: z.enum(["mp3", "opus", "aac", "flac", "wav", "pcm"]).default("mp3"),
  speed: z.number().min(0.25).max(4).optional(),
  /** Only raw audio is relayed; SSE speech events are not offered. */
  stream_format: z.literal("audio").optional(),
});
export type SpeechRequest = z.infer<typeof speechRequest>;

export const TRANSCRIPT_FORMATS = ["json", "text", "srt", "verbose_json", "vtt"] as const;
export type TranscriptFormat = (typeof TRANSCRIPT_FORMATS)[number];

/** The form's text fields (the file is checked apart). */
export const transcriptionFields = z
  .object({
    model: z.string().min(1).max(256),
    language: z.string().min(2).max(16).optional(),
    prompt: z.string().max(TRANSCRIPTION_PROMPT_CHARS_MAX).optional(),
    response_format: z.enum(TRANSCRIPT_FORMATS).default("json"),
    temperature: z.coerce.number().min(0).max(1).optional(),
    timestamp_granularities: z
      .array(z.enum(["word", "segment"]))
      .max(2)
      .optional(),
  })
  .refine((f) => !f.timestamp_granularities || f.response_format === "verbose_json", {
    message: "timestamp_granularities needs response_format `verbose_json`",
    path: ["timestamp_granularities"],
  });
export type TranscriptionFields = z.infer<typeof transcriptionFields>;

/** Whether a file name ends with an audio extension OpenAI accepts. */
export function audioExtensionOk(name: string): boolean {
  const dot = name.lastIndexOf(".");
  return dot !== -1 && (AUDIO_EXTENSIONS as readonly string[]).includes(name.slice(dot + 1).toLowerCase());
}
