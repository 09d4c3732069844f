/** The adapter for each backend kind. */
import type { BackendConfig } from "../config.ts";
import { geminiEmbeddings, geminiErrorToFailure } from "./gemini/embeddings.ts";
import { openAIAdapter } from "./openai/index.ts";
import type { ProviderAdapter } from "./types.ts";

export function adapterFor(backend: BackendConfig): ProviderAdapter {
  switch (backend.kind) {
    case "openai":
      return openAIAdapter(backend.api_key);
    case "gemini":
      // Embeddings only here; the Gemini chat adapter joins this object.
      return { kind: "gemini", errorToFailure: geminiErrorToFailure, embeddings: geminiEmbeddings(backend.api_key) };
  }
}
