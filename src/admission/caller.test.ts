import { describe, expect, test } from "bun:test";
import { fail } from "../errors.ts";
import type { KeyRecord } from "../keys/store.ts";
import { enter, originRefusal, residencyOf } from "./caller.ts";

const key = { id: "key_1", residency: null, allowedIps: null } as unknown as KeyRecord;
const deps = (authenticate: () => Promise<unknown>) =>
  ({ env: { ALLOWED_ORIGINS: ["https://app.example"] }, keys: { authenticate } }) as unknown as Parameters<typeof enter>[0];

describe("origin", () => {
  test("a server (no Origin) and an allowed page pass; another page is refused", () => {
    expect(originRefusal(null, [])).toBeNull();
    expect(originRefusal("https://app.example", ["https://app.example"])).toBeNull();
    expect(originRefusal("https://evil.example", ["https://app.example"])?.code).toBe("origin_not_allowed");
  });
});

describe("residency", () => {
  test("the header or the key's setting keeps the request in the country; another header value is a 400 naming it", () => {
    expect(residencyOf(null, { residency: null })).toBeUndefined();
    expect(residencyOf("in-country", { residency: null })).toBe("in-country");
    expect(residencyOf(null, { residency: "in-country" })).toBe("in-country");
    expect(residencyOf("abroad", { residency: null })).toMatchObject({ code: "invalid_request", param: "x-darvaze-residency" });
  });
});

describe("enter", () => {
  test("the key and its residency make the caller", async () => {
    const caller = await enter(
      deps(async () => key),
      { key: "sk", origin: null, residency: "in-country" },
    );
    expect(caller).toEqual({ key, region: "in-country" });
  });

  test("a key store that cannot answer is a 503 to retry, an unknown key its own refusal, a refused page before either", async () => {
    const away = await enter(
      deps(async () => {
        throw new Error("database away");
      }),
      { key: "sk", origin: null, residency: null },
    );
    expect(away).toMatchObject({ code: "service_unavailable", retryAfterS: 1 });
    const unknown = fail("invalid_api_key", "no");
    expect(
      await enter(
        deps(async () => unknown),
        { key: "sk", origin: null, residency: null },
      ),
    ).toBe(unknown);
    let asked = false;
    const page = await enter(
      deps(async () => {
        asked = true;
        return key;
      }),
      { key: "sk", origin: "https://evil.example", residency: null },
    );
    expect([(page as { code: string }).code, asked]).toEqual(["origin_not_allowed", false]);
  });
});

describe("a batch line", () => {
  test("only credentials that say so make a batch caller (the batch runner's: no transport reads it from a request)", async () => {
    const live = await enter(
      deps(async () => key),
      { key: "sk-x", origin: null, residency: null },
    );
    expect(live as object).not.toHaveProperty("batch");
    const line = await enter(
      deps(async () => key),
      { key: null, origin: null, residency: null, batch: true },
    );
    expect(line).toMatchObject({ key, batch: true });
  });
});
