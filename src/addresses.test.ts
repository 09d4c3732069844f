import { expect, test } from "bun:test";
import { isIP } from "node:net";
import fc from "fast-check";
import { inBlock, ipv6ToBigInt, parseAddress, parseBlock } from "./addresses.ts";

test("parseAddress: IPv4-mapped IPv6 as IPv4, the zone index dropped, anything else null", () => {
  expect(parseAddress("::ffff:10.0.0.1")).toEqual(parseAddress("10.0.0.1"));
  expect(parseAddress("::FFFF:a00:1")?.text).toBe("10.0.0.1");
  expect(parseAddress("fe80::1%eth0")?.text).toBe("fe80::1");
  expect(parseAddress("1:0:0:1:0:0:0:1")?.text).toBe("1:0:0:1::1");
  expect(parseAddress("0:0:0:0:0:0:0:0")?.text).toBe("::");
  for (const bad of ["", "unknown", "10.0.0", "10.0.0.1/8", "::g"]) expect(parseAddress(bad)).toBeNull();
});

test("property: IPv6 is written as RFC 5952 does (the WHATWG URL parser's form) and reads back as the same address", () => {
  fc.assert(
    fc.property(fc.ipV6(), (address) => {
      const parsed = parseAddress(address)!;
      expect(parseAddress(parsed.text)!.value).toBe(parsed.value);
      // Some forms with a dotted tail the URL parser refuses (`::0:0:0:0:0.0.0.0`); IPv4-mapped ones are written as IPv4.
      if (parsed.value >> 32n !== 0xffffn && URL.canParse(`http://[${address}]/`))
        expect(parsed.text).toBe(new URL(`http://[${address}]/`).hostname.slice(1, -1));
    }),
    { numRuns: 2_000 },
  );
});

test("parseBlock and inBlock: IPv4 blocks hold IPv4-mapped addresses too", () => {
  const block = parseBlock("203.0.113.0/24")!;
  expect(inBlock(parseAddress("::ffff:203.0.113.7")!.value, block)).toBe(true);
  expect(inBlock(parseAddress("203.0.114.7")!.value, block)).toBe(false);
  expect(inBlock(parseAddress("2001:db8::1")!.value, parseBlock("::/0")!)).toBe(true);
  expect(parseBlock("10.0.0.0/33")).toBeNull();
});

test("property: parseAddress takes what net.isIP takes, IPv4 at the value of its IPv4-mapped IPv6", () => {
  fc.assert(
    fc.property(fc.ipV4(), (a) => expect(parseAddress(a)!.value).toBe(ipv6ToBigInt(`::ffff:${a}`))),
    { numRuns: 2_000 },
  );
  const near = fc.oneof(
    fc.string({ unit: fc.constantFrom("0", "1", "2", "5", "9", ".", ":", "f", "%"), maxLength: 16 }),
    fc.ipV4Extended(),
    fc.string({ maxLength: 16 }),
  );
  fc.assert(
    fc.property(near, (a) => expect(parseAddress(a) !== null).toBe(isIP(a.replace(/%.*$/, "")) !== 0)),
    { numRuns: 5_000 },
  );
});
