/**
 * The client address that sign-in limits count, and the range it belongs to. An IPv6 customer is given a whole /64 (a host
 * there picks any of 2⁶⁴ addresses, and privacy addresses change by themselves), so IPv6 counts
 * per /64; IPv4 counts per address, and IPv4 carried in IPv6 (`::ffff:a.b.c.d`, what a
 * dual-stack socket reports) as that IPv4 address.
 */
import { isIP } from "node:net";
import { ipv6ToBigInt } from "../providers/fileUrl.ts";

const IPV4_MAPPED_PREFIX = 0xffffn;

/**
 * @example addressBucket("2001:db8:1:2:aaaa::1") // "2001:db8:1:2::/64"
 * @example addressBucket("::ffff:10.0.0.1") // "10.0.0.1"
 */
export function addressBucket(address: string): string {
  const parsed = parseAddress(address);
  return parsed.kind === "ipv6" ? `${ipv6Groups(parsed.value, 4)}::/64` : parsed.text;
}

/**
 * The network a client address belongs to, as the SMS budget's range ceilings count it: an IPv4
 * /24, an IPv6 /48 (what a site or a provider's customer is usually given: 65,536 /64s).
 *
 * @example addressRange("203.0.113.77") // "203.0.113.0/24"
 * @example addressRange("2001:db8:1:2::1") // "2001:db8:1::/48"
 */
export function addressRange(address: string): string {
  const parsed = parseAddress(address);
  if (parsed.kind === "ipv6") return `${ipv6Groups(parsed.value, 3)}::/48`;
  if (isIP(parsed.text) !== 4) return parsed.text;
  return `${parsed.text.split(".").slice(0, 3).join(".")}.0/24`;
}

type Parsed = { kind: "ipv6"; value: bigint } | { kind: "other"; text: string };

/** IPv4 (also as carried in IPv6) as its dotted text, IPv6 as its value, anything else as it is. */
function parseAddress(address: string): Parsed {
  const bare = address.replace(/%.*$/, ""); // a zone index names an interface, not an address
  if (isIP(bare) !== 6) return { kind: "other", text: bare };
  const value = ipv6ToBigInt(bare);
  if (value >> 32n !== IPV4_MAPPED_PREFIX) return { kind: "ipv6", value };
  const v4 = Number(value & 0xffff_ffffn);
  return { kind: "other", text: [v4 >>> 24, (v4 >>> 16) & 255, (v4 >>> 8) & 255, v4 & 255].join(".") };
}

/** The first `count` 16-bit groups of an IPv6 address, in hex, joined by colons. */
function ipv6Groups(value: bigint, count: number): string {
  return Array.from({ length: count }, (_, i) => ((value >> BigInt(112 - 16 * i)) & 0xffffn).toString(16)).join(":");
}
