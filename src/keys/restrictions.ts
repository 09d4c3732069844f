/**
 * A key's restrictions: the models it may call and the client addresses it may be used from
 * (IPv4 and IPv6 addresses or CIDR blocks). Null: no restriction. Checked in admission on every
 * node from the cached key record, which a change reaches as a revocation does (store.ts).
 */
import { z } from "zod";
import { inBlock, isCidr, parseAddress, parseBlock } from "../addresses.ts";
import { fail, type Failure } from "../errors.ts";

/** Models one key's allowlist may name. */
export const KEY_ALLOWED_MODELS_MAX = 100;
/** Addresses or blocks one key's address allowlist may name. */
export const KEY_ALLOWED_IPS_MAX = 100;

/** The request body's allowlists (admin API, console, gw): null clears one. */
export const keyRestrictionFields = {
  allowed_models: z.array(z.string().min(1).max(200)).max(KEY_ALLOWED_MODELS_MAX).nullish(),
  allowed_ips: z
    .array(z.string().refine(isCidr, "must be an IPv4 or IPv6 address or CIDR block, e.g. 203.0.113.0/24 or 2001:db8::/32"))
    .max(KEY_ALLOWED_IPS_MAX)
    .nullish(),
};

/**
 * Whether `address` is inside one of `blocks` (each an address or CIDR block).
 * @example addressAllowed("203.0.113.7", ["203.0.113.0/24"]) // true
 * @example addressAllowed("::ffff:203.0.113.7", ["203.0.113.0/24"]) // true
 */
export function addressAllowed(address: string, blocks: readonly string[]): boolean {
  const parsed = parseAddress(address);
  if (parsed === null) return false;
  return blocks.some((text) => {
    const block = parseBlock(text);
    return block !== null && inBlock(parsed.value, block);
  });
}

/** The refusal of a model the key's allowlist does not name (by its catalog id or an alias), or null. */
export function modelRefusal(
  key: { allowedModels: readonly string[] | null },
  model: { id: string; aliases: readonly string[] },
): Failure | null {
  const allowed = key.allowedModels;
  if (allowed === null || allowed.includes(model.id) || model.aliases.some((alias) => allowed.includes(alias))) return null;
  const modelId = model.id;
  return fail(
    "permission_denied",
    `This API key may not use the model \`${modelId}\`; it is restricted to: ${allowed.join(", ") || "no model"}.`,
    { param: "model" },
  );
}

/** The refusal of a client address outside the key's allowlist (null: the address is unknown), or null. */
export function addressRefusal(key: { allowedIps: readonly string[] | null }, address: string | null): Failure | null {
  if (key.allowedIps === null) return null;
  if (address !== null && addressAllowed(address, key.allowedIps)) return null;
  return fail(
    "permission_denied",
    address === null
      ? "This API key is restricted to certain client addresses, and this request's address cannot be checked."
      : `This API key may not be used from ${address}: it is restricted to certain client addresses.`,
  );
}
