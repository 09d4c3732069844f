/** OpenAI-style embeddings: the request asks for base64 (a quarter of the JSON), the reply is decoded here. */
import { z } from "zod";
import type { EmbeddingsAdapter, EmbeddingsReply, UpstreamFailure } from "../types.ts";
import { parseUpstreamReply } from "../replyJson.ts";

const embeddingsReply = z.object({
  data: z.array(z.object({ index: z.number().int().nonnegative(), embedding: z.union([z.array(z.number()), z.string()]) })),
  usage: z.object({ prompt_tokens: z.number().int().nonnegative() }).nullish(),
});

/** Little-endian float32 bytes in base64 (the wire form of `encoding_format: "base64"`) as numbers. */
export function base64ToFloats(b64: string): number[] {
  const bytes = Buffer.from(b64, "base64");
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Array<number>(bytes.byteLength >> 2);
  for (let i = 0; i < out.length; i++) out[i] = view.getFloat32(i * 4, true);
  return out;
}

/** Numbers as little-endian float32 bytes in base64, as the OpenAI SDKs decode them. */
export function floatsToBase64(vector: readonly number[]): string {
  const bytes = Buffer.alloc(vector.length * 4);
  for (let i = 0; i < vector.length; i++) bytes.writeFloatLE(vector[i]!, i * 4);
  return bytes.toString("base64");
}

export function openAIEmbeddings(headers: Record<string, string>): EmbeddingsAdapter {
  return {
    acceptsTokenArrays: true,
    buildEmbeddingsRequest: ({ body, upstreamModel }) => ({
      path: "/embeddings",
      body: JSON.stringify({ ...body, model: upstreamModel, encoding_format: "base64" }),
      headers: { ...headers, "content-type": "application/json" },
    }),
    parseEmbeddingsResponse: parseOpenAIEmbeddings,
  };
}

export function parseOpenAIEmbeddings(text: string): EmbeddingsReply | UpstreamFailure {
  const parsed = parseUpstreamReply(text, embeddingsReply, "an embeddings list");
  if ("failure" in parsed) return parsed.failure;
  const sorted = [...parsed.reply.data].sort((a, b) => a.index - b.index);
  return {
    vectors: sorted.map((d) => (typeof d.embedding === "string" ? base64ToFloats(d.embedding) : d.embedding)),
    inputTokens: parsed.reply.usage?.prompt_tokens ?? null,
  };
}
