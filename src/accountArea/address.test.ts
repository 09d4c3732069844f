import { expect, test } from "bun:test";
import { addressBucket, addressRange } from "./address.ts";

test("IPv6 counts per /64, IPv4 per address, IPv4 inside IPv6 as IPv4", () => {
  expect(addressBucket("2001:db8:1:2::1")).toBe("2001:db8:1:2::/64");
  expect(addressBucket("2001:0db8:0001:0002:ffff:ffff:ffff:ffff")).toBe("2001:db8:1:2::/64");
  expect(addressBucket("2001:db8:1:3::1")).toBe("2001:db8:1:3::/64");
  expect(addressBucket("fe80::1%eth0")).toBe("fe80:0:0:0::/64");
  expect(addressBucket("::1")).toBe("0:0:0:0::/64");
  expect(addressBucket("::ffff:10.0.0.1")).toBe("10.0.0.1");
  expect(addressBucket("10.0.0.1")).toBe("10.0.0.1");
  expect(addressBucket("10.0.0.2")).toBe("10.0.0.2");
  expect(addressBucket("unknown")).toBe("unknown");
});

test("ranges: IPv4 per /24, IPv6 per /48, IPv4 inside IPv6 as IPv4", () => {
  expect(addressRange("203.0.113.77")).toBe("203.0.113.0/24");
  expect(addressRange("203.0.114.77")).toBe("203.0.114.0/24");
  expect(addressRange("::ffff:203.0.113.9")).toBe("203.0.113.0/24");
  expect(addressRange("2001:db8:1:2::1")).toBe("2001:db8:1::/48");
  expect(addressRange("2001:0db8:0001:ffff:ffff::1")).toBe("2001:db8:1::/48");
  expect(addressRange("2001:db8:2::1")).toBe("2001:db8:2::/48");
  expect(addressRange("unknown")).toBe("unknown");
});
