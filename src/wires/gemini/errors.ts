/**
 * The gateway's closed set of errors (src/errors.ts) in Google's shape:
 * `{"error":{"code":<http status>,"message":…,"status":"INVALID_ARGUMENT"…}}`, with the status the
 * gateway gives each code. One exhaustive switch, so a new code cannot ship without its status name.
 */
import { describe, type ErrorCode, type Failure } from "../../errors.ts";

export type GoogleStatus =
  | "INVALID_ARGUMENT"
  | "UNAUTHENTICATED"
  | "PERMISSION_DENIED"
  | "NOT_FOUND"
  | "FAILED_PRECONDITION"
  | "RESOURCE_EXHAUSTED"
  | "INTERNAL"
  | "UNAVAILABLE"
  | "DEADLINE_EXCEEDED";

export function googleStatus(code: ErrorCode): GoogleStatus {
  switch (code) {
    case "invalid_json":
    case "invalid_request":
    case "context_length_exceeded":
    case "invalid_value":
    case "idempotency_conflict":
    case "replay_refused":
    case "code_invalid":
    case "code_expired":
    case "request_too_large":
      return "INVALID_ARGUMENT";
    case "invalid_api_key":
    case "admin_unauthorized":
    case "session_required":
    case "fresh_sign_in_required":
      return "UNAUTHENTICATED";
    case "origin_not_allowed":
    case "model_forbidden":
    case "cross_site_refused":
    case "role_refused":
    case "ceiling_exceeded":
    case "permission_denied":
      return "PERMISSION_DENIED";
    case "model_not_found":
    case "model_retired":
    case "not_found":
      return "NOT_FOUND";
    case "insufficient_quota":
    case "wallet_not_funded":
    case "key_limit_reached":
      return "FAILED_PRECONDITION";
    case "concurrency_limit_exceeded":
    case "rate_limit_exceeded":
    case "code_attempts_exceeded":
    case "code_resend_limited":
    case "sign_in_limited":
      return "RESOURCE_EXHAUSTED";
    case "upstream_error":
    case "internal_error":
      return "INTERNAL";
    case "upstream_timeout":
      return "DEADLINE_EXCEEDED";
    case "no_healthy_backend":
    case "service_unavailable":
      return "UNAVAILABLE";
  }
}

export interface GoogleErrorBody {
  error: { code: number; message: string; status: GoogleStatus };
}

/** The status and body of a failure on the Gemini wire; the field at fault joins the message. */
export function failureToGoogleError(failure: Failure): { status: number; body: GoogleErrorBody } {
  const status = describe(failure.code).status;
  const message = failure.param && !failure.message.includes(failure.param) ? `${failure.param}: ${failure.message}` : failure.message;
  return { status, body: { error: { code: status, message, status: googleStatus(failure.code) } } };
}
