import { expect, test } from "bun:test";
import { DEVICE_CHARS_MAX, deviceOf } from "./device.ts";

test("a device reads as browser, major version and system", () => {
  const linuxChrome = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";
  expect(deviceOf(linuxChrome)).toBe("Chrome 131 on Linux");
  const edge =
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.2903.70";
  expect(deviceOf(edge)).toBe("Edge 131 on Windows");
  const iphone =
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1";
  expect(deviceOf(iphone)).toBe("Safari 17 on iOS");
  const android = "Mozilla/5.0 (Android 14; Mobile; rv:133.0) Gecko/133.0 Firefox/133.0";
  expect(deviceOf(android)).toBe("Firefox 133 on Android");
  expect(deviceOf("curl/8.11.1")).toBe("curl 8");
  expect(deviceOf(null)).toBeNull();
});

test("an unknown User-Agent is kept printable and bounded", () => {
  expect(deviceOf(`Bot\u0000${"x".repeat(500)}`)).toHaveLength(DEVICE_CHARS_MAX);
  expect(deviceOf("\u0001")).toBeNull();
});
