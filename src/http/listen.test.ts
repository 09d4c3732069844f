import { describe, expect, test } from "bun:test";
import { ConfigError, loadConfig } from "../config.ts";
import { BUN_IDLE_TIMEOUT_S_MAX, ensurePortFree, idleTimeoutS, listenOptions, PortInUseError } from "./listen.ts";

const required = { ADMIN_TOKEN: "a".repeat(16), KEY_PEPPER: "p".repeat(32) };

describe("idle timeout", () => {
  test("covers the default upstream wait and an image download, with margin", () => {
    expect(idleTimeoutS(loadConfig(required).env)).toBe(120 + 30 + 10);
  });

  test("the longest waits config accepts still fit Bun's maximum; one millisecond more is refused by config", () => {
    const longest = loadConfig({ ...required, UPSTREAM_TIMEOUT_MS: "215000", STREAM_KEEPALIVE_MS: "240000" }).env;
    expect(idleTimeoutS(longest)).toBeLessThanOrEqual(BUN_IDLE_TIMEOUT_S_MAX);
    for (const [name, value] of [
      ["UPSTREAM_TIMEOUT_MS", "215001"],
      ["STREAM_KEEPALIVE_MS", "240001"],
    ]) {
      expect(() => loadConfig({ ...required, [name!]: value })).toThrow(ConfigError);
    }
  });

  test("a wait beyond Bun's maximum is a broken invariant, not a silent clamp", () => {
    expect(() => idleTimeoutS({ UPSTREAM_TIMEOUT_MS: 300_000, STREAM_KEEPALIVE_MS: 15_000 })).toThrow("above Bun's 255 s");
  });
});

test("listen options state reusePort off and the idle timeout, whatever Elysia's defaults", () => {
  expect(listenOptions(loadConfig({ ...required, PORT: "9123" }).env)).toMatchObject({
    port: 9123,
    hostname: "127.0.0.1",
    reusePort: false,
    idleTimeout: 160,
  });
});

describe("ensurePortFree", () => {
  test("a port held by another listener is a PortInUseError naming it", () => {
    const holder = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("held") });
    try {
      const error = (() => {
        try {
          ensurePortFree("127.0.0.1", holder.port!);
        } catch (e) {
          return e;
        }
      })();
      expect(error).toBeInstanceOf(PortInUseError);
      expect((error as Error).message).toStartWith(`port ${holder.port} on 127.0.0.1 is in use`);
    } finally {
      holder.stop(true);
    }
  });

  test("a free port is left free, and port 0 is not probed", () => {
    const probe = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("x") });
    const port = probe.port!;
    probe.stop(true);
    ensurePortFree("127.0.0.1", port);
    const after = Bun.serve({ port, hostname: "127.0.0.1", fetch: () => new Response("x") });
    after.stop(true);
    ensurePortFree("127.0.0.1", 0);
  });
});
