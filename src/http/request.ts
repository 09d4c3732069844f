/** What every /v1 and /admin handler needs from a raw request: ids, body, credentials, origin. */
import { fail, type Failure } from "../errors.ts";
import { newId } from "../ids.ts";
import type { Credentials } from "../admission/admission.ts";

export function newRequestId(): string {
  return newId("req");
}

/** The body as JSON, within `bytesMax`; 413 above it, 400 for malformed JSON. */
export async function readJsonBody(request: Request, bytesMax: number): Promise<unknown | Failure> {
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
  return parseJsonText(text);
}

/** A body's text as JSON, or the 400 `invalid_json` a client expects. */
export function parseJsonText(text: string): unknown | Failure {
  if (text.length === 0) return fail("invalid_json", "The request body is empty; send a JSON object.");
  try {
    return JSON.parse(text) as unknown;
  } catch (error) {
    return fail("invalid_json", `The request body is not valid JSON: ${(error as Error).message}`);
  }
}

function tooLarge(bytesMax: number): Failure {
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
