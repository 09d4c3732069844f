/**
 * Images (POST /v1/images/generations, gw.v1.images.generations), billed per image by size and quality, or, for a model whose
 * replies report token usage (gpt-image-1), by token unit within the per-image bound (tokens.ts).
 *
 *   edge: key → body → model (default dall-e-2) → size and quality resolved and checked against
 *         the model's priced units → reserve = n × price → pool (the resolved size and quality
 *         are sent, so the upstream makes what was priced) → every image fetched and stored →
 *         settle the images the client receives (none when one of them failed: a 502, free).
 *   reply: `b64_json`, or `url` pointing at `/v1/media/{id}` on this gateway: the bytes are
 *         stored for MEDIA_TTL_S. An upstream URL is downloaded (bounded) and never shown.
 */
import type { PricedModel } from "../../admission/model.ts";
import type { CatalogModel } from "../../catalog/catalog.ts";
import type { Reserve } from "../../admission/reserve.ts";
import type { GatewayDeps } from "../../admission/deps.ts";
import { fail, type Failure, isFailure } from "../../errors.ts";
import { alwaysBase64Images } from "../../providers/openai/images.ts";
import type { UpstreamImage } from "../../providers/types.ts";
import { fetchUpstreamFile } from "../../providers/upstream.ts";
import { type OperationInput, readJson } from "../input.ts";
import { type WholeResult, type Prepared, run, sendWhole, type PaidDeps } from "../run.ts";
import { storeMedia } from "../../media/store.ts";
import { type ImageChoice, IMAGE_MODEL_DEFAULT, type ImagesRequest, imagesRequest, resolveImageChoice } from "./schema.ts";
import { imageTokenPrices, imageTokensReserve, imageTokensUsed, imageUsageOf } from "./tokens.ts";
import { presentedJson } from "../../admission/costReply.ts";

/** The largest image downloaded from an upstream URL. */
export const IMAGE_BYTES_MAX = 32 * 1024 * 1024;
/** The largest upstream reply read: ten large images in base64, with room. */
export const IMAGES_REPLY_BYTES_MAX = IMAGE_BYTES_MAX * 2;
/** How long one image download from an upstream URL may take. */
export const IMAGE_DOWNLOAD_MS_MAX = 30_000;

/** The content type of image bytes, from their signature. */
export function imageContentType(bytes: Uint8Array): string {
  if (bytes[0] === 0x89 && bytes[1] === 0x50 && bytes[2] === 0x4e && bytes[3] === 0x47) return "image/png";
  if (bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) return "image/jpeg";
  if (Buffer.from(bytes.subarray(8, 12)).toString("ascii") === "WEBP") return "image/webp";
  return "application/octet-stream";
}

/** An image's bytes; a URL is downloaded under the safe-fetch rules, the backend's own origin allowed. */
async function imageBytes(image: UpstreamImage, backendUrl: string): Promise<Uint8Array | Failure> {
  if ("b64" in image) return Buffer.from(image.b64, "base64");
  const fetched = await fetchUpstreamFile(image.url, { backendUrl, bytesMax: IMAGE_BYTES_MAX, timeoutMs: IMAGE_DOWNLOAD_MS_MAX });
  return "code" in fetched ? fetched : fetched.bytes;
}

/** The reply's `data`: every image fetched (in parallel) and stored before anything is billed. */
async function imagesToData(
  deps: Pick<GatewayDeps, "db" | "env">,
  reply: { images: UpstreamImage[]; backendUrl: string },
  asUrl: boolean,
  base: string,
): Promise<Record<string, string>[] | Failure> {
  const { images, backendUrl } = reply;
  const fetched = await Promise.all(images.map((image) => (!asUrl && "b64" in image ? null : imageBytes(image, backendUrl))));
  const failure = fetched.find(isFailure);
  if (failure) return failure;
  const data: Record<string, string>[] = [];
  for (const [i, image] of images.entries()) {
    const extra: Record<string, string> = image.revisedPrompt ? { revised_prompt: image.revisedPrompt } : {};
    const bytes = fetched[i] as Uint8Array | null;
    if (bytes === null) data.push({ b64_json: (image as { b64: string }).b64, ...extra });
    else if (!asUrl) data.push({ b64_json: Buffer.from(bytes).toString("base64"), ...extra });
    else
      data.push({ url: `${base}/v1/media/${await storeMedia(deps.db, bytes, imageContentType(bytes), deps.env.MEDIA_TTL_S)}`, ...extra });
  }
  return data;
}

interface ImagesPrepared extends Prepared {
  body: ImagesRequest;
  n: number;
  choice: ImageChoice;
  tokenPrices: ReturnType<typeof imageTokenPrices>;
}

/**
 * The unit an images request is priced by, from its model: the resolved size and quality, or the
 * 400 naming the prompt, size or quality the model cannot take.
 */
function imageUnit(body: ImagesRequest, model: CatalogModel): string | Failure {
  if ([...body.prompt].length > model.contextWindow) {
    return fail("invalid_request", `The prompt is longer than ${model.contextWindow} characters, the limit of ${model.id}.`, {
      param: "prompt",
    });
  }
  const resolved = resolveImageChoice(model, body.size, body.quality);
  if ("param" in resolved) return fail("invalid_request", resolved.message, { param: resolved.param });
  return `image_${resolved.size}_${resolved.quality}`;
}

/** The reserve of n images: at the per-image price, or by token unit within the per-image bound (tokens.ts). */
async function prepareImages(body: ImagesRequest, priced: PricedModel): Promise<ImagesPrepared | Failure> {
  // The unit's price was read for this size and quality (imageUnit): resolved again, it is the same.
  const choice = resolveImageChoice(priced.model, body.size, body.quality);
  if ("param" in choice) return fail("invalid_request", choice.message, { param: choice.param });
  const { size, quality } = choice;
  const n = body.n ?? 1;
  const tokenPrices = imageTokenPrices(priced.model);
  const reserve: Reserve = tokenPrices
    ? imageTokensReserve(body.prompt, n, priced.pricePer1m, tokenPrices)
    : { input: { unit: `image_${size}_${quality}`, units: n, pricePer1m: priced.pricePer1m }, tokens: 0, exact: true };
  return { ...priced, body, n, choice, tokenPrices, reserve };
}

/** The images operation: images of the prompt, every one fetched and stored before any is billed. */
export function createImages(input: OperationInput, deps: PaidDeps): Promise<WholeResult> {
  return run(deps, input, {
    operation: "images",
    read: (input) => readJson(input, deps.env, imagesRequest),
    priced: (body) => ({ model: body.model ?? IMAGE_MODEL_DEFAULT, unit: (model) => imageUnit(body, model) }),
    prepare: prepareImages,
    call: async (admitted) => {
      const { model, body, n, choice } = admitted.prepared;
      // Without a format, the reply has OpenAI's default for the model: base64 for GPT image models.
      const format = body.response_format ?? (alwaysBase64Images(model.id) ? "b64_json" : "url");
      const upstreamBody = { ...body, n, size: choice.size, quality: choice.quality, response_format: format };
      const read = await sendWhole(
        admitted,
        (backend) =>
          backend.adapter.images?.buildImagesRequest({ body: upstreamBody, upstreamModel: backend.config.upstream_model ?? model.id }),
        IMAGES_REPLY_BYTES_MAX,
      );
      if (isFailure(read)) return read;
      const images = read.backend.adapter.images!.parseImagesResponse(Buffer.from(read.bytes).toString("utf8"));
      if ("code" in images) return images;
      if (images.images.length > n) return fail("upstream_error", `The upstream returned ${images.images.length} images for n = ${n}.`);
      const reply = { images: images.images, backendUrl: read.backend.config.url };
      // Billed only for images the client receives: one that cannot be fetched or stored fails
      // the request, and the upstream's charge for it is the gateway's loss, not the customer's.
      const data = await imagesToData(deps, reply, format === "url", input.origin).catch((error: Error) => {
        deps.log("error", "images_store_failed", { requestId: input.requestId, error: error.message });
        return fail("internal_error", "The images could not be stored; nothing was charged.");
      });
      return isFailure(data) ? data : { data, usage: images.usage };
    },
    deliver: async ({ data, usage }, admitted) => {
      const { reserve, tokenPrices, pricePer1m } = admitted.prepared;
      const used = tokenPrices ? imageTokensUsed(reserve, data.length, pricePer1m, usage) : { input: data.length };
      // A GPT image model's reply tells its tokens as OpenAI's does: the units billed, and their cost.
      const reply = { created: Math.floor(Date.now() / 1000), data, ...(tokenPrices ? { usage: imageUsageOf(used) } : {}) };
      return { used, reply: (settled) => ({ contentType: "application/json", body: presentedJson(reply, settled) }) };
    },
  });
}
