/** GET /v1/media/{id}: generated media (src/media/store.ts) from the gateway's own origin. */
import type { GatewayDeps } from "../../admission/deps.ts";
import { fail } from "../../errors.ts";
import { readMedia } from "../../media/store.ts";
import { failed } from "../guard.ts";

/** The bytes while the lifetime lasts, then the OpenAI-shaped 404. */
export async function serveMedia(id: string, requestId: string, deps: Pick<GatewayDeps, "db">): Promise<Response> {
  const row = await readMedia(deps.db, id);
  if (!row) return failed(fail("not_found", "This media does not exist or its lifetime has passed."), requestId);
  const maxAgeS = Math.max(0, Math.floor((row.expiresAt.getTime() - Date.now()) / 1000));
  return new Response(row.body, {
    headers: { "content-type": row.contentType, "cache-control": `private, max-age=${maxAgeS}`, "x-request-id": requestId },
  });
}
