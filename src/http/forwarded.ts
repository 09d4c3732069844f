/**
 * The client behind trusted proxies (TRUSTED_PROXIES). A proxy appends the address of its own
 * peer to `X-Forwarded-For`, so the entries a trusted proxy wrote are at the right, and whatever
 * a client sent stands left of them. From a trusted TCP peer the client is therefore the
 * rightmost entry that is not a trusted proxy (walking from the right, skipping trusted ones);
 * from any other peer the headers are ignored and the client is the peer. Only the header's last
 * FORWARDED_FOR_BYTES_MAX bytes and FORWARDED_FOR_ENTRIES_MAX entries are read.
 *
 * In full, with the reasoning: docs/internals.md#the-clients-address-behind-proxies.
 */
import { type Address, type Block, inBlock, parseAddress, parseBlock } from "../addresses.ts";

/** Bytes of `X-Forwarded-For` read, from its right end. */
export const FORWARDED_FOR_BYTES_MAX = 2048;
/** Entries of `X-Forwarded-For` read, from the right: more proxies than any real chain has. */
export const FORWARDED_FOR_ENTRIES_MAX = 16;

const PORT_MAX = 65_535;

export type Scheme = "http" | "https";

/** The trusted proxies, compiled once from TRUSTED_PROXIES. */
export interface TrustedProxies {
  trusts(address: Address): boolean;
  /** None trusted (the default): the headers are never read. */
  readonly none: boolean;
}

/** The proxies named by TRUSTED_PROXIES (addresses and CIDR blocks, already validated). */
export function trustedProxies(blocks: readonly string[]): TrustedProxies {
  const compiled = blocks.map(parseBlock).filter((block): block is Block => block !== null);
  return { trusts: (address) => compiled.some((block) => inBlock(address.value, block)), none: compiled.length === 0 };
}

/** One `X-Forwarded-For` entry as an address (brackets and a port allowed), or null. */
export function entryAddress(entry: string): Address | null {
  const text = entry.trim();
  if (text.includes("%")) return null; // a zone index names the sender's interface: no client sends one
  const bracketed = /^\[([0-9A-Fa-f:.]+)\](?::(\d{1,5}))?$/.exec(text);
  const withPort = bracketed ? null : /^(\d{1,3}(?:\.\d{1,3}){3}):(\d{1,5})$/.exec(text);
  const port = (bracketed ?? withPort)?.[2];
  if (port !== undefined && Number(port) > PORT_MAX) return null;
  if (bracketed) return bracketed[1]!.includes(":") ? parseAddress(bracketed[1]!) : null;
  return parseAddress(withPort ? withPort[1]! : text);
}

/** The header's entries from the right, within the bounds (a cut first entry dropped). */
function rightmostEntries(header: string): string[] {
  const cut = header.length > FORWARDED_FOR_BYTES_MAX;
  const entries = header.slice(-FORWARDED_FOR_BYTES_MAX).split(",");
  if (cut) entries.shift();
  return entries.reverse().slice(0, FORWARDED_FOR_ENTRIES_MAX);
}

/**
 * The client's address: the peer's, or behind trusted proxies the rightmost untrusted entry of
 * `X-Forwarded-For`. Null only when the peer is unknown (no socket: a request handled in process).
 * @example clientAddress("10.0.0.2", "203.0.113.9, 10.0.0.3", trustedProxies(["10.0.0.0/8"])) // "203.0.113.9"
 */
export function clientAddress(peer: string | null, forwardedFor: string | null, proxies: TrustedProxies): string | null {
  if (peer === null) return null;
  const from = parseAddress(peer);
  if (from === null) return peer;
  if (forwardedFor === null || proxies.none || !proxies.trusts(from)) return from.text;
  let nearest = from;
  for (const entry of rightmostEntries(forwardedFor)) {
    const address = entryAddress(entry);
    if (address === null) break;
    if (!proxies.trusts(address)) return address.text;
    nearest = address;
  }
  return nearest.text;
}

/** The scheme the client used, as a trusted peer's `X-Forwarded-Proto` says; null: the connection's own. */
export function forwardedScheme(peer: string | null, forwardedProto: string | null, proxies: TrustedProxies): Scheme | null {
  if (peer === null || forwardedProto === null || proxies.none) return null;
  const from = parseAddress(peer);
  if (from === null || !proxies.trusts(from)) return null;
  const scheme = forwardedProto.trim().toLowerCase();
  return scheme === "http" || scheme === "https" ? scheme : null;
}
