/**
 * Anthropic errors → the gateway's errors. Replies carry `{"type":"error","error":{"type","message"}}`
 * with the HTTP status (529 for `overloaded_error`); the same object arrives as an `error` event
 * when a stream fails after it started.
 */
import { z } from "zod";
import type { Failure } from "../../errors.ts";
import { statusToFailure } from "../status.ts";
import type { UpstreamFailure } from "../types.ts";

export const anthropicError = z.object({
  type: z.literal("error"),
  error: z.object({ type: z.string(), message: z.string() }),
});

function anthropicErrorDetail(text: string): z.infer<typeof anthropicError>["error"] | null {
  try {
    const parsed = anthropicError.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data.error : null;
  } catch {
    return null;
  }
}

export function anthropicErrorToFailure(status: number, text: string): UpstreamFailure {
  return statusToFailure(status, anthropicErrorDetail(text)?.message ?? null);
}

/** A mid-stream `error` event: bytes have been relayed already, so it is never retried. */
export function anthropicStreamErrorToFailure(data: string): Failure {
  const detail = anthropicErrorDetail(data);
  const what = detail ? `${detail.type}: ${detail.message}` : "unknown error";
  return { code: "upstream_error", message: `The upstream failed mid-stream: ${what}` };
}
