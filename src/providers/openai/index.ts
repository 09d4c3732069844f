/** The OpenAI-style adapter: OpenAI itself and vLLM/SGLang/TGI hosts. */
import type { ChatAdapter, ProviderAdapter } from "../types.ts";
import { openAIErrorToFailure } from "./errors.ts";
import { chatToOpenAIRequest } from "./request.ts";
import { parseOpenAIChatResponse } from "./response.ts";
import { OpenAIStreamDecoder } from "./stream.ts";

export function openAIAdapter(apiKey: string | undefined): ProviderAdapter {
  const chat: ChatAdapter = {
    buildChatRequest: (input) => chatToOpenAIRequest(input, apiKey),
    parseChatResponse: parseOpenAIChatResponse,
    createChatStreamDecoder: () => new OpenAIStreamDecoder(),
  };
  return { kind: "openai", errorToFailure: openAIErrorToFailure, chat };
}
