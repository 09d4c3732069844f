/**
 * Gemini errors → the gateway's errors. Google replies `{"error":{"code","message","status"}}`
 * with the HTTP status in `code`; a stream that fails after it started sends the same object as
 * an SSE event.
 */
import { z } from "zod";
import type { Failure } from "../../errors.ts";
import { statusToFailure } from "../status.ts";
import type { UpstreamFailure } from "../types.ts";

export const geminiError = z.object({
  error: z.looseObject({ code: z.number().int().optional(), message: z.string(), status: z.string().optional() }),
});

export function geminiErrorDetail(json: unknown): z.infer<typeof geminiError>["error"] | null {
  const parsed = geminiError.safeParse(json);
  return parsed.success ? parsed.data.error : null;
}

export function geminiErrorToFailure(status: number, text: string): UpstreamFailure {
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {}
  const detail = geminiErrorDetail(json);
  // Google refuses a bad key with 400 INVALID_ARGUMENT: the gateway's credentials, not the client's request.
  if (status === 400 && /API key/i.test(detail?.message ?? "")) return statusToFailure(401, null);
  return statusToFailure(status, detail?.message ?? null);
}

/** A mid-stream error object: bytes have been relayed already, so it is never retried. */
export function geminiStreamErrorToFailure(detail: z.infer<typeof geminiError>["error"]): Failure {
  return {
    code: "upstream_error",
    message: `The upstream failed mid-stream: ${detail.status ?? detail.code ?? "error"}: ${detail.message}`,
  };
}
