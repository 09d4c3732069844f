/** OpenAI-style image generation: the body passes through with the upstream's model id. */
import { z } from "zod";
import type { ImagesAdapter, UpstreamFailure, UpstreamImage } from "../types.ts";
import { parseUpstreamReply } from "../replyJson.ts";

const imagesReply = z.object({
  data: z.array(z.object({ b64_json: z.string().nullish(), url: z.string().url().nullish(), revised_prompt: z.string().nullish() })),
});

export function openAIImages(headers: Record<string, string>): ImagesAdapter {
  return {
    buildImagesRequest: ({ body, upstreamModel }) => {
      const upstream: Record<string, unknown> = { ...body, model: upstreamModel };
      // GPT image models always answer in base64 and refuse the field.
      if (upstreamModel.startsWith("gpt-image")) delete upstream.response_format;
      return { path: "/images/generations", body: JSON.stringify(upstream), headers: { ...headers, "content-type": "application/json" } };
    },
    parseImagesResponse: parseOpenAIImages,
  };
}

export function parseOpenAIImages(text: string): { images: UpstreamImage[] } | UpstreamFailure {
  const parsed = parseUpstreamReply(text, imagesReply, "an image list");
  if ("failure" in parsed) return parsed.failure;
  const images: UpstreamImage[] = [];
  for (const d of parsed.reply.data) {
    const revisedPrompt = d.revised_prompt ?? undefined;
    if (d.b64_json) images.push({ b64: d.b64_json, revisedPrompt });
    else if (d.url) images.push({ url: d.url, revisedPrompt });
    else return { code: "upstream_error", message: "The upstream returned an image with neither bytes nor a URL.", retryable: true };
  }
  return { images };
}
