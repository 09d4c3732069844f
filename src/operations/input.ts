/**
 * A paid operation's request as any transport hands it over (HTTP in src/http/request.ts, NATS
 * in src/internal/service.ts): who calls, and its body read on demand within named bounds.
 */
import type { Credentials } from "../admission/caller.ts";
import type { Env } from "../config.ts";
import type { z } from "zod";
import { fail, type Failure, isFailure, zodFailure } from "../errors.ts";
import { newId } from "../ids.ts";
import { jsonDepthExceeds } from "../json.ts";

export function newRequestId(): string {
  return newId("req");
}

/** A multipart form, as Bun's Response reads it. */
export type Form = Awaited<ReturnType<Response["formData"]>>;

/**
 * A paid operation's request as any transport hands it over (src/http/request.ts httpInput, src/internal/service.ts natsInput):
 * who calls, and its body read on demand, once the caller is known.
 */
export interface OperationInput {
  requestId: string;
  credentials: Credentials;
  /**
   * The body as JSON within `limits`: 413 above its size, 400 for malformed or too deep JSON
   * (wrapped: a body may look like a failure), with the text it was parsed from (chat's prompt
   * bound measures its UTF-8 bytes instead of serializing the body again).
   */
  json(limits: JsonLimits): Promise<JsonBody | Failure>;
  /** The body as a multipart form within `bytesMax` (null above it: the caller says what was too large). */
  form(bytesMax: number): Promise<Form | null | Failure>;
  /** This gateway's origin as its callers reach it, for links to its own media. */
  origin: string;
  /** Aborted when the caller goes away: the upstream call is then cut at once and billed once. */
  signal: AbortSignal;
}

/** A JSON body read: its value and the text it was parsed from. */
export interface JsonBody {
  value: unknown;
  text: string;
}

/** A multipart body's bytes as a form, or the 400 naming `file` a client expects. */
export async function parseForm(bytes: Uint8Array, contentType: string | null): Promise<Form | Failure> {
  const type = contentType ?? "";
  if (!type.toLowerCase().startsWith("multipart/form-data")) {
    return fail("invalid_request", "Send the audio as multipart/form-data with a `file` field.", { param: "file" });
  }
  try {
    return await new Response(bytes, { headers: { "content-type": type } }).formData();
  } catch {
    return fail("invalid_request", "The multipart body could not be read.", { param: "file" });
  }
}

/** The bounds a JSON body is read within, whatever the transport. */
export interface JsonLimits {
  /** Its size: 413 `request_too_large` above. */
  bytesMax: number;
  /** Its nesting of arrays and objects: 400 `invalid_request` above, before it is parsed. */
  depthMax: number;
}

/** The configured bounds of a /v1 request body (BODY_BYTES_MAX, JSON_DEPTH_MAX). */
export function jsonLimits(env: Pick<Env, "BODY_BYTES_MAX" | "JSON_DEPTH_MAX">): JsonLimits {
  return { bytesMax: env.BODY_BYTES_MAX, depthMax: env.JSON_DEPTH_MAX };
}

/**
 * A body's text as JSON (wrapped, apart from any failure), or the 400 a client expects: `invalid_json`,
 * or `invalid_request` when it nests deeper than `depthMax` (found before parsing, in one pass).
 */
export function parseJsonText(text: string, depthMax: number): JsonBody | Failure {
  if (text.length === 0) return fail("invalid_json", "The request body is empty; send a JSON object.");
  if (jsonDepthExceeds(text, depthMax)) {
    return fail("invalid_request", `The request body nests arrays and objects deeper than the limit of ${depthMax} levels.`);
  }
  try {
    return { value: JSON.parse(text) as unknown, text };
  } catch (error) {
    return fail("invalid_json", `The request body is not valid JSON: ${(error as Error).message}`);
  }
}

export function tooLarge(bytesMax: number): Failure {
  return fail("request_too_large", `The request body is larger than the limit of ${bytesMax} bytes.`);
}

/** The key of an `Authorization: Bearer <token>` value, else of an `x-api-key` value, or null. */
export function presentedKey(authorization: string | null | undefined, apiKey: string | null | undefined = null): string | null {
  if (authorization) {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
    return match ? match[1]! : null;
  }
  return apiKey || null;
}

/** The body as JSON within the configured limits (JSON_DEPTH_MAX, BODY_BYTES_MAX), checked by `schema`: the 400 names the field. */
export async function readJson<T>(
  input: OperationInput,
  env: Pick<Env, "BODY_BYTES_MAX" | "JSON_DEPTH_MAX">,
  schema: z.ZodType<T>,
): Promise<T | Failure> {
  const raw = await input.json(jsonLimits(env));
  if (isFailure(raw)) return raw;
  const parsed = schema.safeParse(raw.value);
  return parsed.success ? parsed.data : zodFailure(parsed.error);
}
