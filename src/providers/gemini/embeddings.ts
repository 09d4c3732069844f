/**
 * Gemini embeddings (`models/{model}:batchEmbedContents`, key in `x-goog-api-key`). Gemini takes
 * text only, so token-array inputs are not built here (the pool skips the backend), and its reply
 * carries no token count (the edge then counts the input itself). One batch takes at most
 * GEMINI_EMBEDDING_INPUTS_MAX inputs ("at most 100 requests can be in one batch"): a larger
 * request is not built here either.
 */
import { z } from "zod";
import type { EmbeddingsAdapter, EmbeddingsReply, UpstreamFailure } from "../types.ts";
import { parseUpstreamReply } from "../replyJson.ts";

/** Gemini's limit on the requests in one batchEmbedContents call. */
export const GEMINI_EMBEDDING_INPUTS_MAX = 100;

const batchReply = z.object({ embeddings: z.array(z.object({ values: z.array(z.number()) })) });

export function geminiEmbeddings(apiKey: string | undefined): EmbeddingsAdapter {
  return {
    acceptsTokenArrays: false,
    inputsMax: GEMINI_EMBEDDING_INPUTS_MAX,
    buildEmbeddingsRequest: ({ body, upstreamModel }) => {
      if (body.input.length > GEMINI_EMBEDDING_INPUTS_MAX || !body.input.every((item) => typeof item === "string")) return undefined;
      const model = `models/${upstreamModel}`;
      const requests = (body.input as string[]).map((text) => ({
        model,
        content: { parts: [{ text }] },
        ...(body.dimensions !== undefined ? { outputDimensionality: body.dimensions } : {}),
      }));
      const headers: Record<string, string> = { "content-type": "application/json" };
      if (apiKey) headers["x-goog-api-key"] = apiKey;
      return { path: `/models/${encodeURIComponent(upstreamModel)}:batchEmbedContents`, body: JSON.stringify({ requests }), headers };
    },
    parseEmbeddingsResponse: geminiEmbeddingsToReply,
  };
}

export function geminiEmbeddingsToReply(text: string): EmbeddingsReply | UpstreamFailure {
  const parsed = parseUpstreamReply(text, batchReply, "a Gemini embeddings batch");
  if ("failure" in parsed) return parsed.failure;
  return { vectors: parsed.reply.embeddings.map((e) => e.values), inputTokens: null };
}
