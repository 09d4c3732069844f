/**
 * The account area's request checks. Cookies make a browser send credentials on its own, so
 * every /console/api request is checked for where it came from:
 *
 * - `Origin`, when sent, must be the console's own origin (scheme, host and port: a page on
 *   another port of the same host is same-site, and SameSite=Lax alone would let it through);
 * - `Sec-Fetch-Site`, when sent, must be `same-origin` (or `none`: typed in the address bar);
 * - a state change must carry one of the two (every current browser does), and, once signed
 *   in, the session's CSRF token in `x-csrf-token`.
 */
import { timingSafeEqual } from "node:crypto";
import { insecureLoopback } from "../../addresses.ts";
import { fail, type Failure } from "../../errors.ts";
import { requestOrigin } from "../request.ts";

export const SESSION_COOKIE = "dvz_session";
export const SECURE_SESSION_COOKIE = `__Host-${SESSION_COOKIE}`;
export const CSRF_HEADER = "x-csrf-token";

/** The console's own origin: PUBLIC_URL's when set (behind a proxy), else the request's (with a trusted proxy's scheme). */
export function ownOrigin(request: Request, publicUrl: string | undefined): string {
  return publicUrl ? new URL(publicUrl).origin : requestOrigin(request);
}

// Plain http on a loopback address: no Secure cookie (and so no `__Host-` prefix) is possible.
export { insecureLoopback };

export function cookieName(origin: string): string {
  return insecureLoopback(origin) ? SESSION_COOKIE : SECURE_SESSION_COOKIE;
}

export function sessionCookie(origin: string, token: string, maxAgeS: number): string {
  const secure = insecureLoopback(origin) ? "" : "; Secure";
  return `${cookieName(origin)}=${token}; Path=/; HttpOnly; SameSite=Lax; Max-Age=${maxAgeS}${secure}`;
}

export function clearedCookie(origin: string): string {
  return sessionCookie(origin, "", 0);
}

export function readCookie(request: Request, name: string): string | null {
  for (const part of (request.headers.get("cookie") ?? "").split(";")) {
    const eq = part.indexOf("=");
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return null;
}

const crossSite = () =>
  fail("cross_site_refused", "The account area answers only its own pages: this request came from another site or origin.");

/** Refuses a request from another origin; `change`: a state change, which must prove its origin. */
export function checkSameOrigin(request: Request, origin: string, change: boolean): Failure | null {
  const sentOrigin = request.headers.get("origin");
  const site = request.headers.get("sec-fetch-site");
  if (sentOrigin !== null && sentOrigin !== origin) return crossSite();
  if (site !== null && site !== "same-origin" && site !== "none") return crossSite();
  if (change && sentOrigin === null && site !== "same-origin") return crossSite();
  return null;
}

export function checkCsrf(request: Request, expected: string): Failure | null {
  const given = request.headers.get(CSRF_HEADER) ?? "";
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  if (a.length === b.length && timingSafeEqual(a, b)) return null;
  return fail(
    "cross_site_refused",
    `A change needs the session's CSRF token in the ${CSRF_HEADER} header (GET /console/api/session gives it).`,
  );
}
