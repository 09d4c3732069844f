/**
 * POST /v1/images/generations: real PNGs of the asked size, a gradient whose colours follow the
 * prompt. `b64_json` returns the bytes; `url` returns a link to this simulator
 * (`/sim/images/{id}`), as a vendor returns a link to its own storage, so the gateway must fetch
 * it and never show it. GPT image models also report token usage. Logs one unit per image.
 */
import { z } from "zod";
import type { ChatContext } from "./chat.ts";
import { simJson, simOperation } from "./ops.ts";
import { FifoMap } from "../fifoMap.ts";
import { encodePng } from "./png.ts";
import { simCountTokens } from "./tokens.ts";

/** Images kept for `url` replies; the oldest are dropped first. */
export const SIM_IMAGES_KEPT_MAX = 64;
const SIDE_MAX = 4_096;

const request = z.looseObject({
  model: z.string().min(1),
  prompt: z.string().min(1),
  n: z.number().int().min(1).max(10).default(1),
  size: z
    .string()
    .regex(/^\d+x\d+$/)
    .default("1024x1024"),
  response_format: z.enum(["url", "b64_json"]).optional(),
  quality: z.string().optional(),
});

/** Image tokens of a square 1024-pixel image by quality, as OpenAI lists them for GPT image models. */
const SQUARE_IMAGE_TOKENS: Record<string, number> = { low: 272, medium: 1056, high: 4160 };

/**
 * The output tokens of one image: the square figure scaled by area (1024x1536 high: 6,240).
 * @example simImageTokens(1024, 1024, "high") // 4160
 */
export function simImageTokens(width: number, height: number, quality: string | undefined): number {
  const square = SQUARE_IMAGE_TOKENS[quality ?? "medium"] ?? SQUARE_IMAGE_TOKENS.medium!;
  return Math.round((square * width * height) / (1024 * 1024));
}

function promptHash(prompt: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < prompt.length; i++) h = Math.imul(h ^ prompt.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** The simulator's image for a prompt: the same prompt and size always give the same bytes. */
export function simImage(prompt: string, width: number, height: number, index = 0): Buffer {
  const h = promptHash(`${index}:${prompt}`);
  const rgb = new Uint8Array(width * height * 3);
  for (let y = 0; y < height; y++) {
    const shade = Math.floor((y * 255) / Math.max(1, height - 1));
    for (let x = 0; x < width; x++) {
      const i = (y * width + x) * 3;
      rgb[i] = (h & 0xff) ^ shade;
      rgb[i + 1] = ((h >>> 8) & 0xff) ^ Math.floor((x * 255) / Math.max(1, width - 1));
      rgb[i + 2] = (h >>> 16) & 0xff;
    }
  }
  return encodePng(width, height, rgb);
}

export class SimImageStore {
  private readonly images = new FifoMap<string, Buffer>(SIM_IMAGES_KEPT_MAX);
  private next = 0;

  put(png: Buffer): string {
    const id = `img-${++this.next}`;
    this.images.set(id, png);
    return id;
  }

  serve(id: string): Response {
    const png = this.images.get(id);
    if (!png) return new Response("not found", { status: 404 });
    return new Response(png, { headers: { "content-type": "image/png" } });
  }
}

export function handleImages(context: ChatContext, store: SimImageStore, origin: string, req: Request): Promise<Response> {
  return simOperation(context, req, "images", async () => {
    const body = await simJson(req, request);
    if (body instanceof Response) return { response: body, model: "", units: 0 };
    const [width, height] = body.size.split("x").map(Number) as [number, number];
    if (width < 1 || height < 1 || width > SIDE_MAX || height > SIDE_MAX) {
      return {
        response: Response.json(
          { error: { message: "size out of range", type: "invalid_request_error", param: "size", code: null } },
          { status: 400 },
        ),
        model: body.model,
        units: 0,
      };
    }
    const data = Array.from({ length: body.n }, (_, index) => {
      const png = simImage(body.prompt, width, height, index);
      const revised_prompt = `A simulated picture of: ${body.prompt}`;
      if (body.response_format === "url") return { url: `${origin}/sim/images/${store.put(png)}`, revised_prompt };
      return { b64_json: png.toString("base64"), revised_prompt };
    });
    // GPT image models report their tokens, as OpenAI's do: the prompt's text in, the images out.
    const usage = body.model.startsWith("gpt-image")
      ? {
          input_tokens: simCountTokens(body.prompt),
          input_tokens_details: { text_tokens: simCountTokens(body.prompt), image_tokens: 0 },
          output_tokens: body.n * simImageTokens(width, height, body.quality),
          total_tokens: simCountTokens(body.prompt) + body.n * simImageTokens(width, height, body.quality),
        }
      : undefined;
    const reply = { created: Math.floor(Date.now() / 1000), data, ...(usage ? { usage } : {}) };
    return { response: Response.json(reply), model: body.model, units: body.n };
  });
}
