/**
 * Which URLs an upstream may make the gateway fetch (an image it generated), and where to connect.
 *
 *   the backend's own origin (http or https) → fetched as configured: operators may run backends
 *       on private hosts (in-country GPU servers), and the backend already sees the gateway.
 *   any other URL → only `https`, and only when its host is, or resolves only to, public addresses:
 *       no loopback, private, link-local, CGNAT, multicast, documentation or reserved range, in
 *       IPv4, IPv6, or an IPv4 address carried inside IPv6. The connection goes to the address that
 *       was checked (the host name is sent as Host and TLS server name), so a second DNS answer
 *       cannot swap in a private one (DNS rebinding).
 *   `data:` → decoded in-process (no connection); it carries the bytes the backend already sent.
 *   every other scheme (`file:`, `ftp:`, `blob:` …) → refused.
 *
 * Redirects are followed by the caller one hop at a time, each hop judged here again.
 */
import { lookup as dnsLookup } from "node:dns/promises";
import { isIP } from "node:net";
import { inBlock, ipv4ToNumber, ipv6ToBigInt } from "../addresses.ts";

/** A host name's addresses, as `dns.lookup(host, { all: true })` gives them. */
export type Lookup = (hostname: string) => Promise<{ address: string; family: number }[]>;

export const systemLookup: Lookup = (hostname) => dnsLookup(hostname, { all: true, verbatim: true });

/** Where to connect for one hop, or why not. */
export type FileTarget = { url: string; headers: Record<string, string>; tls?: { serverName: string } } | { refused: string };

export interface FilePolicy {
  /** The backend's base URL (from the pools file): its origin is trusted as configured. */
  backendUrl: string;
  lookup: Lookup;
}

/**
 * Judges one URL of a file an upstream pointed to (see the module comment).
 * @example await fileTarget(new URL("file:///etc/passwd"), policy) // { refused: "file: URLs are not fetched" }
 */
export async function fileTarget(url: URL, policy: FilePolicy): Promise<FileTarget> {
  if (isWebUrl(url) && url.origin === new URL(policy.backendUrl).origin) return { url: url.href, headers: {} };
  if (url.protocol !== "https:") return { refused: `${url.protocol} URLs are not fetched (only https, or the backend's own origin)` };
  const host = url.hostname.replace(/^\[|\]$/g, "");
  if (isIP(host)) return isPublicAddress(host) ? { url: url.href, headers: {} } : { refused: "the URL's address is not a public one" };
  const addresses = await policy.lookup(host);
  if (addresses.length === 0) return { refused: "the URL's host has no address" };
  // One private answer among public ones is refused too: which one the connection would get is not ours to know.
  if (!addresses.every((a) => isPublicAddress(a.address)))
    return { refused: "the URL's host resolves to an address that is not a public one" };
  const pinned = new URL(url.href);
  const chosen = addresses[0]!;
  pinned.hostname = chosen.family === 6 ? `[${chosen.address}]` : chosen.address;
  return { url: pinned.href, headers: { host: url.host }, tls: { serverName: host } };
}

function isWebUrl(url: URL): boolean {
  return url.protocol === "http:" || url.protocol === "https:";
}

/**
 * Whether an address is a public unicast one (IANA's special-purpose registries subtracted).
 * IPv4 inside IPv6 (mapped `::ffff:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`) is judged by its IPv4.
 * @example isPublicAddress("169.254.169.254") // false
 */
export function isPublicAddress(address: string): boolean {
  const bare = address.replace(/%.*$/, ""); // a zone index (fe80::1%eth0) names an interface, not an address
  if (isIP(bare) === 4) return isPublicIpv4(ipv4ToNumber(bare));
  if (isIP(bare) === 6) return isPublicIpv6(ipv6ToBigInt(bare));
  return false;
}

/** IPv4 ranges that are not public: [first address, prefix length]. */
const IPV4_NOT_PUBLIC: [string, number][] = [
  ["0.0.0.0", 8], // "this network", the unspecified address
  ["10.0.0.0", 8], // private
  ["100.64.0.0", 10], // carrier-grade NAT
  ["127.0.0.0", 8], // loopback
  ["169.254.0.0", 16], // link-local (cloud metadata services live here)
  ["172.16.0.0", 12], // private
  ["192.0.0.0", 24], // IETF protocol assignments
  ["192.0.2.0", 24], // documentation
  ["192.88.99.0", 24], // 6to4 relay anycast (deprecated)
  ["192.168.0.0", 16], // private
  ["198.18.0.0", 15], // benchmarking
  ["198.51.100.0", 24], // documentation
  ["203.0.113.0", 24], // documentation
  ["224.0.0.0", 4], // multicast
  ["240.0.0.0", 4], // reserved, and the broadcast address
];
const IPV4_RANGES = IPV4_NOT_PUBLIC.map(([first, bits]) => ({ first: ipv4ToNumber(first), bits }));

function isPublicIpv4(value: number): boolean {
  return !IPV4_RANGES.some(({ first, bits }) => value >>> (32 - bits) === first >>> (32 - bits));
}

/** Global unicast is 2000::/3; inside it, these are not public. */
const IPV6_GLOBAL_NOT_PUBLIC: [string, number][] = [
  ["2001::", 23], // IETF protocol assignments (Teredo, ORCHID, benchmarking …)
  ["2001:db8::", 32], // documentation
  ["2002::", 16], // 6to4: an IPv4 address hidden in the prefix
  ["3fff::", 20], // documentation
];
const IPV6_RANGES = IPV6_GLOBAL_NOT_PUBLIC.map(([first, bits]) => ({ first: ipv6ToBigInt(first), bits }));
const IPV6_GLOBAL = { first: ipv6ToBigInt("2000::"), bits: 3 };
/** Prefixes whose last 32 bits are an IPv4 address the packet really goes to. */
const IPV6_CARRYING_IPV4 = [
  { first: ipv6ToBigInt("::ffff:0:0"), bits: 96 }, // IPv4-mapped
  { first: ipv6ToBigInt("64:ff9b::"), bits: 96 }, // NAT64, well-known prefix
];

function isPublicIpv6(value: bigint): boolean {
  if (IPV6_CARRYING_IPV4.some((range) => inBlock(value, range))) return isPublicIpv4(Number(value & 0xffff_ffffn));
  // Outside 2000::/3: loopback, unspecified, unique local, link-local, multicast, discard, reserved.
  if (!inBlock(value, IPV6_GLOBAL)) return false;
  return !IPV6_RANGES.some((range) => inBlock(value, range));
}
