/** Maps an OpenAI-style error reply to the gateway's errors. */
import type { UpstreamFailure } from "../types.ts";

function upstreamMessage(text: string): string | null {
  try {
    const parsed = JSON.parse(text) as { error?: { message?: unknown } | string; message?: unknown };
    if (typeof parsed.error === "string") return parsed.error;
    if (typeof parsed.error?.message === "string") return parsed.error.message;
    if (typeof parsed.message === "string") return parsed.message;
  } catch {}
  return null;
}

export function openAIErrorToFailure(status: number, text: string): UpstreamFailure {
  const detail = upstreamMessage(text);
  if (status === 400 || status === 422) {
    return { code: "invalid_request", message: detail ?? "The upstream refused the request as invalid.", retryable: false };
  }
  if (status === 429) {
    return { code: "upstream_error", message: "The upstream is rate limiting; no other backend could take the request.", retryable: true };
  }
  if (status === 408) return { code: "upstream_timeout", message: "The upstream timed out.", retryable: true };
  if (status === 401 || status === 403) {
    return { code: "upstream_error", message: "The upstream refused the gateway's credentials.", retryable: true };
  }
  return { code: "upstream_error", message: `The upstream failed with status ${status}.`, retryable: status >= 500 || status === 404 };
}
