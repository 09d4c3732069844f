/**
 * What a content part's URL shows about its media: an image by a `data:image/…` URL or by its
 * path's extension. Anything else (no extension, a video, a PDF) may be any media to a vendor
 * that fetches URLs itself (Gemini's `fileData`).
 */

/** Image types by path extension, as Gemini's `fileData` names them. */
const IMAGE_TYPES: Readonly<Record<string, string>> = {
  png: "image/png",
  jpg: "image/jpeg",
  jpeg: "image/jpeg",
  webp: "image/webp",
  gif: "image/gif",
  heic: "image/heic",
};

/**
 * The image type a URL shows, or null when it shows none.
 * @example imageTypeOfUrl("https://example.com/a.PNG?x=1") // "image/png"
 * @example imageTypeOfUrl("https://example.com/talk.mp4") // null
 */
export function imageTypeOfUrl(url: string): string | null {
  if (url.startsWith("data:")) return /^data:(image\/[a-z0-9.+-]+)[;,]/i.exec(url)?.[1]?.toLowerCase() ?? null;
  const ext = /\.([a-z0-9]+)(?:[?#]|$)/i.exec(url)?.[1]?.toLowerCase();
  return (ext && IMAGE_TYPES[ext]) || null;
}
