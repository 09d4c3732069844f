/**
 * POST /v1/embeddings: deterministic unit vectors. A vector depends only on the model, the input
 * (text, or token ids joined by commas) and the dimensions, so a test can compute the vector it
 * expects with `simEmbedding`. Values are float32, so float and base64 replies carry the same
 * numbers. Usage counts tokens by the simulator's own rule (or the token ids given).
 */
import { z } from "zod";
import type { ChatContext } from "./chat.ts";
import { simJson, simOperation } from "./ops.ts";
import { mulberry32 } from "./text.ts";
import { simCountTokens } from "./tokens.ts";

/** Dimensions when the request names none (text-embedding-3-small's). */
export const SIM_EMBEDDING_DIMENSIONS_DEFAULT = 1_536;
const DIMENSIONS_MAX = 8_192;

const request = z.looseObject({
  model: z.string().min(1),
  input: z.union([
    z.string(),
    z.array(z.string()).min(1),
    z.array(z.number().int()).min(1),
    z.array(z.array(z.number().int()).min(1)).min(1),
  ]),
  encoding_format: z.enum(["float", "base64"]).optional(),
  dimensions: z.number().int().min(1).max(DIMENSIONS_MAX).optional(),
});

function hash(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/**
 * The vector the simulator returns for one input, normalised to length 1, in float32.
 * @example simEmbedding("text-embedding-3-small", "hello", 8).length // 8
 */
export function simEmbedding(model: string, input: string | readonly number[], dimensions = SIM_EMBEDDING_DIMENSIONS_DEFAULT): number[] {
  const key = typeof input === "string" ? input : input.join(",");
  const random = mulberry32(hash(`${model}\u0000${key}`));
  const raw = Array.from({ length: dimensions }, () => random() * 2 - 1);
  const norm = Math.sqrt(raw.reduce((s, v) => s + v * v, 0)) || 1;
  return raw.map((v) => Math.fround(v / norm));
}

export function handleEmbeddings(context: ChatContext, req: Request): Promise<Response> {
  return simOperation(context, req, "embeddings", async () => {
    const body = await simJson(req, request);
    if (body instanceof Response) return { response: body, model: "", units: 0 };
    const inputs: (string | number[])[] =
      typeof body.input === "string"
        ? [body.input]
        : typeof body.input[0] === "number"
          ? [body.input as number[]]
          : (body.input as (string | number[])[]);
    const tokens = inputs.reduce<number>((sum, item) => sum + (typeof item === "string" ? simCountTokens(item) : item.length), 0);
    const data = inputs.map((item, index) => {
      const vector = simEmbedding(body.model, item, body.dimensions);
      let embedding: number[] | string = vector;
      if (body.encoding_format === "base64") {
        const bytes = Buffer.alloc(vector.length * 4);
        for (const [i, v] of vector.entries()) bytes.writeFloatLE(v, i * 4);
        embedding = bytes.toString("base64");
      }
      return { object: "embedding", index, embedding };
    });
    const response = Response.json({ object: "list", data, model: body.model, usage: { prompt_tokens: tokens, total_tokens: tokens } });
    return { response, model: body.model, units: tokens, promptTokens: tokens };
  });
}

const geminiBatch = z.object({
  requests: z
    .array(
      z.looseObject({
        model: z.string(),
        content: z.object({ parts: z.array(z.object({ text: z.string() })).min(1) }),
        outputDimensionality: z.number().int().min(1).max(DIMENSIONS_MAX).optional(),
      }),
    )
    .min(1)
    // Gemini's own limit, so a gateway that sends more fails here as it would against Google.
    .max(100, "at most 100 requests can be in one batch"),
});

/**
 * Gemini's `POST /v1beta/models/{model}:batchEmbedContents` (key in `x-goog-api-key`): the same
 * vectors as the OpenAI route for the same text, and no token count, as Gemini sends none.
 */
export function handleGeminiEmbeddings(context: ChatContext, req: Request, action: string): Promise<Response> {
  const keyOk = (r: Request) => context.options.apiKey === null || r.headers.get("x-goog-api-key") === context.options.apiKey;
  return simOperation(
    context,
    req,
    "embeddings",
    async () => {
      const match = /^(.+):batchEmbedContents$/.exec(action);
      if (!match)
        return {
          response: Response.json({ error: { code: 404, message: "unknown method", status: "NOT_FOUND" } }, { status: 404 }),
          model: "",
          units: 0,
        };
      const model = decodeURIComponent(match[1]!);
      const body = await simJson(req, geminiBatch);
      if (body instanceof Response) return { response: body, model, units: 0 };
      const texts = body.requests.map((r) => r.content.parts.map((p) => p.text).join(""));
      const embeddings = body.requests.map((r, i) => ({ values: simEmbedding(model, texts[i]!, r.outputDimensionality) }));
      const tokens = texts.reduce((sum, text) => sum + simCountTokens(text), 0);
      return { response: Response.json({ embeddings }), model, units: tokens, promptTokens: tokens };
    },
    keyOk,
  );
}
