/**
 * The admission arithmetic for a chat request: how many tokens it may produce and the most it
 * can cost. Reserve = prompt upper bound × input price + (output limit × n + prediction) × output
 * price, so the hold covers the worst case and the upstream, told the same limit, cannot exceed
 * it: nothing is generated without money held, hidden reasoning included.
 *
 * In full, with the reasoning: docs/internals.md#a-chat-requests-budget.
 */
import { type CatalogModel, contextWindowOf, longContextTier, type PriceTierList } from "../../catalog/catalog.ts";
import type { PromptTier, ServedTierPrices } from "../../admission/reserve.ts";
import type { PaidFields } from "../../config.ts";
import { fail, isFailure, type Failure } from "../../errors.ts";
import {
  CHAT_CONTROL_FIELDS,
  type CountOptions,
  measureTokensMany,
  EXACT_MESSAGE_TOKENS,
  EXACT_REPLY_TOKENS,
  IMAGE_ALLOWANCE_TOKENS,
  messageAllowanceTokens,
  promptTokensUpperBound,
  utf8Bytes,
} from "../../tokens/count.ts";
import { betasVerdict, STANDARD_WINDOW_TOKENS } from "./betas.ts";
import { asksPricedServiceTier, paidFieldPercents, priceWithPercents } from "./paidFields.ts";
import type { ChatRequest } from "./schema.ts";

/** Output budget of a whole (non-streamed) reply when the client names none. */
export const OUTPUT_TOKENS_DEFAULT = 4_096;
/** The upstream's max_tokens for a stream without one (lower when the context has less room). */
export const STREAM_OUTPUT_TOKENS_DEFAULT = 16_384;
/**
 * The least output limit per choice a request is lowered to when its wallet cannot cover the
 * limit it asked for (or its default); a wallet that cannot cover this much is refused with 402.
 */
export const OUTPUT_TOKENS_LOWERED_MIN = 4_096;
/**
 * The least output limit a request is lowered to when its prompt leaves the window less room
 * than it asked for, on a wire that lowers rather than refuses (`ChatBudgetOptions.lowerToWindow`);
 * a prompt that leaves less than this is refused with 400 context_length_exceeded.
 */
export const OUTPUT_TOKENS_WINDOW_MIN = 4_096;

/**
 * What an image URL that shows no image type may cost on `model`. Gemini fetches a `fileData` URL
 * itself and reads what it finds: a video at 258 tokens a frame (1 fps) + 32 a second of audio,
 * a PDF at 258 tokens a page up to 1,000 pages
 * (https://ai.google.dev/gemini-api/docs/video-understanding,
 * https://ai.google.dev/gemini-api/docs/document-processing): bounded only by the context
 * window. Other vendors read an image URL as an image or refuse it (IMAGE_ALLOWANCE_TOKENS).
 */
function mediaUrlTokens(model: CatalogModel): number {
  return model.vendor === "google" ? model.contextWindow : IMAGE_ALLOWANCE_TOKENS;
}

export interface ChatBudget {
  promptTokensBound: number;
  /** The output limit per choice the hold covers, sent upstream unless admission lowers it. */
  outputTokensMax: number;
  choices: number;
  /** Bytes of `prediction`, reserved at the output price on top of the output budget. */
  predictionTokensBound: number;
  reserveMicro: bigint;
  inputPricePer1m: bigint;
  outputPricePer1m: bigint;
  /** The model's prices of every unit (cache reads and writes too) times the paid fields' percents; the list prices when none. */
  unitPricesPer1m: ReadonlyMap<string, bigint>;
  /** Set when the prices are the long-context tier's: a prompt that turns out not above the threshold is charged the standard ones. */
  promptTier?: PromptTier;
  /**
   * A request that asks a priced `service_tier`: its prices without that tier's percent, charged
   * when the upstream reports serving it at the default tier (Admission.servedAtDefaultTier).
   */
  atDefaultServiceTier?: ServedTierPrices;
  priceVersionId: number;
}

/** How a wire words a limit above the model's output_max: the field it names and its vendor's message. */
export type OutputLimitWording = (asked: number, max: number, modelId: string) => { param: string; message: string };

/**
 * OpenAI's words for a limit above the model's (its 400 `invalid_value`), naming `param`.
 * @example openAiOutputLimit("max_tokens")(100_000, 16_384, "gpt-4o-mini").message
 *   // "max_tokens is too large: 100000. This model supports at most 16384 completion tokens, whereas you provided 100000."
 */
export function openAiOutputLimit(param: string): OutputLimitWording {
  return (asked, max) => ({
    param,
    message: `${param} is too large: ${asked}. This model supports at most ${max} completion tokens, whereas you provided ${asked}.`,
  });
}

/** The refusal of an output limit the model does not take, or null when it takes it. */
function outputLimitRefusal(
  body: ChatRequest,
  model: CatalogModel,
  requested: number | null,
  wording?: OutputLimitWording,
): Failure | null {
  // A model built without the field (an older row, a test's) takes any limit, as one with null does.
  if (requested === null || !model.outputMax || requested <= model.outputMax) return null;
  const words = (wording ?? openAiOutputLimit(body.max_completion_tokens != null ? "max_completion_tokens" : "max_tokens"))(
    requested,
    model.outputMax,
    model.id,
  );
  return fail("invalid_value", words.message, { param: words.param });
}

/** Prices by unit times the paid fields' percents (the same map when there are none). */
function withPercents(prices: ReadonlyMap<string, bigint>, percents: readonly number[]): ReadonlyMap<string, bigint> {
  return percents.length === 0 ? prices : new Map([...prices].map(([unit, price]) => [unit, priceWithPercents(price, percents)]));
}

/**
 * The request's prices: the long-context tier's when the prompt's upper bound is above its
 * threshold (the reserve then holds for whichever side the prompt lands on; the charge takes the
 * standard prices, `promptTier.belowPricesPer1m`, for a prompt that is not above it), else the
 * standard ones; a unit the tier does not reprice (a hosted-tool call) keeps its price.
 */
function requestPrices(
  model: CatalogModel,
  percents: readonly number[],
  tier: PriceTierList | null,
  promptTokensBound: number,
): { unitPrices: ReadonlyMap<string, bigint>; promptTier?: PromptTier } {
  const standard = withPercents(model.price.tomanPer1m, percents);
  if (!tier || promptTokensBound <= tier.aboveInputTokens) return { unitPrices: standard };
  const tiered = withPercents(new Map([...model.price.tomanPer1m, ...tier.tomanPer1m]), percents);
  return { unitPrices: tiered, promptTier: { aboveInputTokens: tier.aboveInputTokens, belowPricesPer1m: standard } };
}

/** What chatBudget needs beside the body and the model. */
export interface ChatBudgetOptions {
  /** Whose counting this is (the key's id): tokenizer work before admission takes turns by it (count.ts). */
  fairnessKey: string;
  /** UTF-8 bytes of the body as received, asked only for a body that is not plain (count.ts); without it the body is serialized to measure it. */
  bodyBytes?: () => number;
  /** The pool's enabled paid fields (paidFields.ts); none when absent. */
  paidFields?: PaidFields;
  /**
   * An output limit the window cannot hold after the prompt is lowered to the room left (not
   * below OUTPUT_TOKENS_WINDOW_MIN) instead of refused, as Anthropic's Messages API does.
   */
  lowerToWindow?: boolean;
  /** The wire's words for a limit above the model's output_max; OpenAI's, naming the field the body used, when absent. */
  outputLimitWording?: OutputLimitWording;
  /**
   * The request asks for Anthropic's context-1m (`anthropic-beta: context-1m-2025-08-07`): a
   * model that takes it has its long-context window and tier only then (catalog.ts
   * `longContextTier`, `contextWindowOf`).
   */
  context1m?: boolean;
}

const bytesOf = (value: unknown) =>
  value === undefined || value === null ? 0 : utf8Bytes(typeof value === "string" ? value : JSON.stringify(value));
const messageTextFields = new Set(["role", "content"]);
const partTextFields = new Set(["type", "text"]);

/** Σ bytes of the fields of `record` not in `free`: what is not counted exactly is bounded by its bytes. */
function fieldsBytes(record: Readonly<Record<string, unknown>>, free: ReadonlySet<string>): number {
  let bytes = 0;
  for (const field in record) if (!free.has(field)) bytes += bytesOf(record[field]);
  return bytes;
}

/** The chat fields whose named strings (names, descriptions, property names) every vendor renders into the prompt. */
const RENDERED_FIELDS = ["tools", "functions", "response_format"] as const;
const RENDERED_KEYS_MAX = 100_000;

/**
 * The strings of `value` a model reads whatever the vendor's template: `name`, `description` and
 * `title` values and the keys of `properties`, at any depth (bounded by RENDERED_KEYS_MAX visits).
 */
function renderedStrings(value: unknown, into: string[], budget = { left: RENDERED_KEYS_MAX }): void {
  if (typeof value !== "object" || value === null || --budget.left < 0) return;
  if (Array.isArray(value)) {
    for (const item of value) renderedStrings(item, into, budget);
    return;
  }
  for (const [key, field] of Object.entries(value)) {
    if (typeof field === "string" && (key === "name" || key === "description" || key === "title")) into.push(field);
    else if (key === "properties" && typeof field === "object" && field !== null && !Array.isArray(field))
      into.push(Object.keys(field).join(" "));
    renderedStrings(field, into, budget);
  }
}

/**
 * The prompt's pieces: each text (a string content or a text part), counted by o200k with
 * OpenAI's template counts; `bounded`, everything else a model reads (names, tool calls, part
 * data, tools, functions, schemas, prediction, any non-control field) by its UTF-8 bytes plus the
 * cheap bound's allowances for images, audio, files and tool results; and `rendered`, the strings
 * inside those that every vendor renders as text (a lower bound of what they add).
 */
function promptPieces(body: ChatRequest): { texts: string[]; rendered: string[]; bounded: number; template: number } {
  const texts: string[] = [];
  const rendered: string[] = [];
  let bounded = EXACT_REPLY_TOKENS + fieldsBytes(body, CHAT_CONTROL_FIELDS);
  for (const field of RENDERED_FIELDS) renderedStrings(body[field], rendered);
  for (const message of body.messages) {
    bounded += messageAllowanceTokens(message, EXACT_MESSAGE_TOKENS) + fieldsBytes(message, messageTextFields);
    if (typeof message.name === "string") rendered.push(message.name);
    for (const call of message.tool_calls ?? [])
      rendered.push(...("function" in call ? [call.function.name, call.function.arguments] : [call.custom.name, call.custom.input]));
    const content = message.content;
    if (typeof content === "string") texts.push(content);
    else if (Array.isArray(content)) {
      for (const part of content) {
        if (part.type === "text") texts.push(part.text);
        bounded += fieldsBytes(part, partTextFields);
      }
    }
  }
  return { texts, rendered, bounded, template: EXACT_REPLY_TOKENS + EXACT_MESSAGE_TOKENS * body.messages.length };
}

/**
 * The prompt counted exactly where it can be (promptPieces): an upper bound of what any vendor
 * counts, since what is not counted by o200k is bounded by its bytes.
 */
export async function exactPromptTokens(body: ChatRequest, options: CountOptions = { purpose: "billing" }): Promise<number> {
  const { texts, bounded } = promptPieces(body);
  // Admission counts are capped per request and per key (count.ts): their upper bound stays a bound.
  const counts = await measureTokensMany(texts, options);
  return counts.reduce((sum, count) => sum + count.upper, bounded);
}

/**
 * The whole prompt as bounds for the window (everything sent: messages, tools and their schemas,
 * response_format, tool calls, images, files): `lower` proves it too long (the texts and the
 * rendered strings by o200k, the template), `upper` proves it fits (exactPromptTokens' count).
 * Counting may stop once the lower bound exceeds `lowerEnough`.
 */
async function measureWholePrompt(body: ChatRequest, fairnessKey: string, lowerEnough: number): Promise<{ lower: number; upper: number }> {
  const { texts, rendered, bounded, template } = promptPieces(body);
  const counts = await measureTokensMany([...texts, ...rendered], {
    purpose: "admission",
    fairnessKey,
    lowerEnough: lowerEnough - template,
  });
  let lower = template;
  let upper = bounded;
  counts.forEach((count, i) => {
    lower += count.lower;
    if (i < texts.length) upper += count.upper;
  });
  return { lower, upper };
}

/**
 * The reserve with the prompt counted exactly, for a request the cheap bound priced out of the
 * wallet: admission work, so capped and taking turns by the key (`fairnessKey`).
 */
export async function exactChatReserve(
  body: ChatRequest,
  budget: ChatBudget,
  fairnessKey: string,
): Promise<{ reserveMicro: bigint; promptTokens: number }> {
  const promptTokens = Math.min(budget.promptTokensBound, await exactPromptTokens(body, { purpose: "admission", fairnessKey }));
  return {
    promptTokens,
    reserveMicro:
      BigInt(promptTokens) * budget.inputPricePer1m +
      BigInt(budget.outputTokensMax * budget.choices + budget.predictionTokensBound) * budget.outputPricePer1m,
  };
}

/**
 * context-1m lets a prompt pass STANDARD_WINDOW_TOKENS, above which Anthropic bills its
 * long-context rate; on a model whose long-context tier the catalog lacks, the beta is accepted only for a prompt
 * proven to fit the standard window (its cheap bound, or else its whole count's upper bound),
 * where the vendor bills the standard rate. Null when it may go on.
 */
async function longContextRefusal(body: ChatRequest, promptTokensWhole: number, fairnessKey: string): Promise<Failure | null> {
  if (promptTokensWhole <= STANDARD_WINDOW_TOKENS) return null;
  const verdict = betasVerdict(body.anthropic?.betas);
  if (!("longContext" in verdict) || !verdict.longContext) return null;
  const measured = await measureWholePrompt(body, fairnessKey, STANDARD_WINDOW_TOKENS);
  if (measured.upper <= STANDARD_WINDOW_TOKENS) return null;
  return fail(
    "invalid_request",
    `anthropic-beta \`context-1m-2025-08-07\` is accepted only for a prompt proven to fit ${STANDARD_WINDOW_TOKENS} tokens, ` +
      `where the vendor bills its standard rate; this prompt may count ${measured.upper} tokens (at least ${measured.lower}), ` +
      "and this model has no long-context price in the catalog.",
    { param: "anthropic-beta" },
  );
}

/** The 403 of a model without the input and output prices a chat request is billed at; null when it has both. */
export function chatPriceRefusal(model: Pick<CatalogModel, "id" | "price">): Failure | null {
  const prices = model.price.tomanPer1m;
  if (prices.has("input_token") && prices.has("output_token")) return null;
  return fail("model_forbidden", `${model.id} has no chat price and cannot be used for chat completions.`, { param: "model" });
}

/**
 * The budget of a chat request, or a 400 when the prompt is proven too long for the window.
 * The cheap byte bound decides most requests; when it would not fit, the prompt is counted
 * (measureWholePrompt: capped work per request and per key, taking turns by `fairnessKey`) and
 * refused only when its proven lower bound does not fit. A prompt that can be neither proven to
 * fit nor proven too long is admitted with room measured from its lower bound: the upstream,
 * which counts exactly, has the last word, and the reserve still covers the byte bound.
 */
export async function chatBudget(body: ChatRequest, model: CatalogModel, options: ChatBudgetOptions): Promise<ChatBudget | Failure> {
  const unpriced = chatPriceRefusal(model);
  if (unpriced) return unpriced;
  const percents = paidFieldPercents(body, options.paidFields);
  if (isFailure(percents)) return percents;
  const betas = betasVerdict(body.anthropic?.betas);
  const ask = { context1m: options.context1m === true || ("longContext" in betas && betas.longContext) };
  const window = contextWindowOf(model, ask);
  const promptTokensWhole = promptTokensUpperBound(body, options.bodyBytes, mediaUrlTokens(model));
  // context-1m on a model whose long-context tier the catalog has: priced by the tier; on another, refused above the standard window.
  if (ask.context1m && !model.capabilities.context_1m) {
    const longContext = await longContextRefusal(body, promptTokensWhole, options.fairnessKey);
    if (longContext) return longContext;
  }
  // A vendor refuses a prompt longer than its window: it never bills more input than that.
  const promptTokensBound = Math.min(promptTokensWhole, window);
  const longTier = longContextTier(model, ask);
  const { unitPrices, promptTier } = requestPrices(model, percents, longTier, promptTokensBound);
  const atDefaultServiceTier = asksPricedServiceTier(body)
    ? requestPrices(model, percents.slice(1), longTier, promptTokensBound)
    : undefined;
  const inputPrice = unitPrices.get("input_token")!;
  const outputPrice = unitPrices.get("output_token")!;
  // Rejected predicted tokens are billed as output, beyond max_tokens: reserve them at that price
  // (OpenAI's API reference, usage.completion_tokens_details.rejected_prediction_tokens: "still
  // counted in the total completion tokens for purposes of billing, output, and context window limits").
  const predictionTokensBound = bytesOf(body.prediction);
  const requested = body.max_completion_tokens ?? body.max_tokens ?? null;
  const outputRefused = outputLimitRefusal(body, model, requested, options.outputLimitWording);
  if (outputRefused) return outputRefused;
  const lowerable = options.lowerToWindow === true && requested !== null;
  // The output the window must leave room for: all of it asked, or on a lowering wire its floor.
  const outputLeast = lowerable ? Math.min(requested, OUTPUT_TOKENS_WINDOW_MIN) : (requested ?? 1);
  const fits = (prompt: number) => prompt + outputLeast <= window;
  // The byte bound can be ~4× the real count; measure before refusing for the window.
  let promptForWindow = promptTokensBound;
  if (promptTokensBound + (requested ?? 1) > window) {
    const lowerEnough = window - outputLeast; // more than this is too long
    const measured = await measureWholePrompt(body, options.fairnessKey, lowerEnough);
    if (!fits(measured.lower)) {
      return fail(
        "context_length_exceeded",
        `This model's maximum context length is ${window} tokens. However, you requested ` +
          `at least ${measured.lower + (requested ?? 1)} tokens (at least ${measured.lower} in the prompt: messages, tools and schemas, ` +
          `${requested ?? 1} in the completion). Please reduce the length of the messages, tools or completion.`,
        { param: "messages" },
      );
    }
    promptForWindow = fits(measured.upper) ? measured.upper : measured.lower;
  }
  const room = window - promptForWindow;
  const outputDefault = body.stream === true ? STREAM_OUTPUT_TOKENS_DEFAULT : OUTPUT_TOKENS_DEFAULT;
  const asked = requested ?? Math.min(outputDefault, model.outputMax || outputDefault);
  const outputTokensMax = requested === null || lowerable ? Math.min(asked, room) : requested;
  const choices = body.n ?? 1;
  return {
    promptTokensBound,
    outputTokensMax,
    choices,
    predictionTokensBound,
    reserveMicro: BigInt(promptTokensBound) * inputPrice + BigInt(outputTokensMax * choices + predictionTokensBound) * outputPrice,
    inputPricePer1m: inputPrice,
    outputPricePer1m: outputPrice,
    unitPricesPer1m: unitPrices,
    ...(promptTier ? { promptTier } : {}),
    ...(atDefaultServiceTier
      ? { atDefaultServiceTier: { unitPricesPer1m: atDefaultServiceTier.unitPrices, promptTier: atDefaultServiceTier.promptTier } }
      : {}),
    priceVersionId: model.price.versionId,
  };
}
