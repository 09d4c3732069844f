/** What every /v1 and /admin handler needs from a raw request: ids, body, credentials, origin. */
import { fail, isFailure, type Failure } from "../errors.ts";
import { newId } from "../ids.ts";
import type { Credentials } from "../admission/admission.ts";

export function newRequestId(): string {
  return newId("req");
}

/** A multipart form, as Bun's Response reads it. */
export type Form = Awaited<ReturnType<Response["formData"]>>;

/**
 * A paid operation's request as any transport receives it (HTTP here, NATS in src/internal):
 * who calls, and its body read on demand, once the caller is known.
 */
export interface OperationInput {
  requestId: string;
  credentials: Credentials;
  /** The body as JSON within `bytesMax`: 413 above it, 400 for malformed JSON (wrapped: a body may look like a failure). */
  json(bytesMax: number): Promise<{ value: unknown } | Failure>;
  /** The body as a multipart form within `bytesMax` (null above it: the caller says what was too large). */
  form(bytesMax: number): Promise<Form | null | Failure>;
  /** This gateway's origin as its callers reach it, for links to its own media. */
  origin: string;
}

/** An HTTP request as an operation's input. */
export function httpInput(request: Request, requestId: string, publicUrl: string | undefined): OperationInput {
  return {
    requestId,
    credentials: credentialsOf(request),
    json: (bytesMax) => readJsonBodyText(request, bytesMax),
    form: async (bytesMax) => {
      const declared = request.headers.get("content-length");
      if (declared !== null && Number(declared) > bytesMax) return null;
      const parts: Uint8Array[] = [];
      let total = 0;
      for await (const part of request.body ?? []) {
        total += part.byteLength;
        if (total > bytesMax) return null;
        parts.push(part);
      }
      return parseForm(Buffer.concat(parts), request.headers.get("content-type"));
    },
    origin: (publicUrl ?? new URL(request.url).origin).replace(/\/+$/, ""),
  };
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

/**
 * The body as JSON, within `bytesMax` (413 above it, 400 for malformed JSON), and the text it was
 * parsed from: chat's prompt bound measures that text's UTF-8 bytes (only when it needs them)
 * instead of serializing the body again. The value stays wrapped: a client's body may look like a failure.
 */
export async function readJsonBodyText(request: Request, bytesMax: number): Promise<{ value: unknown; text: string } | Failure> {
  const declared = request.headers.get("content-length");
  if (declared !== null && Number(declared) > bytesMax) return tooLarge(bytesMax);
  let text: string;
  if (declared !== null) {
    text = await request.text();
  } else {
    const parts: Uint8Array[] = [];
    let total = 0;
    for await (const part of request.body ?? []) {
      total += part.byteLength;
      if (total > bytesMax) return tooLarge(bytesMax);
      parts.push(part);
    }
    text = Buffer.concat(parts).toString("utf8");
  }
  if (text.length > bytesMax) return tooLarge(bytesMax);
  const parsed = parseJsonText(text);
  return isFailure(parsed) ? parsed : { value: parsed.value, text };
}

/** A body's text as JSON (wrapped, apart from any failure), or the 400 `invalid_json` a client expects. */
export function parseJsonText(text: string): { value: unknown } | Failure {
  if (text.length === 0) return fail("invalid_json", "The request body is empty; send a JSON object.");
  try {
    return { value: JSON.parse(text) as unknown };
  } catch (error) {
    return fail("invalid_json", `The request body is not valid JSON: ${(error as Error).message}`);
  }
}

export function tooLarge(bytesMax: number): Failure {
  return fail("request_too_large", `The request body is larger than the limit of ${bytesMax} bytes.`);
}

/** The token of `Authorization: Bearer <token>` (also the `x-api-key` header), or null. */
export function bearerToken(request: Request): string | null {
  return presentedKey(request.headers.get("authorization"), request.headers.get("x-api-key"));
}

/** The key of an `Authorization: Bearer <token>` value, else of an `x-api-key` value, or null. */
export function presentedKey(authorization: string | null | undefined, apiKey: string | null | undefined = null): string | null {
  if (authorization) {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
    return match ? match[1]! : null;
  }
  return apiKey || null;
}

/** What the caller presented, for admission (src/admission): key, browser origin, residency. */
export function credentialsOf(request: Request): Credentials {
  return { key: bearerToken(request), origin: request.headers.get("origin"), residency: request.headers.get("x-darvaze-residency") };
}
