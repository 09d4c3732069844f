/** The body of POST /v1/images/generations (OpenAI's CreateImageRequest), with named bounds. */
import { z } from "zod";
import type { CatalogModel } from "../../catalog/catalog.ts";

/** Images per request, as OpenAI allows. */
export const IMAGES_PER_REQUEST_MAX = 10;
/** The model when the request names none, as in OpenAI's API. */
export const IMAGE_MODEL_DEFAULT = "dall-e-2";
/** Prompt characters, whatever the model (each model's own limit is its context window). */
export const IMAGE_PROMPT_CHARS_MAX = 32_000;

export const imagesRequest = z.object({
  prompt: z.string().min(1, "must not be empty").max(IMAGE_PROMPT_CHARS_MAX),
  model: z.string().min(1).max(256).nullish(),
  n: z.number().int().min(1).max(IMAGES_PER_REQUEST_MAX).nullish(),
  size: z
    .string()
    .regex(/^(auto|\d{2,5}x\d{2,5})$/, "must be `auto` or WIDTHxHEIGHT, e.g. 1024x1024")
    .nullish(),
  quality: z.enum(["standard", "hd", "low", "medium", "high", "auto"]).nullish(),
  response_format: z.enum(["url", "b64_json"]).nullish(),
  output_format: z.enum(["png", "jpeg", "webp"]).nullish(),
  output_compression: z.number().int().min(0).max(100).nullish(),
  background: z.enum(["transparent", "opaque", "auto"]).nullish(),
  moderation: z.enum(["low", "auto"]).nullish(),
  style: z.enum(["vivid", "natural"]).nullish(),
  user: z.string().max(256).optional(),
});
export type ImagesRequest = z.infer<typeof imagesRequest>;

/** A model's priced (size, quality) pairs, from its units `image_<WxH>_<quality>`. */
export function imageOptions(model: CatalogModel): { size: string; quality: string }[] {
  const out: { size: string; quality: string }[] = [];
  for (const unit of model.price.tomanPer1m.keys()) {
    const match = /^image_(\d+x\d+)_([a-z]+)$/.exec(unit);
    if (match) out.push({ size: match[1]!, quality: match[2]! });
  }
  return out;
}

/** The size `auto` and an absent size resolve to, when the model makes it (else its first priced size). */
export const IMAGE_SIZE_DEFAULT = "1024x1024";

/** `auto` and an absent field resolve to the default size, and to the model's middle quality. */
/** The size and quality an image request is priced and made at. */
export interface ImageChoice {
  size: string;
  quality: string;
}

export function resolveImageChoice(
  model: CatalogModel,
  size: string | null | undefined,
  quality: string | null | undefined,
): ImageChoice | { param: "size" | "quality"; message: string } {
  const options = imageOptions(model);
  const sizes = [...new Set(options.map((o) => o.size))];
  const chosenSize = !size || size === "auto" ? (sizes.includes(IMAGE_SIZE_DEFAULT) ? IMAGE_SIZE_DEFAULT : sizes[0]) : size;
  if (!chosenSize || !sizes.includes(chosenSize))
    return { param: "size", message: `${model.id} makes images of size ${sizes.join(", ")}; not ${size}.` };
  const qualities = options.filter((o) => o.size === chosenSize).map((o) => o.quality);
  const middle = qualities.includes("medium") ? "medium" : qualities.includes("standard") ? "standard" : qualities[0]!;
  const chosenQuality = !quality || quality === "auto" ? middle : quality;
  if (!qualities.includes(chosenQuality))
    return { param: "quality", message: `${model.id} offers quality ${qualities.join(", ")} at ${chosenSize}; not ${quality}.` };
  return { size: chosenSize, quality: chosenQuality };
}
