/**
 * Image models whose replies report token usage (GPT image models: `capabilities.image_tokens`)
 * are billed by unit, as the vendor bills them: the prompt's text tokens at `input_token`, image
 * input tokens at `image_input_token`, the images generated at `image_output_token`.
 *
 *   reserve  the prompt's UTF-8 bytes (a bound on its tokens) at the text price, and the output
 *            tokens the images asked for may take: n × the per-image price of the size and
 *            quality asked (the vendor's rounded figure for those tokens) ÷ the output price,
 *            with a named margin
 *   settle   the reply's usage, each part held to its bound (text to the prompt's bound, output
 *            to the images received); a reply without usage is billed those bounds
 *
 * Generations send no image input, so its tokens have no room in the bound and are not billed.
 */
import type { Reserve } from "../../admission/reserve.ts";
import type { UsedUnits } from "../../admission/prices.ts";
import type { CatalogModel } from "../../catalog/catalog.ts";
import type { ImageUsage } from "../../providers/types.ts";

/** The vendor's per-image prices round its token counts (1,056 tokens at $40 per 1M is listed as $0.042): the bound allows this much more. */
export const IMAGE_TOKENS_MARGIN_PERCENT = 5n;

export interface ImageTokenPrices {
  inputPer1m: bigint;
  outputPer1m: bigint;
}

/** The token prices of a model billed by image tokens, or null for one billed per image. */
export function imageTokenPrices(model: CatalogModel): ImageTokenPrices | null {
  if (!model.capabilities.image_tokens) return null;
  const inputPer1m = model.price.tomanPer1m.get("input_token");
  const outputPer1m = model.price.tomanPer1m.get("image_output_token");
  return inputPer1m === undefined || outputPer1m === undefined || outputPer1m === 0n ? null : { inputPer1m, outputPer1m };
}

/**
 * The most output tokens `images` images may be billed: their per-image price (toman per 1M
 * images) over the output price (toman per 1M tokens), with the margin, rounded up.
 * @example outputTokensBound(1, 3_780_000_000n, 3_600_000n) // 1103: $0.042 an image over $40 per 1M tokens is 1,050, × 1.05
 */
export function outputTokensBound(images: number, perImagePer1m: bigint, outputPer1m: bigint): number {
  const numerator = BigInt(images) * perImagePer1m * (100n + IMAGE_TOKENS_MARGIN_PERCENT);
  const denominator = outputPer1m * 100n;
  return Number((numerator + denominator - 1n) / denominator);
}

/** The reserve of a token-billed image request. */
export function imageTokensReserve(prompt: string, n: number, perImagePer1m: bigint, prices: ImageTokenPrices): Reserve {
  const promptBound = Buffer.byteLength(prompt, "utf8");
  const output = outputTokensBound(n, perImagePer1m, prices.outputPer1m);
  return {
    input: { unit: "input_token", units: promptBound, pricePer1m: prices.inputPer1m },
    output: { unit: "image_output_token", units: output, pricePer1m: prices.outputPer1m },
    tokens: promptBound + output,
    exact: false,
  };
}

/** What a token-billed image request used: the reply's usage within its bounds, or the bounds. */
export function imageTokensUsed(reserve: Reserve, received: number, perImagePer1m: bigint, usage: ImageUsage | undefined): UsedUnits {
  const outputMax = outputTokensBound(received, perImagePer1m, reserve.output!.pricePer1m);
  if (!usage) return { input: reserve.input.units, output: outputMax };
  return { input: Math.min(usage.textInputTokens, reserve.input.units), output: Math.min(usage.outputTokens, outputMax) };
}

/**
 * The units billed as OpenAI's image `usage` (ImageGenUsage): text tokens in, image tokens out.
 * Generations send no image, so no image input is billed or told.
 * @example imageUsageOf({ input: 9, output: 4160 })
 *   // { total_tokens: 4169, input_tokens: 9, output_tokens: 4160, input_tokens_details: { text_tokens: 9, image_tokens: 0 } }
 */
export function imageUsageOf(used: UsedUnits) {
  const input = used.input;
  const output = used.output ?? 0;
  return {
    total_tokens: input + output,
    input_tokens: input,
    output_tokens: output,
    input_tokens_details: { text_tokens: input, image_tokens: 0 },
  };
}
