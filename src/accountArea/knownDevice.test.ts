import { expect, test } from "bun:test";
import { KNOWN_DEVICE_TTL_S, knownDeviceCookie, knownDeviceOf, knownDeviceValue } from "./knownDevice.ts";

const SECRET = "k".repeat(40);
const PHONE = "+989120000301";
const NOW = Date.parse("2026-11-23T10:00:00Z");

test("a cookie names its device for its own phone only, until it expires", () => {
  const value = knownDeviceValue(SECRET, PHONE, NOW, "dev1");
  expect(value).not.toContain("9120000301");
  expect(knownDeviceOf(SECRET, PHONE, value, NOW)).toBe("dev1");
  expect(knownDeviceOf(SECRET, PHONE, value, NOW + KNOWN_DEVICE_TTL_S * 1000 - 1000)).toBe("dev1");
  expect(knownDeviceOf(SECRET, PHONE, value, NOW + KNOWN_DEVICE_TTL_S * 1000)).toBeNull();
  expect(knownDeviceOf(SECRET, "+989120000302", value, NOW)).toBeNull();
  expect(knownDeviceOf("x".repeat(40), PHONE, value, NOW)).toBeNull();
  expect(knownDeviceOf(SECRET, PHONE, null, NOW)).toBeNull();
  expect(knownDeviceOf(SECRET, PHONE, "a".repeat(500), NOW)).toBeNull();
});

test("nothing in it can be changed: device id, expiry or signature", () => {
  const value = knownDeviceValue(SECRET, PHONE, NOW, "dev1");
  const [tag, id, expires, sig] = value.split(".") as [string, string, string, string];
  expect(knownDeviceOf(SECRET, PHONE, [tag, "dev2", expires, sig].join("."), NOW)).toBeNull();
  expect(knownDeviceOf(SECRET, PHONE, [tag, id, String(Number(expires) + 1), sig].join("."), NOW)).toBeNull();
  const flipped = `${sig.slice(0, -1)}${sig.endsWith("A") ? "B" : "A"}`;
  expect(knownDeviceOf(SECRET, PHONE, [tag, id, expires, flipped].join("."), NOW)).toBeNull();
  expect(knownDeviceValue(SECRET, PHONE, NOW)).not.toBe(knownDeviceValue(SECRET, PHONE, NOW));
});

test("the cookie: HttpOnly, SameSite=Lax, Secure and __Host- over https only", () => {
  expect(knownDeviceCookie("https://console.example", "v")).toBe(
    `__Host-dvz_device=v; Path=/; HttpOnly; SameSite=Lax; Max-Age=${KNOWN_DEVICE_TTL_S}; Secure`,
  );
  expect(knownDeviceCookie("http://127.0.0.1:8080", "v")).toBe(
    `dvz_device=v; Path=/; HttpOnly; SameSite=Lax; Max-Age=${KNOWN_DEVICE_TTL_S}`,
  );
});
