/**
 * Generated media (image URLs) kept in the `media` table and served from the gateway's own
 * origin until a lifetime (MEDIA_TTL_S) passes, then 404. The id is 24 random base62 characters
 * (~143 bits), so the URL is unguessable and needs no key. Each store also deletes rows past
 * their lifetime, so the table holds no more than one lifetime of images.
 */
import { and, eq, gt, lt } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { media } from "../db/schema.ts";
import { randomBase62 } from "../ids.ts";

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

/** The stored bytes of `id` while its lifetime lasts, or null. */
export async function readMedia(db: Db, id: string): Promise<{ contentType: string; body: Uint8Array; expiresAt: Date } | null> {
  if (!MEDIA_ID_PATTERN.test(id)) return null;
  const [row] = await db.orm
    .select({ contentType: media.contentType, body: media.body, expiresAt: media.expiresAt })
    .from(media)
    .where(and(eq(media.id, id), gt(media.expiresAt, new Date())));
  return row ?? null;
}
