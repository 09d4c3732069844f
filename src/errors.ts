/**
 * The closed set of errors a client can see. Every refusal in the gateway is one of these codes;
 * `describe` maps each to its HTTP status and OpenAI error `type` in one exhaustive switch, so a
 * new code cannot ship without a status. Operating errors are values (`Failure`), not exceptions.
 */
import { z } from "zod";

export const errorCode = z.enum([
  "invalid_json",
  "invalid_request",
  "context_length_exceeded",
  /** A field's value is out of the range the model takes (`max_tokens` above its output limit), as OpenAI names it. */
  "invalid_value",
  "invalid_api_key",
  "insufficient_quota",
  "origin_not_allowed",
  "model_forbidden",
  "permission_denied",
  "model_not_found",
  "model_retired",
  "not_found",
  "idempotency_conflict",
  "replay_refused",
  "wallet_not_funded",
  "key_limit_reached",
  "request_too_large",
  "concurrency_limit_exceeded",
  "rate_limit_exceeded",
  "upstream_error",
  "no_healthy_backend",
  "service_unavailable",
  "upstream_timeout",
  "admin_unauthorized",
  "session_required",
  "cross_site_refused",
  "code_invalid",
  "code_expired",
  "code_attempts_exceeded",
  "code_resend_limited",
  "role_refused",
  "ceiling_exceeded",
  "fresh_sign_in_required",
  "sign_in_limited",
  "internal_error",
]);
export type ErrorCode = z.infer<typeof errorCode>;

/** A refusal as a value, and as it travels between nodes (actors/protocol.ts). */
export const failureSchema = z.object({
  code: errorCode,
  message: z.string(),
  /** The request field at fault, as a dotted path (`messages.0.role`). */
  param: z.string().nullable().optional(),
  /** Seconds a client should wait before retrying (429, 503). */
  retryAfterS: z.number().optional(),
  /** False when a retry of this very request cannot succeed, though its code usually can (a reserve above the key's tpm). */
  retryable: z.boolean().optional(),
});
export type Failure = z.infer<typeof failureSchema>;

export interface ErrorDescription {
  status: number;
  type: string;
  retryable: boolean;
}

export function describe(code: ErrorCode): ErrorDescription {
  switch (code) {
    case "invalid_json":
    case "invalid_request":
    case "context_length_exceeded":
    case "invalid_value":
    case "code_invalid":
    case "code_expired":
      return { status: 400, type: "invalid_request_error", retryable: false };
    case "invalid_api_key":
    case "admin_unauthorized":
    case "session_required":
    case "fresh_sign_in_required":
      return { status: 401, type: "invalid_request_error", retryable: false };
    case "insufficient_quota":
      return { status: 402, type: "insufficient_quota", retryable: false };
    case "origin_not_allowed":
    case "model_forbidden":
    case "permission_denied":
    case "cross_site_refused":
    case "role_refused":
    case "ceiling_exceeded":
      return { status: 403, type: "permission_error", retryable: false };
    case "model_not_found":
    case "not_found":
      return { status: 404, type: "invalid_request_error", retryable: false };
    case "model_retired":
      return { status: 410, type: "invalid_request_error", retryable: false };
    case "idempotency_conflict":
    case "wallet_not_funded":
    case "key_limit_reached":
    case "replay_refused":
      return { status: 409, type: "invalid_request_error", retryable: false };
    case "request_too_large":
      return { status: 413, type: "invalid_request_error", retryable: false };
    case "concurrency_limit_exceeded":
    case "rate_limit_exceeded":
      return { status: 429, type: "rate_limit_error", retryable: true };
    case "code_attempts_exceeded":
    case "code_resend_limited":
    case "sign_in_limited":
      return { status: 429, type: "rate_limit_error", retryable: false };
    case "upstream_error":
      return { status: 502, type: "api_error", retryable: true };
    case "no_healthy_backend":
    case "service_unavailable":
      return { status: 503, type: "api_error", retryable: true };
    case "upstream_timeout":
      return { status: 504, type: "api_error", retryable: true };
    case "internal_error":
      return { status: 500, type: "api_error", retryable: true };
  }
}

export function fail(code: ErrorCode, message: string, extra: Omit<Failure, "code" | "message"> = {}): Failure {
  return { code, message, ...extra };
}

/** The OpenAI error body: `{"error":{"message","type","param","code"}}`. */
export function errorBody(failure: Failure): { error: { message: string; type: string; param: string | null; code: string } } {
  return {
    error: {
      message: failure.message,
      type: describe(failure.code).type,
      param: failure.param ?? null,
      code: failure.code,
    },
  };
}

/** The wait a 429 or 503 names when its failure does not: a client that retries at once only adds load. */
export const RETRY_AFTER_DEFAULT_S = 1;

/**
 * Headers that go with a failure besides content-type. `retry-after` is whole seconds (HTTP's
 * delta-seconds: a client that reads `0.5` may retry at once or not at all) and is on every 429
 * and 503. `x-should-retry: false` tells the Anthropic and OpenAI SDKs, Claude Code and Codex not
 * to retry what a retry cannot fix (a wrong key, an empty wallet, an unknown model), which they
 * otherwise retry for minutes.
 */
export function errorHeaders(failure: Failure): Record<string, string> {
  const headers: Record<string, string> = {};
  const described = describe(failure.code);
  const retryable = failure.retryable ?? described.retryable;
  const waits = retryable && (described.status === 429 || described.status === 503);
  const retryAfterS = failure.retryAfterS ?? (waits ? RETRY_AFTER_DEFAULT_S : undefined);
  if (retryAfterS !== undefined) headers["retry-after"] = String(Math.max(1, Math.ceil(retryAfterS)));
  if (!retryable) headers["x-should-retry"] = "false";
  return headers;
}

export function errorResponse(failure: Failure, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(errorBody(failure)), {
    status: describe(failure.code).status,
    headers: { "content-type": "application/json", ...errorHeaders(failure), ...headers },
  });
}

/** A value that is a failure, its code one of the closed set (a value with any other `code` is not). */
export function isFailure(value: unknown): value is Failure {
  return typeof value === "object" && value !== null && "message" in value && "code" in value && errorCode.safeParse(value.code).success;
}

/** The first zod issue as a 400 naming the field (`messages.0.role`); an unknown field is named itself. */
export function zodFailure(error: z.ZodError): Failure {
  const issue = error.issues[0]!;
  if (issue.code === "unrecognized_keys") {
    const param = [...issue.path, issue.keys[0]!].map(String).join(".");
    return fail("invalid_request", `Unrecognized request argument supplied: ${param}`, { param });
  }
  const param = issue.path.map(String).join(".") || null;
  return fail("invalid_request", param ? `Invalid value for '${param}': ${issue.message}` : issue.message, { param });
}
