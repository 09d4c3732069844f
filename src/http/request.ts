/** What every /v1 and /admin handler needs from a raw request: ids, body, credentials, origin. */
import type { Credentials } from "../admission/caller.ts";
import type { Failure } from "../errors.ts";
import { clientAddress, forwardedScheme, type TrustedProxies } from "./forwarded.ts";
import {
  type JsonBody,
  type JsonLimits,
  type OperationInput,
  parseForm,
  parseJsonText,
  presentedKey,
  tooLarge,
} from "../operations/input.ts";

/**
 * An HTTP request as an operation's input. `origin` is read when first asked for (only links to
 * the gateway's own media need it), so a chat request parses no URL and asks no socket for it.
 */
export function httpInput(request: Request, requestId: string, publicUrl: string | undefined): OperationInput {
  let origin: string | undefined;
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
    get origin() {
      origin ??= (publicUrl ?? requestOrigin(request)).replace(/\/+$/, "");
      return origin;
    },
    signal: request.signal,
  };
}

/**
 * The body as JSON, within `limits` (413 above its size, 400 for malformed or too deep JSON), and the text it was
 * parsed from: chat's prompt bound measures that text's UTF-8 bytes (only when it needs them)
 * instead of serializing the body again. The value stays wrapped: a client's body may look like a failure.
 */
export async function readJsonBodyText(request: Request, limits: JsonLimits): Promise<JsonBody | Failure> {
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
  return parseJsonText(text, limits.depthMax);
}

/** The token of `Authorization: Bearer <token>` (also the `x-api-key` header), or null. */
export function bearerToken(request: Request): string | null {
  return presentedKey(request.headers.get("authorization"), request.headers.get("x-api-key"));
}

/** What tells a request's client address: Bun's server, noted as each request arrives (app.ts), and the proxies it trusts. */
type AddressSource = { requestIP(request: Request): { address: string } | null };
interface Arrival {
  server: AddressSource;
  proxies: TrustedProxies;
}
const arrivals = new WeakMap<Request, Arrival>();

/** Notes the server each request came through, for its client address (read only when a consumer asks). */
export function arrivalNoter(proxies: TrustedProxies): (request: Request, server: AddressSource | null) => void {
  let arrival: Arrival | null = null;
  return (request, server) => {
    if (!server) return;
    if (arrival?.server !== server) arrival = { server, proxies };
    arrivals.set(request, arrival);
  };
}

function peerOf(request: Request, arrival: Arrival): string | null {
  return arrival.server.requestIP(request)?.address ?? null;
}

/**
 * The client's address, the one every consumer uses (key allowlists, sign-in limits, sessions,
 * access lines): the TCP peer's, or behind a trusted proxy the one it forwarded (forwarded.ts).
 * Null when the request came through no socket.
 */
export function clientAddressOf(request: Request): string | null {
  const arrival = arrivals.get(request);
  if (!arrival) return null;
  return clientAddress(peerOf(request, arrival), request.headers.get("x-forwarded-for"), arrival.proxies);
}

/** The origin the client asked at: the request's, with the scheme a trusted proxy forwarded (`X-Forwarded-Proto`). */
export function requestOrigin(request: Request): string {
  const url = new URL(request.url);
  const arrival = arrivals.get(request);
  const scheme = arrival ? forwardedScheme(peerOf(request, arrival), request.headers.get("x-forwarded-proto"), arrival.proxies) : null;
  if (scheme !== null) url.protocol = scheme;
  return url.origin;
}

/** What the caller presented, for admission (src/admission): key, browser origin, residency, the client's address. */
export function credentialsOf(request: Request): Credentials {
  return {
    key: bearerToken(request),
    origin: request.headers.get("origin"),
    residency: request.headers.get("x-darvaze-residency"),
    address: () => clientAddressOf(request),
  };
}

/** A path segment decoded from percent-encoding, or null when it is not valid (`%ZZ`, overlong UTF-8). */
export function decodedSegment(raw: string): string | null {
  try {
    return decodeURIComponent(raw);
  } catch {
    return null;
  }
}

/**
 * The route's path parameters decoded once, in place: Elysia decodes the named ones (null when it
 * cannot), never the wildcard. A failure when one is not valid percent-encoding. Handlers read
 * `params` as given and never decode again (`/v1/models/a%25` is the model `a%`).
 */
export function decodeParams(params: Record<string, string | null | undefined>): Failure | null {
  for (const [name, value] of Object.entries(params)) {
    const decoded = name === "*" && typeof value === "string" ? decodedSegment(value) : value;
    if (decoded === null)
      return { code: "invalid_request", message: "The request path is not valid percent-encoded UTF-8.", param: "path" };
    if (decoded?.includes("\u0000")) return nulRefused("path");
    params[name] = decoded;
  }
  return null;
}

/** A NUL (U+0000) is in no id, name or filter, and PostgreSQL's text cannot hold one: refused where it comes in. */
export function nulRefused(param: string): Failure {
  return { code: "invalid_request", message: `The ${param} contains a NUL character (U+0000), which no field accepts.`, param };
}

/** The query string's failure: a NUL in a name or value. */
export function queryRefused(url: string): Failure | null {
  const at = url.indexOf("?");
  if (at < 0 || !/%00/.test(url.slice(at))) return null;
  for (const [name, value] of new URL(url).searchParams)
    if (name.includes("\u0000") || value.includes("\u0000")) return nulRefused("query");
  return null;
}

/** The first string holding a NUL in a parsed JSON value, by its path; null when none does. */
export function nulPath(value: unknown, path = ""): string | null {
  if (typeof value === "string") return value.includes("\u0000") ? path || "body" : null;
  if (value === null || typeof value !== "object") return null;
  for (const [k, v] of Object.entries(value)) {
    const at = nulPath(k, path) ?? nulPath(v, path ? `${path}.${k}` : k);
    if (at !== null) return at;
  }
  return null;
}
