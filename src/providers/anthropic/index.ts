/** The Anthropic Messages adapter: chat only, translated to and from the OpenAI format. */
import type { ChatAdapter, ProviderAdapter } from "../types.ts";
import { anthropicErrorToFailure } from "./errors.ts";
import { openAIToAnthropicRequest } from "./request.ts";
import { anthropicToOpenAIResponse } from "./response.ts";
import { AnthropicStreamDecoder } from "./stream.ts";

export function anthropicAdapter(apiKey: string | undefined): ProviderAdapter {
  const chat: ChatAdapter = {
    buildChatRequest: (input) => openAIToAnthropicRequest(input, apiKey),
    parseChatResponse: anthropicToOpenAIResponse,
    createChatStreamDecoder: (context) => new AnthropicStreamDecoder(context),
  };
  return { kind: "anthropic", errorToFailure: anthropicErrorToFailure, chat };
}
