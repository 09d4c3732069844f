import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { fileTarget, isPublicAddress, type Lookup } from "./fileUrl.ts";

const NOT_PUBLIC = [
  "0.0.0.0",
  "10.1.2.3",
  "100.64.0.1", // CGNAT
  "100.127.255.254",
  "127.0.0.1",
  "127.255.255.255",
  "169.254.169.254", // cloud metadata
  "172.16.0.1",
  "172.31.255.255",
  "192.0.0.8",
  "192.0.2.1",
  "192.168.1.1",
  "198.18.0.1",
  "198.51.100.7",
  "203.0.113.9",
  "224.0.0.1",
  "239.255.255.250",
  "240.0.0.1",
  "255.255.255.255",
  "::",
  "::1",
  "::ffff:127.0.0.1", // IPv4-mapped loopback
  "::ffff:7f00:1", // the same, in hex
  "::ffff:169.254.169.254",
  "::ffff:10.0.0.1",
  "64:ff9b::10.0.0.1", // NAT64 to a private address
  "::127.0.0.1", // IPv4-compatible (deprecated)
  "fc00::1",
  "fd12:3456::1", // unique local
  "fe80::1",
  "fe80::1%eth0",
  "fec0::1",
  "ff02::1",
  "100::1", // discard
  "2001:db8::1", // documentation
  "2001::1", // Teredo
  "2002:7f00:1::1", // 6to4
  "3fff::1",
  "not-an-address",
];

const PUBLIC = [
  "1.1.1.1",
  "8.8.8.8",
  "93.184.216.34",
  "100.63.255.255",
  "100.128.0.0",
  "172.15.255.255",
  "172.32.0.0",
  "192.169.0.1",
  "223.255.255.255",
  "2606:4700:4700::1111",
  "2a00:1450:4001::200e",
  "::ffff:8.8.8.8",
  "64:ff9b::8.8.8.8",
];

describe("isPublicAddress", () => {
  test.each(NOT_PUBLIC)("%s is not public", (address) => expect(isPublicAddress(address)).toBe(false));
  test.each(PUBLIC)("%s is public", (address) => expect(isPublicAddress(address)).toBe(true));
});

const answers =
  (table: Record<string, string[]>): Lookup =>
  async (host) =>
    (table[host] ?? []).map((address) => ({ address, family: address.includes(":") ? 6 : 4 }));
const policy = {
  backendUrl: "http://10.0.0.5:8000/v1",
  lookup: answers({
    "cdn.example": ["93.184.216.34"],
    "v6.example": ["2606:4700::1"],
    "rebind.example": ["93.184.216.34", "127.0.0.1"],
    localhost: ["127.0.0.1"],
  }),
};
const target = (url: string) => fileTarget(new URL(url), policy);

describe("fileTarget", () => {
  test("the backend's own origin is fetched as configured, private as it is", async () => {
    expect(await target("http://10.0.0.5:8000/files/a.png")).toEqual({ url: "http://10.0.0.5:8000/files/a.png", headers: {} });
  });

  test("another port or scheme on the backend's host is another origin, and refused", async () => {
    expect(await target("http://10.0.0.5:9000/a.png")).toEqual({
      refused: "http: URLs are not fetched (only https, or the backend's own origin)",
    });
    expect(await target("https://10.0.0.5:8000/a.png")).toEqual({ refused: "the URL's address is not a public one" });
  });

  test("schemes other than https are refused, file: among them", async () => {
    for (const url of ["file:///proc/self/environ", "ftp://cdn.example/a.png", "http://cdn.example/a.png", "gopher://cdn.example/"]) {
      expect(await target(url)).toEqual({
        refused: `${new URL(url).protocol} URLs are not fetched (only https, or the backend's own origin)`,
      });
    }
  });

  test("a file: URL is refused even for a backend configured with a file: URL (its origin is opaque)", async () => {
    expect(await fileTarget(new URL("file:///etc/passwd"), { ...policy, backendUrl: "file:///srv/" })).toHaveProperty("refused");
  });

  test("https to a non-public address literal is refused, however it is spelled", async () => {
    for (const url of [
      "https://127.0.0.1/a",
      "https://2130706433/a",
      "https://0x7f.1/a",
      "https://[::1]/a",
      "https://[::ffff:169.254.169.254]/a",
      "https://169.254.169.254/latest/meta-data/",
    ]) {
      expect(await target(url)).toEqual({ refused: "the URL's address is not a public one" });
    }
  });

  test("a host name that resolves to loopback, or to a private address among public ones, is refused", async () => {
    expect(await target("https://localhost/a.png")).toEqual({ refused: "the URL's host resolves to an address that is not a public one" });
    expect(await target("https://rebind.example/a.png")).toEqual({
      refused: "the URL's host resolves to an address that is not a public one",
    });
    expect(await target("https://nowhere.example/a.png")).toEqual({ refused: "the URL's host has no address" });
  });

  test("a public host is connected to at the address checked, its name sent as Host and TLS server name", async () => {
    expect(await target("https://cdn.example:8443/img/a.png?sig=1")).toEqual({
      url: "https://93.184.216.34:8443/img/a.png?sig=1",
      headers: { host: "cdn.example:8443" },
      tls: { serverName: "cdn.example" },
    });
    expect(await target("https://v6.example/a.png")).toEqual({
      url: "https://[2606:4700::1]/a.png",
      headers: { host: "v6.example" },
      tls: { serverName: "v6.example" },
    });
  });
});

describe("connecting to a checked address under its host's name", () => {
  // The contract fileTarget's pinned targets rely on: fetch goes to the address in the URL, sends
  // the Host header given, and verifies the certificate against the server name, not the address.
  const fixtures = join(import.meta.dir, "../../test/fixtures/tls");
  const cert = Bun.file(join(fixtures, "images.test.crt"));

  test("reaches the address, with the name as Host, and refuses a certificate for another name", async () => {
    const server = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      tls: { cert, key: Bun.file(join(fixtures, "images.test.key")) },
      fetch: (req) => new Response(req.headers.get("host")),
    });
    try {
      const ca = await cert.text();
      const url = `https://127.0.0.1:${server.port}/a.png`;
      const reply = await fetch(url, { headers: { host: `images.test:${server.port}` }, tls: { serverName: "images.test", ca } });
      expect(await reply.text()).toBe(`images.test:${server.port}`);
      const other = await fetch(url, { headers: { host: "other.test" }, tls: { serverName: "other.test", ca } }).catch(
        (error: Error) => error,
      );
      expect(other).toBeInstanceOf(Error);
    } finally {
      server.stop(true);
    }
  });
});
