/**
 * Generated media (image URLs) kept in the `media` table and served from the gateway's own
 * origin until a lifetime (MEDIA_TTL_S) passes, then 404. The id is 24 random base62 characters
 * (~143 bits), so the URL is unguessable and needs no key. Each store also deletes rows past
 * their lifetime, so the table holds no more than one lifetime of images.
 */
import { and, eq, gt, lt } from "drizzle-orm";
import type { Db } from "../../db/client.ts";
import { media } from "../../db/schema.ts";
import { fail } from "../../errors.ts";
import { randomBase62 } from "../../ids.ts";
import type { EdgeDeps } from "../deps.ts";
import { failed } from "../guard.ts";

const MEDIA_ID_CHARS = 24;
const MEDIA_ID_PATTERN = /^med_[A-Za-z0-9]{24}$/;

/** Stores bytes for `ttlS` seconds; returns the id to put in `/v1/media/{id}`. */
export async function storeMedia(db: Db, bytes: Uint8Array, contentType: string, ttlS: number): Promise<string> {
  const id = `med_${randomBase62(MEDIA_ID_CHARS)}`;
  const now = Date.now();
  await db.orm.delete(media).where(lt(media.expiresAt, new Date(now)));
  await db.orm.insert(media).values({ id, contentType, body: bytes, expiresAt: new Date(now + ttlS * 1000) });
  return id;
}

/** GET /v1/media/{id}: the bytes while the lifetime lasts, then the OpenAI-shaped 404. */
export async function serveMedia(id: string, requestId: string, deps: EdgeDeps): Promise<Response> {
  const gone = () => failed(fail("not_found", "This media does not exist or its lifetime has passed."), requestId);
  if (!MEDIA_ID_PATTERN.test(id)) return gone();
  const [row] = await deps.db.orm
    .select({ contentType: media.contentType, body: media.body, expiresAt: media.expiresAt })
    .from(media)
    .where(and(eq(media.id, id), gt(media.expiresAt, new Date())));
  if (!row) return gone();
  const maxAgeS = Math.max(0, Math.floor((row.expiresAt.getTime() - Date.now()) / 1000));
  return new Response(row.body, {
    headers: { "content-type": row.contentType, "cache-control": `private, max-age=${maxAgeS}`, "x-request-id": requestId },
  });
}
