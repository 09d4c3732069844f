/**
 * Client addresses and address blocks (IPv4 and IPv6, CIDR), as key allowlists and trusted
 * proxies name them. Every address is compared as one 128-bit number, IPv4 as IPv4-mapped IPv6
 * (`::ffff:a.b.c.d`, what a dual-stack socket reports), so `10.0.0.1` and `::ffff:10.0.0.1` are
 * one address everywhere.
 */
import { isIP } from "node:net";

const IPV4_MAPPED_PREFIX = 0xffffn;
const IPV4_MAPPED_BASE = IPV4_MAPPED_PREFIX << 32n;
/** Dotted IPv4 as net.isIP takes it: four decimal octets, no leading zeros. */
const OCTET = "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]\\d|\\d)";
const IPV4 = new RegExp(`^${OCTET}\\.${OCTET}\\.${OCTET}\\.${OCTET}$`);

function ipv4Of(octets: RegExpExecArray): number {
  return ((Number(octets[1]) << 24) >>> 0) + (Number(octets[2]) << 16) + (Number(octets[3]) << 8) + Number(octets[4]);
}

/** An address in one canonical text (IPv4 dotted, IPv4-mapped IPv6 as IPv4, IPv6 compressed as RFC 5952) and its value. */
export interface Address {
  text: string;
  value: bigint;
}

/** An address block: its first address's value and its prefix length over 128 bits. */
export interface Block {
  first: bigint;
  bits: number;
}

/** An IPv4 or IPv6 address, or a CIDR block of either, as given. */
export function isCidr(text: string): boolean {
  const [address, bits, extra] = text.split("/");
  if (extra !== undefined || !address) return false;
  const family = isIP(address);
  if (family === 0) return false;
  if (bits === undefined) return true;
  if (!/^\d{1,3}$/.test(bits)) return false;
  return Number(bits) <= (family === 4 ? 32 : 128);
}

/**
 * A bare address (a zone index dropped: it names an interface, not an address), or null.
 * @example parseAddress("::ffff:10.0.0.1")?.text // "10.0.0.1"
 * @example parseAddress("2001:DB8:0:0::1")?.text // "2001:db8::1"
 */
export function parseAddress(address: string): Address | null {
  // IPv4 first, without isIP or bigint parsing: the common case costs a regex (each look is per request).
  const v4 = IPV4.exec(address);
  if (v4) return { text: address, value: IPV4_MAPPED_BASE + BigInt(ipv4Of(v4)) };
  const bare = address.replace(/%.*$/, "");
  const family = isIP(bare);
  if (family === 4) return { text: bare, value: ipv6ToBigInt(`::ffff:${bare}`) };
  if (family !== 6) return null;
  const value = ipv6ToBigInt(bare);
  return { text: value >> 32n === IPV4_MAPPED_PREFIX ? ipv4Text(value) : ipv6Text(value), value };
}

/** A block as `isCidr` accepts it (an address alone is its own block), or null. */
export function parseBlock(block: string): Block | null {
  const [base, bits] = block.split("/");
  const first = parseAddress(base!);
  if (first === null || (bits !== undefined && !isCidr(block))) return null;
  return { first: first.value, bits: bits === undefined ? 128 : Number(bits) + (isIP(base!) === 4 ? 96 : 0) };
}

export function inBlock(value: bigint, block: Block): boolean {
  const shift = BigInt(128 - block.bits);
  return value >> shift === block.first >> shift;
}

function ipv4Text(value: bigint): string {
  const v4 = Number(value & 0xffff_ffffn);
  return [v4 >>> 24, (v4 >>> 16) & 255, (v4 >>> 8) & 255, v4 & 255].join(".");
}

/** RFC 5952: lower-case hex without leading zeros, the first longest run of two or more zero groups as `::`. */
function ipv6Text(value: bigint): string {
  const groups = Array.from({ length: 8 }, (_, i) => Number((value >> BigInt(112 - 16 * i)) & 0xffffn));
  let runStart = -1;
  let runLength = 1;
  for (let i = 0; i < 8; ) {
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > runLength) [runStart, runLength] = [i, j - i];
    i = j === i ? i + 1 : j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (runStart < 0) return hex.join(":");
  return `${hex.slice(0, runStart).join(":")}::${hex.slice(runStart + runLength).join(":")}`;
}

/** A valid dotted IPv4 address (net.isIP checked) as one 32-bit number. */
export function ipv4ToNumber(address: string): number {
  return address.split(".").reduce((n, octet) => n * 256 + Number(octet), 0);
}

/** A valid IPv6 address (net.isIP checked) as one 128-bit number; a dotted IPv4 tail is two groups. */
export function ipv6ToBigInt(address: string): bigint {
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(address);
  let text = address;
  if (dotted) {
    const v4 = ipv4ToNumber(dotted[1]!);
    text = `${address.slice(0, dotted.index)}${(v4 >>> 16).toString(16)}:${(v4 & 0xffff).toString(16)}`;
  }
  const [head, tail] = text.includes("::") ? text.split("::") : [text, null];
  const groupsOf = (part: string | null | undefined) => (part ? part.split(":") : []);
  const left = groupsOf(head);
  const right = groupsOf(tail);
  const groups = tail === null ? left : [...left, ...Array<string>(8 - left.length - right.length).fill("0"), ...right];
  return groups.reduce((n, group) => (n << 16n) | BigInt(parseInt(group, 16)), 0n);
}

const LOOPBACK_HOSTS = new Set(["127.0.0.1", "localhost", "[::1]"]);

/** Plain http to a loopback host: the only place a cleartext origin is acceptable (cookies, fetched files). */
export function insecureLoopback(origin: string): boolean {
  const url = new URL(origin);
  return url.protocol === "http:" && LOOPBACK_HOSTS.has(url.hostname);
}
