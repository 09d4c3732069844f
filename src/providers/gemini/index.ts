/** The Gemini adapter: chat (generateContent, translated to and from the OpenAI format) and embeddings. */
import { choicesOf } from "../choices.ts";
import type { ChatAdapter, ProviderAdapter } from "../types.ts";
import { geminiEmbeddings } from "./embeddings.ts";
import { geminiErrorToFailure } from "./errors.ts";
import { geminiCount, openAIToGeminiRequest } from "./request.ts";
import { geminiToOpenAIResponse } from "./response.ts";
import { GeminiStreamDecoder } from "./stream.ts";

export function geminiAdapter(apiKey: string | undefined): ProviderAdapter {
  const chat: ChatAdapter = {
    // One choice per call: `n > 1` goes to a backend that returns n (see choices.ts).
    choicesMax: 1,
    buildChatRequest: (input) => (choicesOf(input.body) > 1 ? undefined : openAIToGeminiRequest(input, apiKey)),
    parseChatResponse: geminiToOpenAIResponse,
    createChatStreamDecoder: (context) => new GeminiStreamDecoder(context),
    count: geminiCount(apiKey),
  };
  return { kind: "gemini", errorToFailure: geminiErrorToFailure, chat, embeddings: geminiEmbeddings(apiKey) };
}
