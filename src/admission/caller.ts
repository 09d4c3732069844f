/**
 * The caller: one rule for every operation and every transport, which reads no HTTP `Request`
 * (callers hand it the credentials they received). A browser origin is refused unless allowed,
 * then the key, then residency: the request's `x-darvaze-residency` or the key's own setting,
 * either one keeps the request in the country.
 */
import type { Region } from "../../actors/pool/pool.ts";
import { fail, type Failure } from "../errors.ts";
import type { KeyRecord } from "../keys/store.ts";
import { addressRefusal } from "../keys/restrictions.ts";
import type { GatewayDeps } from "./deps.ts";

/** What a caller presented, read from HTTP or NATS headers alike. */
export interface Credentials {
  /** The API key (`Authorization: Bearer …` or `x-api-key`), or null. */
  key: string | null;
  /** A browser page's `Origin`, or null for a server. */
  origin: string | null;
  /** `x-darvaze-residency`, or null. */
  residency: string | null;
  /** The client's address, asked only for a key restricted to addresses; absent: unknown (NATS). */
  address?: () => string | null;
  /**
   * A batch line (set by src/batches/line.ts alone, never read from a request's headers): it takes
   * none of the key's or the account's live slots and rates (the batch worker bounds lines itself),
   * while its wallet hold and the key's monthly cap count it as any request.
   */
  batch?: true;
}

/** The caller, once its key is known: where its request may be served. */
export interface Caller {
  key: KeyRecord;
  /** `in-country` when the request or the key requires it; undefined: anywhere. */
  region: Region | undefined;
  /** A batch line's (Credentials.batch): admitted outside the key's live slots and rates. */
  batch?: true;
}

const KEYS_UNAVAILABLE = fail("service_unavailable", "The API key cannot be checked right now; try again shortly.", { retryAfterS: 1 });

/**
 * The key and the residency: one rule for every operation and every transport.
 * @example const caller = await enter(deps, { key: "sk-dvz-…", origin: null, residency: "in-country" });
 */
export async function enter(deps: Pick<GatewayDeps, "env" | "keys">, credentials: Credentials): Promise<Caller | Failure> {
  const refused = originRefusal(credentials.origin, deps.env.ALLOWED_ORIGINS);
  if (refused) return refused;
  // The database being away (a key not yet cached) is a 503 to retry, not an internal error.
  const key = await deps.keys.authenticate(credentials.key).catch(() => KEYS_UNAVAILABLE);
  if ("code" in key) return key;
  // Bun's requestIP builds a fresh address object: asked only when the key names addresses.
  const outside = key.allowedIps === null ? null : addressRefusal(key, credentials.address?.() ?? null);
  if (outside) return outside;
  const region = residencyOf(credentials.residency, key);
  if (region !== undefined && typeof region !== "string") return region;
  return credentials.batch ? { key, region, batch: true } : { key, region };
}

/** A browser page carries Origin; keys are for servers unless the operator allows the origin. */
export function originRefusal(origin: string | null, allowed: readonly string[]): Failure | null {
  if (origin === null || allowed.includes(origin)) return null;
  return fail(
    "origin_not_allowed",
    "Darvaze API keys are for servers only: this request came from a browser page (it carries an Origin header). " +
      "Call the API from your backend, or ask the operator to allow this origin.",
  );
}

/** The request's header or the key's setting: either one keeps the request in the country. */
export function residencyOf(header: string | null, key: Pick<KeyRecord, "residency">): Region | undefined | Failure {
  if (header !== null && header !== "in-country") {
    return fail("invalid_request", "x-darvaze-residency must be `in-country` when set.", { param: "x-darvaze-residency" });
  }
  return header === "in-country" || key.residency === "in-country" ? "in-country" : undefined;
}
