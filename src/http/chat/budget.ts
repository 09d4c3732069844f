/**
 * The admission arithmetic for a chat request: how many tokens it may produce and the most it
 * can cost. Reserve = prompt upper bound × input price + output budget × n × output price, so the
 * hold covers the worst case and the upstream, told the same budget, cannot exceed it.
 */
import type { CatalogModel } from "../../catalog/catalog.ts";
import { fail, type Failure } from "../../errors.ts";
import { countPromptTokens, promptTokensUpperBound } from "../../tokens/count.ts";
import type { ChatRequest } from "./schema.ts";

/** Output budget when the client names none (live metering will extend it in a later version). */
export const OUTPUT_TOKENS_DEFAULT = 4_096;

export interface ChatBudget {
  promptTokensBound: number;
  outputTokensMax: number;
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
    reserveMicro: BigInt(promptTokens) * budget.inputPricePer1m + BigInt(budget.outputTokensMax * budget.choices) * budget.outputPricePer1m,
  };
}

export async function chatBudget(body: ChatRequest, model: CatalogModel): Promise<ChatBudget | Failure> {
  const inputPrice = model.price.tomanPer1m.get("input_token");
  const outputPrice = model.price.tomanPer1m.get("output_token");
  if (inputPrice === undefined || outputPrice === undefined) {
    return fail("model_forbidden", `${model.id} has no chat price and cannot be used for chat completions.`, { param: "model" });
  }
  const promptTokensBound = promptTokensUpperBound(body);
  // The byte bound can be ~4× the real count; measure exactly before refusing for the window.
  let promptForWindow = promptTokensBound;
  const requested = body.max_completion_tokens ?? body.max_tokens ?? null;
  if (promptForWindow + (requested ?? 1) > model.contextWindow) {
    const toolsBytes = body.tools ? Buffer.byteLength(JSON.stringify(body.tools), "utf8") : 0;
    promptForWindow = (await countPromptTokens(body.messages)) + toolsBytes;
  }
  const room = model.contextWindow - promptForWindow;
  if (room < 1 || (requested !== null && requested > room)) {
    return fail(
      "context_length_exceeded",
      `This model's maximum context length is ${model.contextWindow} tokens. However, you requested ` +
        `${promptForWindow + (requested ?? 1)} tokens (${promptForWindow} in the messages, ${requested ?? 1} in the completion). ` +
        `Please reduce the length of the messages or completion.`,
      { param: "messages" },
    );
  }
  const outputTokensMax = requested ?? Math.min(OUTPUT_TOKENS_DEFAULT, room);
  const choices = body.n ?? 1;
  return {
    promptTokensBound,
    outputTokensMax,
    choices,
    reserveMicro: BigInt(promptTokensBound) * inputPrice + BigInt(outputTokensMax * choices) * outputPrice,
    inputPricePer1m: inputPrice,
    outputPricePer1m: outputPrice,
    priceVersionId: model.price.versionId,
  };
}
