import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { parseAddress } from "../addresses.ts";
import {
  clientAddress,
  entryAddress,
  FORWARDED_FOR_BYTES_MAX,
  FORWARDED_FOR_ENTRIES_MAX,
  forwardedScheme,
  trustedProxies,
} from "./forwarded.ts";

const proxies = trustedProxies(["10.0.0.0/8", "127.0.0.1", "2001:db8:aaaa::/48"]);

describe("clientAddress", () => {
  test("from a trusted peer: the rightmost entry that is not a trusted proxy", () => {
    expect(clientAddress("10.0.0.2", "203.0.113.9", proxies)).toBe("203.0.113.9");
    expect(clientAddress("10.0.0.2", "198.51.100.1, 203.0.113.9, 10.1.1.1, 127.0.0.1", proxies)).toBe("203.0.113.9");
    expect(clientAddress("127.0.0.1", "2001:DB8:1::0:7", proxies)).toBe("2001:db8:1::7");
    expect(clientAddress("::ffff:127.0.0.1", "::ffff:203.0.113.9", proxies)).toBe("203.0.113.9");
    expect(clientAddress("2001:db8:aaaa::1", "[2001:db8:1::7]:443, 10.0.0.3:8080", proxies)).toBe("2001:db8:1::7");
  });

  test("from any other peer, or with none trusted, the headers are ignored", () => {
    expect(clientAddress("203.0.113.5", "198.51.100.1", proxies)).toBe("203.0.113.5");
    expect(clientAddress("::ffff:203.0.113.5", "198.51.100.1", proxies)).toBe("203.0.113.5");
    expect(clientAddress("10.0.0.2", "198.51.100.1", trustedProxies([]))).toBe("10.0.0.2");
    expect(clientAddress("10.0.0.2", null, proxies)).toBe("10.0.0.2");
    expect(clientAddress(null, "198.51.100.1", proxies)).toBeNull();
  });

  test("a malformed entry stops the walk at the nearest address right of it", () => {
    expect(clientAddress("10.0.0.2", "203.0.113.9, bogus", proxies)).toBe("10.0.0.2");
    expect(clientAddress("10.0.0.2", "203.0.113.9, bogus, 10.0.0.3", proxies)).toBe("10.0.0.3");
    expect(clientAddress("10.0.0.2", "203.0.113.9,,10.0.0.3", proxies)).toBe("10.0.0.3");
    expect(clientAddress("10.0.0.2", "", proxies)).toBe("10.0.0.2");
    expect(clientAddress("10.0.0.2", "fe80::1%eth0", proxies)).toBe("10.0.0.2");
    expect(clientAddress("10.0.0.2", "203.0.113.9:99999", proxies)).toBe("10.0.0.2");
  });

  test("only trusted entries: the leftmost of them", () => {
    expect(clientAddress("10.0.0.2", "10.0.0.9, 127.0.0.1", proxies)).toBe("10.0.0.9");
  });

  test("bounded: a forged prefix of any length does not hide the client; a longer trusted chain than the bound ends at its last read entry", () => {
    const forged = Array.from({ length: 5_000 }, (_, i) => `198.51.100.${i % 250}`).join(", ");
    expect(forged.length).toBeGreaterThan(FORWARDED_FOR_BYTES_MAX);
    expect(clientAddress("10.0.0.2", `${forged}, 203.0.113.9, 10.0.0.3`, proxies)).toBe("203.0.113.9");
    const chain = Array.from({ length: FORWARDED_FOR_ENTRIES_MAX + 5 }, (_, i) => `10.0.1.${i}`);
    expect(clientAddress("10.0.0.2", ["203.0.113.9", ...chain].join(", "), proxies)).toBe(`10.0.1.5`);
  });
});

test("entryAddress: addresses with brackets and ports; anything else is malformed", () => {
  expect(entryAddress(" 203.0.113.9 ")?.text).toBe("203.0.113.9");
  expect(entryAddress("203.0.113.9:5000")?.text).toBe("203.0.113.9");
  expect(entryAddress("[::1]")?.text).toBe("::1");
  expect(entryAddress("[2001:db8::1]:443")?.text).toBe("2001:db8::1");
  expect(entryAddress("2001:0db8:0000:0000:0000:0000:0000:0001")?.text).toBe("2001:db8::1");
  expect(entryAddress("2001:db8:0:1:0:0:0:1")?.text).toBe("2001:db8:0:1::1");
  for (const bad of ["", "unknown", "[203.0.113.9]", "203.0.113", "203.0.113.256", "[::1", "::1]:80", "a.b.c.d", "1.2.3.4/8"]) {
    expect(entryAddress(bad)).toBeNull();
  }
});

test("forwardedScheme: a trusted peer's http or https; else the connection's own", () => {
  expect(forwardedScheme("10.0.0.2", "https", proxies)).toBe("https");
  expect(forwardedScheme("10.0.0.2", " HTTP ", proxies)).toBe("http");
  expect(forwardedScheme("203.0.113.5", "https", proxies)).toBeNull();
  expect(forwardedScheme("10.0.0.2", "https, http", proxies)).toBeNull();
  expect(forwardedScheme("10.0.0.2", "ftp", proxies)).toBeNull();
  expect(forwardedScheme("10.0.0.2", null, proxies)).toBeNull();
  expect(forwardedScheme("10.0.0.2", "https", trustedProxies([]))).toBeNull();
});

// Addresses inside and outside the trusted blocks, written every way a proxy writes them.
const octet = fc.integer({ min: 0, max: 255 });
const trustedV4 = fc.tuple(octet, octet, octet).map(([a, b, c]) => `10.${a}.${b}.${c}`);
const trustedV6 = fc
  .array(fc.integer({ min: 0, max: 0xffff }), { minLength: 5, maxLength: 5 })
  .map((g) => `2001:db8:aaaa:${g.map((n) => n.toString(16)).join(":")}`);
const trusted = fc.oneof(
  trustedV4,
  trustedV6,
  fc.constant("127.0.0.1"),
  trustedV4.map((a) => `::ffff:${a}`),
);
const untrustedV4 = fc.ipV4().filter((a) => !proxies.trusts(parseAddress(a)!));
const untrusted = fc.oneof(
  untrustedV4,
  untrustedV4.map((a) => `::ffff:${a}`),
  fc.ipV6().filter((a) => !proxies.trusts(parseAddress(a)!)),
);
const written = (address: fc.Arbitrary<string>) =>
  address.chain((a) =>
    a.includes(":") ? fc.constantFrom(a, a.toUpperCase(), `[${a}]`, `[${a}]:443`, ` ${a}`) : fc.constantFrom(a, `${a}:8080`, ` ${a} `),
  );
const anyEntry = fc.oneof(
  written(trusted),
  written(untrusted),
  fc.string({ maxLength: 20 }),
  fc.constantFrom("unknown", "", "[::1", "1.2.3.4/8"),
);

test("property: forged entries left of a trusted chain never win", () => {
  fc.assert(
    fc.property(
      fc.array(anyEntry, { maxLength: 30 }),
      written(untrusted),
      fc.array(written(trusted), { maxLength: FORWARDED_FOR_ENTRIES_MAX - 1 }),
      trusted,
      (forged, client, chain, peer) => {
        const header = [...forged, client, ...chain].join(",");
        expect(clientAddress(peer, header, proxies)).toBe(entryAddress(client)!.text);
      },
    ),
    { numRuns: 2_000 },
  );
});

test("property: the client is the peer, or an entry right of which every entry is a trusted proxy", () => {
  fc.assert(
    fc.property(fc.array(anyEntry, { maxLength: 20 }), fc.oneof(trusted, untrusted), (entries, peer) => {
      const result = clientAddress(peer, entries.join(","), proxies);
      const from = parseAddress(peer)!;
      if (result === from.text) return;
      expect(proxies.trusts(from)).toBe(true);
      const at = entries.findLastIndex((entry) => entryAddress(entry)?.text === result);
      expect(at).toBeGreaterThanOrEqual(0);
      for (const right of entries.slice(at + 1)) {
        const address = entryAddress(right);
        expect(address !== null && proxies.trusts(address)).toBe(true);
      }
    }),
    { numRuns: 2_000 },
  );
});
