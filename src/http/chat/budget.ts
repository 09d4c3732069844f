/**
 * The admission arithmetic for a chat request: how many tokens it may produce and the most it
 * can cost. Reserve = prompt upper bound × input price + output budget × n × output price, so the
 * hold covers the worst case and the upstream, told the same budget, cannot exceed it.
 *
 * A stream without `max_tokens` is metered live instead: the upstream is told a bounded cap
 * (METERED_OUTPUT_TOKENS_MAX or the context's remainder), the reserve covers only a first step
 * (METER_FIRST_STEP_TOKENS), and the relay extends the hold in steps before it runs out.
 */
import type { CatalogModel } from "../../catalog/catalog.ts";
import { fail, type Failure } from "../../errors.ts";
import { countPromptTokens, measurePromptTokens, promptTokensUpperBound } from "../../tokens/count.ts";
import type { ChatRequest } from "./schema.ts";

/** Output budget of a whole (non-streamed) reply when the client names none. */
export const OUTPUT_TOKENS_DEFAULT = 4_096;
/** The upstream's max_tokens for a stream without one (lower when the context has less room). */
export const METERED_OUTPUT_TOKENS_MAX = 16_384;
/** Output tokens the first reserve of a metered stream covers, per choice. */
export const METER_FIRST_STEP_TOKENS = 64;

export interface ChatBudget {
  promptTokensBound: number;
  /** Sent to the upstream as its max_tokens, per choice. */
  outputTokensMax: number;
  /** Output tokens per choice the admission reserve covers: outputTokensMax unless metered. */
  reservedOutputTokens: number;
  /** A stream whose reserve the relay extends as tokens arrive. */
  metered: boolean;
  choices: number;
  reserveMicro: bigint;
  inputPricePer1m: bigint;
  outputPricePer1m: bigint;
  priceVersionId: number;
}

/**
 * The reserve with the prompt counted exactly, for a request the cheap bound priced out of the
 * wallet. Tools are still bounded by their bytes.
 */
export async function exactChatReserve(body: ChatRequest, budget: ChatBudget): Promise<{ reserveMicro: bigint; promptTokens: number }> {
  const toolsBytes = body.tools ? Buffer.byteLength(JSON.stringify(body.tools), "utf8") : 0;
  const promptTokens = Math.min(budget.promptTokensBound, (await countPromptTokens(body.messages)) + toolsBytes);
  return {
    promptTokens,
    reserveMicro: BigInt(promptTokens) * budget.inputPricePer1m + BigInt(budget.reservedOutputTokens * budget.choices) * budget.outputPricePer1m,
  };
}

/**
 * The budget of a chat request, or a 400 when the prompt is proven too long for the window.
 * The cheap byte bound decides most requests; when it would not fit, the prompt is counted
 * (measurePromptTokens: capped work per request and per key, taking turns by `fairnessKey`) and
 * refused only when its proven lower bound does not fit. A prompt that can be neither proven to
 * fit nor proven too long is admitted with room measured from its lower bound: the upstream,
 * which counts exactly, has the last word, and the reserve still covers the byte bound.
 */
export async function chatBudget(body: ChatRequest, model: CatalogModel, options: { fairnessKey: string }): Promise<ChatBudget | Failure> {
  const inputPrice = model.price.tomanPer1m.get("input_token");
  const outputPrice = model.price.tomanPer1m.get("output_token");
  if (inputPrice === undefined || outputPrice === undefined) {
    return fail("model_forbidden", `${model.id} has no chat price and cannot be used for chat completions.`, { param: "model" });
  }
  const promptTokensBound = promptTokensUpperBound(body);
  const requested = body.max_completion_tokens ?? body.max_tokens ?? null;
  const fits = (prompt: number) => prompt + (requested ?? 1) <= model.contextWindow;
  // The byte bound can be ~4× the real count; measure before refusing for the window.
  let promptForWindow = promptTokensBound;
  if (!fits(promptForWindow)) {
    const toolsBytes = body.tools ? Buffer.byteLength(JSON.stringify(body.tools), "utf8") : 0;
    const lowerEnough = model.contextWindow - (requested ?? 1); // more than this is too long
    const measured = await measurePromptTokens(body.messages, { purpose: "admission", fairnessKey: options.fairnessKey, lowerEnough });
    if (!fits(measured.lower)) {
      const exact = measured.lower === measured.upper;
      return fail(
        "context_length_exceeded",
        `This model's maximum context length is ${model.contextWindow} tokens. However, you requested ` +
          `${exact ? "" : "at least "}${measured.lower + (requested ?? 1)} tokens (${exact ? "" : "at least "}${measured.lower} in the messages, ` +
          `${requested ?? 1} in the completion). Please reduce the length of the messages or completion.`,
        { param: "messages" },
      );
    }
    promptForWindow = fits(measured.upper + toolsBytes) ? measured.upper + toolsBytes : measured.lower;
  }
  const room = model.contextWindow - promptForWindow;
  const metered = requested === null && body.stream === true;
  const outputTokensMax = requested ?? Math.min(metered ? METERED_OUTPUT_TOKENS_MAX : OUTPUT_TOKENS_DEFAULT, room);
  const reservedOutputTokens = metered ? Math.min(METER_FIRST_STEP_TOKENS, outputTokensMax) : outputTokensMax;
  const choices = body.n ?? 1;
  return {
    promptTokensBound,
    outputTokensMax,
    reservedOutputTokens,
    metered,
    choices,
    reserveMicro: BigInt(promptTokensBound) * inputPrice + BigInt(reservedOutputTokens * choices) * outputPrice,
    inputPricePer1m: inputPrice,
    outputPricePer1m: outputPrice,
    priceVersionId: model.price.versionId,
  };
}
