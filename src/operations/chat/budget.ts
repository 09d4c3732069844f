/**
 * The admission arithmetic for a chat request: how many tokens it may produce and the most it
 * can cost. Reserve = prompt upper bound × input price + (output limit × n + prediction) × output
 * price, so the hold covers the worst case and the upstream, told the same limit, cannot exceed
 * it: nothing is generated without money held, hidden reasoning included.
 *
 * Without `max_tokens` the limit is OUTPUT_TOKENS_DEFAULT (STREAM_OUTPUT_TOKENS_DEFAULT for a
 * stream) or the context's remainder, and the hold covers all of it. When the wallet cannot cover
 * the limit, admission lowers it to what the wallet covers, down to OUTPUT_TOKENS_LOWERED_MIN
 * (src/admission: `Reserve.outputLowerable`); the upstream is told the lowered limit. On a wire
 * that lowers to the window (Anthropic's Messages), a limit the window cannot hold after the
 * prompt is lowered to the room left, down to OUTPUT_TOKENS_WINDOW_MIN, instead of refused.
 */
import type { CatalogModel } from "../../catalog/catalog.ts";
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
import { paidFieldPercents, priceWithPercents } from "./paidFields.ts";
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
  priceVersionId: number;
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
 * long-context rate; the catalog has no price for it, so the beta is accepted only for a prompt
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
      "and the long-context rate above it has no price in the catalog.",
    { param: "anthropic-beta" },
  );
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
  const listInput = model.price.tomanPer1m.get("input_token");
  const listOutput = model.price.tomanPer1m.get("output_token");
  if (listInput === undefined || listOutput === undefined) {
    return fail("model_forbidden", `${model.id} has no chat price and cannot be used for chat completions.`, { param: "model" });
  }
  const percents = paidFieldPercents(body, options.paidFields);
  if (isFailure(percents)) return percents;
  const unitPrices =
    percents.length === 0
      ? model.price.tomanPer1m
      : new Map([...model.price.tomanPer1m].map(([unit, price]) => [unit, priceWithPercents(price, percents)]));
  const inputPrice = unitPrices.get("input_token")!;
  const outputPrice = unitPrices.get("output_token")!;
  const promptTokensWhole = promptTokensUpperBound(body, options.bodyBytes, mediaUrlTokens(model));
  const longContext = await longContextRefusal(body, promptTokensWhole, options.fairnessKey);
  if (longContext) return longContext;
  // A vendor refuses a prompt longer than its window: it never bills more input than that.
  const promptTokensBound = Math.min(promptTokensWhole, model.contextWindow);
  // Rejected predicted tokens are billed as output, beyond max_tokens: reserve them at that price
  // (OpenAI's API reference, usage.completion_tokens_details.rejected_prediction_tokens: "still
  // counted in the total completion tokens for purposes of billing, output, and context window limits").
  const predictionTokensBound = bytesOf(body.prediction);
  const requested = body.max_completion_tokens ?? body.max_tokens ?? null;
  const lowerable = options.lowerToWindow === true && requested !== null;
  // The output the window must leave room for: all of it asked, or on a lowering wire its floor.
  const outputLeast = lowerable ? Math.min(requested, OUTPUT_TOKENS_WINDOW_MIN) : (requested ?? 1);
  const fits = (prompt: number) => prompt + outputLeast <= model.contextWindow;
  // The byte bound can be ~4× the real count; measure before refusing for the window.
  let promptForWindow = promptTokensBound;
  if (promptTokensBound + (requested ?? 1) > model.contextWindow) {
    const lowerEnough = model.contextWindow - outputLeast; // more than this is too long
    const measured = await measureWholePrompt(body, options.fairnessKey, lowerEnough);
    if (!fits(measured.lower)) {
      return fail(
        "context_length_exceeded",
        `This model's maximum context length is ${model.contextWindow} tokens. However, you requested ` +
          `at least ${measured.lower + (requested ?? 1)} tokens (at least ${measured.lower} in the prompt: messages, tools and schemas, ` +
          `${requested ?? 1} in the completion). Please reduce the length of the messages, tools or completion.`,
        { param: "messages" },
      );
    }
    promptForWindow = fits(measured.upper) ? measured.upper : measured.lower;
  }
  const room = model.contextWindow - promptForWindow;
  const asked = requested ?? (body.stream === true ? STREAM_OUTPUT_TOKENS_DEFAULT : OUTPUT_TOKENS_DEFAULT);
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
    priceVersionId: model.price.versionId,
  };
}
