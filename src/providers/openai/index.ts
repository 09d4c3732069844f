/** The OpenAI-style adapter: OpenAI itself and vLLM/SGLang/TGI hosts. */
import type { ChatAdapter, ProviderAdapter } from "../types.ts";
import { openAISpeech, openAITranscription } from "./audio.ts";
import { openAIEmbeddings } from "./embeddings.ts";
import { openAIErrorToFailure } from "./errors.ts";
import { openAIImages } from "./images.ts";
import { chatToOpenAIRequest } from "./request.ts";
import { parseOpenAIChatResponse } from "./response.ts";
import { OpenAIStreamDecoder } from "./stream.ts";

export function openAIAdapter(apiKey: string | undefined): ProviderAdapter {
  const chat: ChatAdapter = {
    buildChatRequest: (input) => chatToOpenAIRequest(input, apiKey),
    parseChatResponse: parseOpenAIChatResponse,
    createChatStreamDecoder: () => new OpenAIStreamDecoder(),
  };
  const auth: Record<string, string> = apiKey ? { authorization: `Bearer ${apiKey}` } : {};
  return {
    kind: "openai",
    errorToFailure: openAIErrorToFailure,
    chat,
    embeddings: openAIEmbeddings(auth),
    images: openAIImages(auth),
    speech: openAISpeech(auth),
    transcription: openAITranscription(auth),
  };
}
