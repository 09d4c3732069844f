/** The body of POST /v1/embeddings (OpenAI's CreateEmbeddingRequest), with named bounds. */
import { z } from "zod";

/** Inputs in one request, as OpenAI allows. */
export const EMBEDDING_INPUTS_MAX = 2_048;
/** Tokens across all inputs of one request, as OpenAI allows. */
export const EMBEDDING_TOKENS_TOTAL_MAX = 300_000;
/** Largest output dimension asked for (text-embedding-3-large has 3,072). */
export const EMBEDDING_DIMENSIONS_MAX = 4_096;
/** A token id is a non-negative integer below any vocabulary we serve. */
const TOKEN_ID_MAX = 1_000_000;

const tokenId = z.number().int().min(0).max(TOKEN_ID_MAX);
const text = z.string().min(1, "must not be empty");

export const embeddingsRequest = z.object({
  model: z.string().min(1).max(256),
  input: z.union([
    text,
    z.array(text).min(1).max(EMBEDDING_INPUTS_MAX),
    z.array(tokenId).min(1).max(EMBEDDING_TOKENS_TOTAL_MAX),
    z.array(z.array(tokenId).min(1)).min(1).max(EMBEDDING_INPUTS_MAX),
  ]),
  encoding_format: z.enum(["float", "base64"]).default("float"),
  dimensions: z.number().int().min(1).max(EMBEDDING_DIMENSIONS_MAX).optional(),
  user: z.string().max(256).optional(),
});

export type EmbeddingsRequest = z.infer<typeof embeddingsRequest>;

/** `input` as a list: one string or token array per vector. */
export function embeddingInputs(input: EmbeddingsRequest["input"]): string[] | number[][] {
  if (typeof input === "string") return [input];
  if (input.length > 0 && typeof input[0] === "number") return [input as number[]];
  return input as string[] | number[][];
}
