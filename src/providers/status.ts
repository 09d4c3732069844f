/**
 * An upstream's HTTP status as one of the gateway's errors, shared by every vendor's errors.ts:
 * vendors differ in how they spell the error body, not in what a status means to us.
 */
import type { UpstreamFailure } from "./types.ts";

/**
 * `detail` is the vendor's own message, shown to the client only for a refused request (the
 * client's fault); for the other statuses the upstream's wording says nothing a client can act on.
 *
 * @example statusToFailure(429, null) // { code: "upstream_error", retryable: true, … }
 */
export function statusToFailure(status: number, detail: string | null): UpstreamFailure {
  if (status === 400 || status === 422 || status === 413) {
    if (detail && /context (length|window)|too many tokens|prompt is too long|exceeds the maximum/i.test(detail)) {
      return { code: "context_length_exceeded", message: detail, retryable: false };
    }
    return { code: "invalid_request", message: detail ?? "The upstream refused the request as invalid.", retryable: false };
  }
  if (status === 429) {
    return { code: "upstream_error", message: "The upstream is rate limiting; no other backend could take the request.", retryable: true };
  }
  if (status === 408) return { code: "upstream_timeout", message: "The upstream timed out.", retryable: true };
  if (status === 401 || status === 403) {
    return { code: "upstream_error", message: "The upstream refused the gateway's credentials.", retryable: true };
  }
  // 529 is Anthropic's "overloaded"; 503/504 the usual ones: all worth another backend.
  return { code: "upstream_error", message: `The upstream failed with status ${status}.`, retryable: status >= 500 || status === 404 };
}
