/** The adapter for each backend kind. */
import type { BackendConfig } from "../config.ts";
import { anthropicAdapter } from "./anthropic/index.ts";
import { geminiAdapter } from "./gemini/index.ts";
import { openAIAdapter } from "./openai/index.ts";
import type { ProviderAdapter } from "./types.ts";

export function adapterFor(backend: BackendConfig): ProviderAdapter {
  switch (backend.kind) {
    case "openai":
      return openAIAdapter(backend.api_key, { responsesApi: backend.responses_api });
    case "anthropic":
      return anthropicAdapter(backend.api_key);
    case "gemini":
      return geminiAdapter(backend.api_key);
  }
}
