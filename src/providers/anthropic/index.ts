/** The Anthropic Messages adapter: chat only, translated to and from the OpenAI format. */
import { choicesOf } from "../choices.ts";
import type { ChatAdapter, ProviderAdapter } from "../types.ts";
import { anthropicErrorToFailure } from "./errors.ts";
import { anthropicCount, openAIToAnthropicRequest } from "./request.ts";
import { anthropicToOpenAIResponse } from "./response.ts";
import { AnthropicStreamDecoder } from "./stream.ts";

export function anthropicAdapter(apiKey: string | undefined): ProviderAdapter {
  const chat: ChatAdapter = {
    // One choice per call: `n > 1` goes to a backend that returns n (see choices.ts).
    choicesMax: 1,
    buildChatRequest: (input) => (choicesOf(input.body) > 1 ? undefined : openAIToAnthropicRequest(input, apiKey)),
    parseChatResponse: anthropicToOpenAIResponse,
    createChatStreamDecoder: (context) => new AnthropicStreamDecoder(context),
    count: anthropicCount(apiKey),
  };
  return { kind: "anthropic", errorToFailure: anthropicErrorToFailure, chat };
}
