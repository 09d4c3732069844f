/** The OpenAI-style adapter: OpenAI itself and vLLM/SGLang/TGI hosts. */
import type { ChatAdapter, ProviderAdapter } from "../types.ts";
import { openAISpeech, openAITranscription } from "./audio.ts";
import { openAIEmbeddings } from "./embeddings.ts";
import { openAIErrorToFailure } from "./errors.ts";
import { openAIImages } from "./images.ts";
import { chatToOpenAIRequest } from "./request.ts";
import { parseOpenAIChatResponse } from "./response.ts";
import { chatToResponsesRequest } from "./responses/request.ts";
import { responsesToOpenAIResponse } from "./responses/response.ts";
import { ResponsesStreamDecoder } from "./responses/stream.ts";
import { OpenAIStreamDecoder } from "./stream.ts";

/** A backend that speaks the Responses API (`responses_api: true`): chat goes to it as /responses. */
function responsesChat(apiKey: string | undefined): ChatAdapter {
  return {
    buildChatRequest: (input) => chatToResponsesRequest(input, apiKey),
    parseChatResponse: responsesToOpenAIResponse,
    createChatStreamDecoder: (context) => new ResponsesStreamDecoder(context),
  };
}

export function openAIAdapter(apiKey: string | undefined, options: { responsesApi?: boolean } = {}): ProviderAdapter {
  const chat: ChatAdapter = options.responsesApi
    ? responsesChat(apiKey)
    : {
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
