/**
 * The client address that sign-in limits count. An IPv6 customer is given a whole /64 (a host
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
  const bare = address.replace(/%.*$/, ""); // a zone index names an interface, not an address
  if (isIP(bare) !== 6) return bare;
  const value = ipv6ToBigInt(bare);
  if (value >> 32n === IPV4_MAPPED_PREFIX) {
    const v4 = Number(value & 0xffff_ffffn);
    return [v4 >>> 24, (v4 >>> 16) & 255, (v4 >>> 8) & 255, v4 & 255].join(".");
  }
  const groups = [48n, 32n, 16n, 0n].map((shift) => ((value >> (64n + shift)) & 0xffffn).toString(16));
  return `${groups.join(":")}::/64`;
}
