import { expect, test } from "bun:test";
import { isCidr } from "../addresses.ts";
import { addressAllowed, addressRefusal, modelRefusal } from "./restrictions.ts";

test("addresses and CIDR blocks of both families are accepted, anything else refused", () => {
  for (const ok of ["203.0.113.7", "203.0.113.0/24", "0.0.0.0/0", "2001:db8::/32", "::1", "::ffff:10.0.0.1/128"])
    expect(isCidr(ok)).toBe(true);
  for (const bad of ["203.0.113.0/33", "2001:db8::/129", "example.com", "10.0.0.1/8/1", "10.0.0.1/", "10.0.0/24", ""])
    expect(isCidr(bad)).toBe(false);
});

test("an address is inside a block of its family, IPv4 as a dual-stack socket reports it too", () => {
  expect(addressAllowed("203.0.113.7", ["203.0.113.0/24"])).toBe(true);
  expect(addressAllowed("::ffff:203.0.113.7", ["203.0.113.0/24"])).toBe(true);
  expect(addressAllowed("203.0.114.7", ["203.0.113.0/24"])).toBe(false);
  expect(addressAllowed("203.0.113.7", ["203.0.113.7"])).toBe(true);
  expect(addressAllowed("203.0.113.8", ["203.0.113.7"])).toBe(false);
  expect(addressAllowed("2001:db8:1::5", ["2001:db8::/32"])).toBe(true);
  expect(addressAllowed("2001:db9::5", ["2001:db8::/32"])).toBe(false);
  expect(addressAllowed("fe80::1%eth0", ["fe80::/10"])).toBe(true);
  expect(addressAllowed("10.1.2.3", ["0.0.0.0/0"])).toBe(true);
  expect(addressAllowed("2001:db8::1", ["0.0.0.0/0"])).toBe(false);
});

test("a restricted key is refused outside its lists with a 403 that says why; an unrestricted one never", () => {
  const model = { id: "gpt-4o", aliases: ["gpt-4o-2024-08-06"] };
  expect(modelRefusal({ allowedModels: null }, model)).toBeNull();
  expect(modelRefusal({ allowedModels: ["gpt-4o-2024-08-06"] }, model)).toBeNull();
  expect(modelRefusal({ allowedModels: ["gpt-4o-mini"] }, model)).toMatchObject({ code: "permission_denied", param: "model" });
  expect(addressRefusal({ allowedIps: null }, null)).toBeNull();
  expect(addressRefusal({ allowedIps: ["10.0.0.0/8"] }, "10.9.9.9")).toBeNull();
  expect(addressRefusal({ allowedIps: ["10.0.0.0/8"] }, "192.0.2.1")?.message).toContain("192.0.2.1");
  expect(addressRefusal({ allowedIps: ["10.0.0.0/8"] }, null)?.code).toBe("permission_denied");
});
