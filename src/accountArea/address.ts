/**
 * The client address that sign-in limits count. An IPv6 customer is given a whole /64 (a host
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
  const groups = [48n, 32n, 16n, 0n].map((shift) => ((parsed.value >> (64n + shift)) & 0xffffn).toString(16));
  return `${groups.join(":")}::/64`;
}
