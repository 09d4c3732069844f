/**
 * Operators' live view: `GET /admin/pools/live` streams the cluster's merged pool view as SSE
 * once a second (admin token), and `/admin/dashboard` serves the page that draws it. The page's
 * files ship in src/http/dashboard/ (no CDN); the page itself holds no data and asks for the
 * admin token, which it sends in the Authorization header of its fetch of the SSE feed.
 */
import { Elysia } from "elysia";
import { fail } from "../../errors.ts";
import { encodeJson } from "../../json.ts";
import type { LiveHub, LiveView } from "../../metrics/live.ts";
import type { adminGuard } from "../admin/guard.ts";
import { failed } from "../guard.ts";
import { newRequestId } from "../../operations/input.ts";

const ASSETS: Record<string, { file: string; type: string }> = {
  "": { file: "index.html", type: "text/html; charset=utf-8" },
  "dashboard.js": { file: "dashboard.js", type: "text/javascript; charset=utf-8" },
  "dashboard.css": { file: "dashboard.css", type: "text/css; charset=utf-8" },
};
const DASHBOARD_DIR = new URL("../dashboard/", import.meta.url);
const encoder = new TextEncoder();

/** One SSE event carrying a view. */
export function viewEvent(view: LiveView): Uint8Array {
  return encoder.encode(`event: pools\ndata: ${encodeJson(view)}\n\n`);
}

/** The gateway's own SSE splitter, for the page: src/providers/sse.ts with its types stripped, once. */
let sseModule: string | null = null;
async function sseScript(): Promise<Response> {
  sseModule ??= new Bun.Transpiler({ loader: "ts" }).transformSync(
    await Bun.file(new URL("../../providers/sse.ts", import.meta.url)).text(),
  );
  return new Response(sseModule, {
    headers: { "content-type": "text/javascript; charset=utf-8", "cache-control": "no-cache", "x-content-type-options": "nosniff" },
  });
}

function asset(name: string): Response | Promise<Response> {
  if (name === "sse.js") return sseScript();
  // Own entries only: `toString` or `__proto__` is no file.
  const entry = Object.hasOwn(ASSETS, name) ? ASSETS[name] : undefined;
  if (!entry) return failed(fail("not_found", "No such endpoint."), newRequestId());
  return new Response(Bun.file(new URL(entry.file, DASHBOARD_DIR)), {
    headers: { "content-type": entry.type, "cache-control": "no-cache", "x-content-type-options": "nosniff" },
  });
}

function liveFeed(request: Request, hub: LiveHub, requestId: string): Response {
  let stop: (() => void) | null = null;
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      const unsubscribe = hub.listen((view) => {
        try {
          controller.enqueue(viewEvent(view));
        } catch {
          stop?.();
        }
      });
      if (!unsubscribe) {
        controller.enqueue(encoder.encode(`event: error\ndata: ${JSON.stringify({ error: "too many live listeners" })}\n\n`));
        controller.close();
        return;
      }
      stop = () => {
        unsubscribe();
        stop = null;
      };
      request.signal.addEventListener("abort", () => stop?.(), { once: true });
      // The latest view at once, so a new listener does not wait a whole interval.
      controller.enqueue(viewEvent(hub.current()));
    },
    cancel() {
      stop?.();
    },
  });
  return new Response(body, {
    headers: { "content-type": "text/event-stream", "cache-control": "no-cache", "x-request-id": requestId },
  });
}

/** The live routes, as a plugin for the app. */
export function liveRoutes(hub: LiveHub, asAdmin: ReturnType<typeof adminGuard>) {
  return new Elysia()
    .get(
      "/admin/pools/live",
      asAdmin((request, _, requestId) => liveFeed(request, hub, requestId)),
    )
    .get("/admin/dashboard", () => asset(""))
    .get("/admin/dashboard/:file", ({ params }) => asset(params.file));
}
