/**
 * Prompt caching marks in a chat request. Anthropic caches a prompt's prefix up to each block
 * that carries `cache_control` (content parts, system parts, tools), or up to the last cacheable
 * block when the request itself carries it (automatic caching), and only then: a request
 * without a mark writes nothing to the cache, so only a marked request can cost the cache-write
 * price, which is above input. The marks are the client's, passed through to Anthropic backends.
 */

/** Messages and tools looked at for a mark at most; a longer request is bounded by its body size. */
export const CACHE_MARKS_SCAN_MAX = 10_000;

function hasMark(value: unknown): boolean {
  return (
    typeof value === "object" && value !== null && "cache_control" in value && (value as { cache_control?: unknown }).cache_control != null
  );
}

/**
 * Whether any content part, message or tool of the request carries `cache_control`.
 * @example marksCache({ messages: [{ role: "system", content: [{ type: "text", text: "…", cache_control: { type: "ephemeral" } }] }] }) // true
 */
export function marksCache(body: { messages: unknown[]; tools?: unknown[] | null }): boolean {
  if (hasMark(body)) return true;
  let scanned = 0;
  for (const message of body.messages) {
    if (++scanned > CACHE_MARKS_SCAN_MAX) return true; // beyond the scan: assume the worst price
    if (hasMark(message)) return true;
    const content = (message as { content?: unknown }).content;
    if (Array.isArray(content) && content.some(hasMark)) return true;
  }
  return (body.tools ?? []).some(hasMark);
}
