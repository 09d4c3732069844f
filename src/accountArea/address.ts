/**
 * The client address that sign-in limits count, and the range it belongs to. An IPv6 customer is given a whole /64 (a host
 * there picks any of 2⁶⁴ addresses, and privacy addresses change by themselves), so IPv6 counts
 * per /64; IPv4 counts per address, and IPv4 carried in IPv6 (`::ffff:a.b.c.d`, what a
 * dual-stack socket reports) as that IPv4 address.
 */
import { isIP } from "node:net";
import { parseAddress } from "../addresses.ts";

/**
 * @example addressBucket("2001:db8:1:2:aaaa::1") // "2001:db8:1:2::/64"
 * @example addressBucket("::ffff:10.0.0.1") // "10.0.0.1"
 */
export function addressBucket(address: string): string {
  const parsed = parseAddress(address);
  if (parsed === null) return address;
  if (isIP(parsed.text) !== 6) return parsed.text;
  return `${ipv6Groups(parsed.value, 4)}::/64`;
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
  if (parsed === null) return address;
  if (isIP(parsed.text) === 6) return `${ipv6Groups(parsed.value, 3)}::/48`;
  return `${parsed.text.split(".").slice(0, 3).join(".")}.0/24`;
}

/** The first `count` 16-bit groups of an IPv6 address, in hex, joined by colons. */
function ipv6Groups(value: bigint, count: number): string {
  return Array.from({ length: count }, (_, i) => ((value >> BigInt(112 - 16 * i)) & 0xffffn).toString(16)).join(":");
}
