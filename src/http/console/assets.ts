/**
 * The account area's front end: a few static files shipped in src/http/console/ui/ (no CDN, no
 * build step), served with a strict Content-Security-Policy: scripts, styles and requests from
 * this origin only, no inline code, no framing.
 */
import { fail } from "../../errors.ts";
import { failed } from "../guard.ts";
import { newRequestId } from "../../operations/input.ts";

const UI_DIR = new URL("./ui/", import.meta.url);
/** The files by name: a Map, so that a name like `__proto__` is no file (an object's prototype was taken for one). */
const TYPES = new Map<string, string>([
  ["index.html", "text/html; charset=utf-8"],
  ["console.js", "text/javascript; charset=utf-8"],
  ["i18n.js", "text/javascript; charset=utf-8"],
  ["dom.js", "text/javascript; charset=utf-8"],
  ["console.css", "text/css; charset=utf-8"],
]);
const CSP =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/** The account area's icon: a gate in the brand's blue, drawn here (no file, nothing fetched). */
const FAVICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="6" fill="#0969da"/><path d="M8 26V12a8 8 0 0 1 16 0v14h-4V12a4 4 0 0 0-8 0v14z" fill="#fff"/></svg>`;

export function consoleFavicon(): Response {
  return new Response(FAVICON_SVG, {
    headers: { "content-type": "image/svg+xml", "cache-control": "public, max-age=86400", "x-content-type-options": "nosniff" },
  });
}

export function consoleAsset(name: string | undefined): Response {
  return staticAsset(UI_DIR, TYPES, name);
}

/** One of a front end's files (`types`: its files by name) from `dir`, under the strict policy above; the operators' console's too. */
export function staticAsset(dir: URL, types: ReadonlyMap<string, string>, name: string | undefined): Response {
  const type = name ? types.get(name) : undefined;
  if (!name || !type) return failed(fail("not_found", "No such file."), newRequestId());
  return new Response(Bun.file(new URL(name, dir)), {
    headers: {
      "content-type": type,
      "cache-control": "no-cache",
      "x-content-type-options": "nosniff",
      "content-security-policy": CSP,
      "referrer-policy": "same-origin",
      "x-frame-options": "DENY",
    },
  });
}
