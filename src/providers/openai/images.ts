/** OpenAI-style image generation: the body passes through with the upstream's model id. */
import { z } from "zod";
import type { ImagesAdapter, ImageUsage, UpstreamFailure, UpstreamImage } from "../types.ts";
import { parseUpstreamReply } from "../replyJson.ts";

const tokens = z.number().int().nonnegative();
const imagesReply = z.object({
  data: z.array(z.object({ b64_json: z.string().nullish(), url: z.string().url().nullish(), revised_prompt: z.string().nullish() })),
  /** GPT image models: input tokens (text and images) and the image tokens generated. */
  usage: z
    .looseObject({
      input_tokens: tokens,
      output_tokens: tokens,
      input_tokens_details: z.looseObject({ text_tokens: tokens.nullish(), image_tokens: tokens.nullish() }).nullish(),
    })
    .nullish(),
});

/**
 * OpenAI's image usage by unit; input without a breakdown counts as text, and the parts are held
 * to the input reported.
 * @example openAIImageUsage({ input_tokens: 50, output_tokens: 4160, input_tokens_details: { text_tokens: 40, image_tokens: 10 } })
 *   // { textInputTokens: 40, imageInputTokens: 10, outputTokens: 4160 }
 */
export function openAIImageUsage(usage: NonNullable<z.infer<typeof imagesReply>["usage"]>): ImageUsage {
  const text = Math.min(usage.input_tokens_details?.text_tokens ?? usage.input_tokens, usage.input_tokens);
  const image = Math.min(usage.input_tokens_details?.image_tokens ?? 0, usage.input_tokens - text);
  return { textInputTokens: text, imageInputTokens: image, outputTokens: usage.output_tokens };
}

/**
 * GPT image models always answer in base64 and refuse `response_format`; OpenAI's reply for them
 * is `b64_json`, which clients (the AI SDK) expect when they did not ask for a format.
 * @example alwaysBase64Images("gpt-image-1") // true
 */
export const alwaysBase64Images = (model: string) => model.startsWith("gpt-image");

export function openAIImages(headers: Record<string, string>): ImagesAdapter {
  return {
    buildImagesRequest: ({ body, upstreamModel }) => {
      const upstream: Record<string, unknown> = { ...body, model: upstreamModel };
      // GPT image models always answer in base64 and refuse the field.
      if (alwaysBase64Images(upstreamModel)) delete upstream.response_format;
      return { path: "/images/generations", body: JSON.stringify(upstream), headers: { ...headers, "content-type": "application/json" } };
    },
    parseImagesResponse: parseOpenAIImages,
  };
}

export function parseOpenAIImages(text: string): { images: UpstreamImage[]; usage?: ImageUsage } | UpstreamFailure {
  const parsed = parseUpstreamReply(text, imagesReply, "an image list");
  if ("failure" in parsed) return parsed.failure;
  const images: UpstreamImage[] = [];
  for (const d of parsed.reply.data) {
    const revisedPrompt = d.revised_prompt ?? undefined;
    if (d.b64_json) images.push({ b64: d.b64_json, revisedPrompt });
    else if (d.url) images.push({ url: d.url, revisedPrompt });
    else return { code: "upstream_error", message: "The upstream returned an image with neither bytes nor a URL.", retryable: true };
  }
  const usage = parsed.reply.usage;
  return usage ? { images, usage: openAIImageUsage(usage) } : { images };
}
