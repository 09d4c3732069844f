/**
 * POST /v1/images/generations, billed per image by size and quality.
 *
 *   edge: key → body → model (default dall-e-2) → size and quality resolved and checked against
 *         the model's priced units → reserve = n × price → pool (the resolved size and quality
 *         are sent, so the upstream makes what was priced) → every image fetched and stored →
 *         settle the images the client receives (none when one of them failed: a 502, free).
 *   reply: `b64_json`, or `url` pointing at `/v1/media/{id}` on this gateway: the bytes are
 *         stored for MEDIA_TTL_S. An upstream URL is downloaded (bounded) and never shown.
 */
import { describe, fail, type Failure } from "../../errors.ts";
import { fetchUpstreamFile } from "../../providers/upstream.ts";
import type { UpstreamImage } from "../../providers/types.ts";
import type { EdgeDeps } from "../deps.ts";
import { admit, enter } from "../../admission/admission.ts";
import { failed, isFailure, json, zodFailure } from "../guard.ts";
import { storeMedia } from "../media/store.ts";
import { type PaidContext, pricedModel, readReplyBytes, refused } from "../paid.ts";
import type { OperationInput } from "../request.ts";
import { type ImageChoice, IMAGE_MODEL_DEFAULT, imagesRequest, resolveImageChoice } from "./schema.ts";

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
  deps: EdgeDeps,
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

export async function createImages(input: OperationInput, deps: EdgeDeps): Promise<Response> {
  const { requestId } = input;
  const ctx: PaidContext = { requestId, operation: "images", startedMs: performance.now() };
  const caller = await enter(deps, input.credentials);
  if (isFailure(caller)) return refused(deps, ctx, null, caller);
  const raw = await input.json(deps.env.BODY_BYTES_MAX);
  if (isFailure(raw)) return refused(deps, ctx, caller, raw);
  const parsed = imagesRequest.safeParse(raw.value);
  if (!parsed.success) return refused(deps, ctx, caller, zodFailure(parsed.error));
  const body = parsed.data;
  let choice: ImageChoice | null = null;
  const priced = pricedModel(deps, caller, body.model ?? IMAGE_MODEL_DEFAULT, "images", (model) => {
    if ([...body.prompt].length > model.contextWindow) {
      return fail("invalid_request", `The prompt is longer than ${model.contextWindow} characters, the limit of ${model.id}.`, {
        param: "prompt",
      });
    }
    const resolved = resolveImageChoice(model, body.size, body.quality);
    if ("param" in resolved) return fail("invalid_request", resolved.message, { param: resolved.param });
    choice = resolved;
    return `image_${resolved.size}_${resolved.quality}`;
  });
  if (isFailure(priced) || choice === null)
    return refused(deps, ctx, caller, isFailure(priced) ? priced : fail("internal_error", "No image size was resolved."));
  const { model, pricePer1m, pool } = priced;
  const { size, quality } = choice as ImageChoice;

  const n = body.n ?? 1;
  const admitted = await admit(deps, {
    requestId,
    caller,
    model,
    operation: "images",
    startedMs: ctx.startedMs,
    reserve: { input: { unit: `image_${size}_${quality}`, units: n, pricePer1m }, tokens: 0, exact: true },
  });
  if ("failure" in admitted) return failed(admitted.failure, requestId, admitted.headers);
  const region = caller.region;

  const asUrl = (body.response_format ?? "url") === "url";
  const upstreamBody = { ...body, n, size, quality, response_format: body.response_format ?? "url" };
  let backendName: string | null = null;
  const reply = await (async () => {
    const sent = await pool.send({
      requestId,
      region,
      build: (backend) =>
        backend.adapter.images?.buildImagesRequest({ body: upstreamBody, upstreamModel: backend.config.upstream_model ?? model.id }),
    });
    backendName = sent.backend?.name ?? null;
    if (sent.kind === "failed") return sent.failure;
    const bytes = await readReplyBytes(sent, IMAGES_REPLY_BYTES_MAX);
    if (isFailure(bytes)) return bytes;
    const images = sent.backend.adapter.images!.parseImagesResponse(Buffer.from(bytes).toString("utf8"));
    if ("code" in images) return images;
    if (images.images.length > n) return fail("upstream_error", `The upstream returned ${images.images.length} images for n = ${n}.`);
    return { images: images.images, backendUrl: sent.backend.config.url };
  })().catch((error: Error) => fail("upstream_error", `The upstream call failed: ${error.message}`));
  const data = isFailure(reply)
    ? reply
    : await imagesToData(deps, reply, asUrl, input.origin).catch((error: Error) => {
        deps.log("error", "images_store_failed", { requestId, error: error.message });
        return fail("internal_error", "The images could not be stored; nothing was charged.");
      });
  if (isFailure(data)) {
    // Billed only for images the client receives: one that cannot be fetched or stored fails
    // the request, and the upstream's charge for it is the gateway's loss, not the customer's.
    await admitted.settle({ input: 0 }, backendName, describe(data.code).status);
    return failed(data, requestId, admitted.headers);
  }
  await admitted.settle({ input: data.length }, backendName, 200);
  return json({ created: Math.floor(Date.now() / 1000), data }, requestId, 200, admitted.headers);
}
