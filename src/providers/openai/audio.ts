/** OpenAI-style speech and transcription: the bodies pass through with the upstream's model id. */
import type { SpeechAdapter, TranscriptionAdapter } from "../types.ts";

export function openAISpeech(headers: Record<string, string>): SpeechAdapter {
  return {
    buildSpeechRequest: ({ body, upstreamModel }) => ({
      path: "/audio/speech",
      body: JSON.stringify({ ...body, model: upstreamModel }),
      headers: { ...headers, "content-type": "application/json" },
    }),
  };
}

export function openAITranscription(headers: Record<string, string>): TranscriptionAdapter {
  return {
    buildTranscriptionRequest: ({ body, upstreamModel }) => {
      const form = new FormData();
      for (const [name, value] of Object.entries(body.fields)) {
        if (Array.isArray(value)) for (const v of value) form.append(name, v);
        else form.append(name, value);
      }
      form.set("model", upstreamModel);
      form.set("file", body.file, body.file.name);
      // No content-type: fetch writes the multipart boundary itself.
      return { path: "/audio/transcriptions", body: form, headers };
    },
  };
}
