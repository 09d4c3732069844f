import { describe, expect, test } from "bun:test";
import { checkCsrf, checkSameOrigin, cookieName, ownOrigin, readCookie, sessionCookie } from "./guard.ts";

const req = (headers: Record<string, string>) => new Request("http://127.0.0.1:8080/console/api/keys", { headers });
const origin = "http://127.0.0.1:8080";

describe("console request checks", () => {
  test("own origin passes; another port on the same host is refused", () => {
    expect(checkSameOrigin(req({ origin, "sec-fetch-site": "same-origin" }), origin, true)).toBeNull();
    expect(checkSameOrigin(req({ origin: "http://127.0.0.1:9999", "sec-fetch-site": "same-site" }), origin, true)?.code).toBe(
      "cross_site_refused",
    );
    expect(checkSameOrigin(req({ "sec-fetch-site": "same-site" }), origin, false)?.code).toBe("cross_site_refused");
    expect(checkSameOrigin(req({ "sec-fetch-site": "cross-site" }), origin, false)?.code).toBe("cross_site_refused");
  });

  test("a change must prove its origin; a read typed in the address bar need not", () => {
    expect(checkSameOrigin(req({}), origin, true)?.code).toBe("cross_site_refused");
    expect(checkSameOrigin(req({}), origin, false)).toBeNull();
    expect(checkSameOrigin(req({ "sec-fetch-site": "none" }), origin, false)).toBeNull();
  });

  test("csrf token compared exactly", () => {
    expect(checkCsrf(req({ "x-csrf-token": "abc" }), "abc")).toBeNull();
    expect(checkCsrf(req({ "x-csrf-token": "abd" }), "abc")?.code).toBe("cross_site_refused");
    expect(checkCsrf(req({}), "abc")?.code).toBe("cross_site_refused");
  });

  test("cookies: __Host- and Secure except on plain-http loopback", () => {
    expect(cookieName("https://console.example")).toBe("__Host-dvz_session");
    expect(sessionCookie("https://console.example", "t", 60)).toBe(
      "__Host-dvz_session=t; Path=/; HttpOnly; SameSite=Lax; Max-Age=60; Secure",
    );
    expect(sessionCookie(origin, "t", 60)).toBe("dvz_session=t; Path=/; HttpOnly; SameSite=Lax; Max-Age=60");
    expect(readCookie(req({ cookie: "a=1; dvz_session=xyz" }), "dvz_session")).toBe("xyz");
    expect(ownOrigin(req({}), "https://gw.example/base")).toBe("https://gw.example");
  });
});
