/** What every /v1 and /admin handler needs from a raw request: ids, body, credentials, origin. */
import type { Credentials } from "../admission/admission.ts";
import { isFailure, type Failure } from "../errors.ts";
import { type JsonLimits, type OperationInput, parseForm, parseJsonText, presentedKey, tooLarge } from "../operations/input.ts";

/** An HTTP request as an operation's input. */
export function httpInput(request: Request, requestId: string, publicUrl: string | undefined): OperationInput {
  return {
    requestId,
    credentials: credentialsOf(request),
    json: (limits) => readJsonBodyText(request, limits),
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

/**
 * The body as JSON, within `limits` (413 above its size, 400 for malformed or too deep JSON), and the text it was
 * parsed from: chat's prompt bound measures that text's UTF-8 bytes (only when it needs them)
 * instead of serializing the body again. The value stays wrapped: a client's body may look like a failure.
 */
export async function readJsonBodyText(request: Request, limits: JsonLimits): Promise<{ value: unknown; text: string } | Failure> {
  const { bytesMax } = limits;
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
  const parsed = parseJsonText(text, limits.depthMax);
  return isFailure(parsed) ? parsed : { value: parsed.value, text };
}

/** The token of `Authorization: Bearer <token>` (also the `x-api-key` header), or null. */
export function bearerToken(request: Request): string | null {
  return presentedKey(request.headers.get("authorization"), request.headers.get("x-api-key"));
}

/** What tells a request's client address: Bun's server, noted as each request arrives (app.ts). */
type AddressSource = { requestIP(request: Request): { address: string } | null };
const addressSources = new WeakMap<Request, AddressSource>();

/** Notes the server a request came through, for its client address (asked only for a key restricted to addresses). */
export function noteArrival(request: Request, server: AddressSource | null): void {
  if (server) addressSources.set(request, server);
}

/** The client's address (the socket's), or null when the request did not come through a server. */
export function clientAddress(request: Request): string | null {
  return addressSources.get(request)?.requestIP(request)?.address ?? null;
}

/** What the caller presented, for admission (src/admission): key, browser origin, residency, the socket's address. */
export function credentialsOf(request: Request): Credentials {
  return {
    key: bearerToken(request),
    origin: request.headers.get("origin"),
    residency: request.headers.get("x-darvaze-residency"),
    address: () => clientAddress(request),
  };
}
