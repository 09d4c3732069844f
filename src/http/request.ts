/** What every /v1 and /admin handler needs from a raw request: ids, body, credentials, origin. */
import { fail, isFailure, type Failure } from "../errors.ts";
import { newId } from "../ids.ts";

export function newRequestId(): string {
  return newId("req");
}

/** The body as JSON, within `bytesMax`; 413 above it, 400 for malformed JSON. */
export async function readJsonBody(request: Request, bytesMax: number): Promise<unknown | Failure> {
  const read = await readJsonBodyText(request, bytesMax);
  return isFailure(read) ? read : read.value;
}

/**
 * The body as JSON and the text it was parsed from: chat's prompt bound measures that text's
 * UTF-8 bytes (only when it needs them) instead of serializing the body again.
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
  if (text.length === 0) return fail("invalid_json", "The request body is empty; send a JSON object.");
  try {
    return { value: JSON.parse(text) as unknown, text };
  } catch (error) {
    return fail("invalid_json", `The request body is not valid JSON: ${(error as Error).message}`);
  }
}

function tooLarge(bytesMax: number): Failure {
  return fail("request_too_large", `The request body is larger than the limit of ${bytesMax} bytes.`);
}

/** The token of `Authorization: Bearer <token>` (also the `x-api-key` header), or null. */
export function bearerToken(request: Request): string | null {
  const header = request.headers.get("authorization");
  if (header) {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    return match ? match[1]! : null;
  }
  return request.headers.get("x-api-key");
}

/** A request from a browser page carries Origin; keys are for servers unless the origin is allowed. */
export function checkOrigin(request: Request, allowed: readonly string[]): Failure | null {
  const origin = request.headers.get("origin");
  if (origin === null || allowed.includes(origin)) return null;
  return fail(
    "origin_not_allowed",
    "Darvaze API keys are for servers only: this request came from a browser page (it carries an Origin header). " +
      "Call the API from your backend, or ask the operator to allow this origin.",
  );
}
