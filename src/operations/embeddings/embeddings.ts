/**
 * Embeddings (POST /v1/embeddings, gw.v1.embeddings), billed per input token.
 *
 *   edge:  key → body → model → cheap bound (UTF-8 bytes of each string, the length of each
 *          token array) → reserve over the bus (exact js-tiktoken count when the bound does not
 *          fit the wallet) → pool (the vendor's adapter asks for base64 floats) → settle at the
 *          upstream's reported tokens (our own count when it reports none).
 *   reply: OpenAI's list shape, vectors as float arrays or base64 little-endian float32 as asked.
 */
import type { Caller } from "../../admission/caller.ts";
import type { PricedModel } from "../../admission/model.ts";
import type { Reserve } from "../../admission/reserve.ts";
import { presentedJson } from "../../admission/costReply.ts";
import { fail, type Failure, isFailure } from "../../errors.ts";
import { floatsToBase64 } from "../../providers/openai/embeddings.ts";
import type { EmbeddingsAdapter } from "../../providers/types.ts";
import { type CountOptions, measureTokensMany } from "../../tokens/count.ts";
import { type OperationInput, readJson } from "../input.ts";
import { type WholeResult, type Prepared, run, sendWhole, type Unprepared, type PaidDeps } from "../run.ts";
import { EMBEDDING_TOKENS_TOTAL_MAX, type EmbeddingsRequest, embeddingInputs, embeddingsRequest } from "./schema.ts";

/** The largest upstream reply read: 2,048 vectors of 4,096 base64 float32s, with room. */
export const EMBEDDINGS_REPLY_BYTES_MAX = 64 * 1024 * 1024;

/** Each input's tokens: exact for billing; for admission capped per request and per key, so an upper bound. */
async function exactTokens(inputs: string[] | number[][], options: CountOptions = { purpose: "billing" }): Promise<number[]> {
  if (inputs.length > 0 && typeof inputs[0] !== "string") return (inputs as number[][]).map((t) => t.length);
  return (await measureTokensMany(inputs as string[], options)).map((count) => count.upper);
}

function tokensBound(inputs: string[] | number[][]): number[] {
  return inputs.map((item) => (typeof item === "string" ? Buffer.byteLength(item, "utf8") : item.length));
}

/**
 * Per-input and per-request token limits. The byte bound decides when it fits; otherwise the
 * inputs are counted (capped work, taking turns by `fairnessKey`) and refused only when their
 * proven lower bounds do not fit.
 */
async function checkWindow(inputs: string[] | number[][], window: number, options: { fairnessKey: string }): Promise<Failure | null> {
  let lower = tokensBound(inputs);
  const over = (c: number[]) => c.some((n) => n > window) || c.reduce((a, b) => a + b, 0) > EMBEDDING_TOKENS_TOTAL_MAX;
  if (!over(lower)) return null;
  let exact = true;
  if (typeof inputs[0] === "string") {
    const measured = await measureTokensMany(inputs as string[], { purpose: "admission", fairnessKey: options.fairnessKey });
    lower = measured.map((c) => c.lower);
    exact = measured.every((c) => c.lower === c.upper);
  }
  const atLeast = exact ? "" : "at least ";
  const longest = lower.findIndex((n) => n > window);
  if (longest !== -1) {
    return fail(
      "context_length_exceeded",
      `This model's maximum context length is ${window} tokens, but input ${longest} has ${atLeast}${lower[longest]} tokens.`,
      { param: "input" },
    );
  }
  const total = lower.reduce((a, b) => a + b, 0);
  if (total > EMBEDDING_TOKENS_TOTAL_MAX) {
    return fail(
      "invalid_request",
      `The inputs have ${atLeast}${total} tokens; at most ${EMBEDDING_TOKENS_TOTAL_MAX} are allowed per request.`,
      { param: "input" },
    );
  }
  return null;
}

/**
 * A 400 naming `input` when no backend of the pool can take these inputs in one call: token
 * arrays where every backend takes text only, or more inputs than every backend's batch holds.
 */
export function inputsRefusal(adapters: (EmbeddingsAdapter | undefined)[], inputs: string[] | number[][], model: string): Failure | null {
  const present = adapters.filter((a): a is EmbeddingsAdapter => a !== undefined);
  if (typeof inputs[0] !== "string" && !present.some((a) => a.acceptsTokenArrays)) {
    return fail("invalid_request", `${model} takes text only: send \`input\` as a string or an array of strings.`, { param: "input" });
  }
  const inputsMax = Math.max(0, ...present.map((a) => a.inputsMax ?? Number.POSITIVE_INFINITY));
  if (present.length > 0 && inputs.length > inputsMax) {
    return fail(
      "invalid_request",
      `${model} takes at most ${inputsMax} inputs per request; this one has ${inputs.length}. Split it into smaller requests.`,
      { param: "input" },
    );
  }
  return null;
}

interface EmbeddingsPrepared extends Prepared {
  body: EmbeddingsRequest;
  inputs: string[] | number[][];
}

/** What a reply of embeddings is presented from: a vector per input, and the input tokens billed. */
export interface EmbeddingsReply {
  vectors: number[][];
  tokens: number;
}

/**
 * The embeddings operation: vectors for the inputs, billed per input token. `present` is a
 * translated wire's reply (Gemini's), made before the request is settled; OpenAI's list by default.
 */
export function createEmbeddings(
  input: OperationInput,
  deps: PaidDeps,
  present?: (reply: EmbeddingsReply) => unknown,
): Promise<WholeResult> {
  return run(deps, input, {
    operation: "embeddings",
    read: (input) => readJson(input, deps.env, embeddingsRequest),
    priced: (body) => ({ model: body.model, unit: "input_token" }),
    prepare: prepareEmbeddings,
    call: async (admitted) => {
      const { model, body, inputs } = admitted.prepared;
      const read = await sendWhole(
        admitted,
        (backend) =>
          backend.adapter.embeddings?.buildEmbeddingsRequest({
            body: { input: inputs, dimensions: body.dimensions },
            upstreamModel: backend.config.upstream_model ?? model.id,
          }),
        EMBEDDINGS_REPLY_BYTES_MAX,
      );
      if (isFailure(read)) return read;
      const reply = read.backend.adapter.embeddings!.parseEmbeddingsResponse(Buffer.from(read.bytes).toString("utf8"));
      if ("code" in reply) return reply;
      if (reply.vectors.length !== inputs.length)
        return fail("upstream_error", `The upstream returned ${reply.vectors.length} vectors for ${inputs.length} inputs.`);
      return reply;
    },
    deliver: async (reply, admitted) => {
      const tokens = reply.inputTokens ?? (await exactTokens(admitted.prepared.inputs)).reduce((a, b) => a + b, 0);
      const embeddings = { vectors: reply.vectors, tokens };
      return {
        used: { input: tokens },
        present: () => (present ? present(embeddings) : openAIList(embeddings, admitted.prepared)),
        reply: (settled, shown) => ({ contentType: "application/json", body: presentedJson(shown, settled) }),
      };
    },
  });
}

/** OpenAI's list of embeddings, vectors as float arrays or base64 as asked. */
function openAIList({ vectors, tokens }: EmbeddingsReply, prepared: EmbeddingsPrepared): Record<string, unknown> {
  const data = vectors.map((vector, index) => ({
    object: "embedding" as const,
    index,
    embedding: prepared.body.encoding_format === "base64" ? floatsToBase64(vector) : vector,
  }));
  return { object: "list", data, model: prepared.model.id, usage: { prompt_tokens: tokens, total_tokens: tokens } };
}

/** The inputs within the model's window and a backend's batch, and their reserve: the cheap bound, counted exactly at the wallet's edge. */
async function prepareEmbeddings(body: EmbeddingsRequest, priced: PricedModel, caller: Caller): Promise<EmbeddingsPrepared | Unprepared> {
  const { model, pricePer1m, pool } = priced;
  const inputs = embeddingInputs(body.input);
  const windowFailure =
    (await checkWindow(inputs, model.contextWindow, { fairnessKey: caller.key.id })) ??
    inputsRefusal(
      pool.backends.map((b) => b.adapter.embeddings),
      inputs,
      model.id,
    );
  if (windowFailure) return { failure: windowFailure, model };
  const bound = tokensBound(inputs).reduce((a, b) => a + b, 0);
  const reserve: Reserve = {
    input: { unit: "input_token", units: bound, pricePer1m },
    tokens: bound,
    exact: typeof inputs[0] !== "string",
    exactInputUnits: async () =>
      (await exactTokens(inputs, { purpose: "admission", fairnessKey: caller.key.id })).reduce((a, b) => a + b, 0),
  };
  return { ...priced, body, inputs, reserve };
}
