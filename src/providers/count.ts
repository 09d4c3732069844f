/**
 * A backend's own count of a text, through its vendor's free count endpoint (the adapter's
 * `count`): how a cut or unreported reply's output is counted on a vendor whose tokenizer the
 * gateway does not have. Bounded by COUNT_TIMEOUT_MS; any failure is null (the caller falls back).
 */
import { readTextBounded, sendUpstream } from "./upstream.ts";
import type { ProviderAdapter } from "./types.ts";

/** The whole count call, from its send to its reply read: a count that takes longer is given up. */
export const COUNT_TIMEOUT_MS = 2_000;
/** A count's reply is a small JSON object: read no more. */
export const COUNT_REPLY_BYTES_MAX = 4_096;

/** A backend's count of a text, or null when it has none or the count failed. */
export type VendorCount = (text: string) => Promise<number | null>;

/** The count through this backend's endpoint; undefined for a backend kind without one. */
export function vendorCounter(
  adapter: ProviderAdapter,
  baseUrl: string,
  upstreamModel: string,
  requestId: string,
): VendorCount | undefined {
  const count = adapter.chat?.count;
  if (!count) return undefined;
  return async (text) => {
    const sent = await sendUpstream({
      baseUrl,
      request: count.buildCountRequest(text, upstreamModel),
      requestId,
      timeoutMs: COUNT_TIMEOUT_MS,
    });
    if (!sent.ok) return null;
    try {
      if (!sent.reply.response.ok) return null;
      const read = await readTextBounded(sent.reply.response, COUNT_REPLY_BYTES_MAX);
      return read.truncated ? null : count.parseCountResponse(read.text);
    } catch {
      return null;
    } finally {
      sent.reply.close("done");
    }
  };
}
