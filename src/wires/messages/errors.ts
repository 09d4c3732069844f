/**
 * The gateway's closed set of errors (src/errors.ts) in Anthropic's shape:
 * `{"type":"error","error":{"type":…,"message":…}}`, with the status the gateway gives each code.
 * One exhaustive switch, so a new code cannot ship without its Anthropic type.
 */
import { describe, type ErrorCode, type Failure } from "../../errors.ts";

export type AnthropicErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "billing_error"
  | "permission_error"
  | "not_found_error"
  | "request_too_large"
  | "rate_limit_error"
  | "api_error"
  | "timeout_error"
  | "overloaded_error";

export function anthropicErrorType(code: ErrorCode): AnthropicErrorType {
  switch (code) {
    case "invalid_json":
    case "invalid_request":
    case "context_length_exceeded":
    case "invalid_value":
    case "idempotency_conflict":
    case "wallet_not_funded":
    case "key_limit_reached":
    case "replay_refused":
    case "code_invalid":
    case "code_expired":
      return "invalid_request_error";
    case "invalid_api_key":
    case "admin_unauthorized":
    case "session_required":
    case "fresh_sign_in_required":
      return "authentication_error";
    case "insufficient_quota":
      return "billing_error";
    case "origin_not_allowed":
    case "model_forbidden":
    case "permission_denied":
    case "cross_site_refused":
    case "role_refused":
    case "ceiling_exceeded":
      return "permission_error";
    case "model_not_found":
    case "model_retired":
    case "not_found":
      return "not_found_error";
    case "request_too_large":
      return "request_too_large";
    case "concurrency_limit_exceeded":
    case "rate_limit_exceeded":
    case "code_attempts_exceeded":
    case "code_resend_limited":
    case "sign_in_limited":
      return "rate_limit_error";
    case "upstream_error":
    case "internal_error":
      return "api_error";
    case "upstream_timeout":
      return "timeout_error";
    case "no_healthy_backend":
    case "service_unavailable":
      return "overloaded_error";
  }
}

/** The status and body of a failure on the Messages wire; the field at fault joins the message. */
export function failureToAnthropicError(failure: Failure): {
  status: number;
  body: { type: "error"; error: { type: AnthropicErrorType; message: string } };
} {
  const message = failure.param && !failure.message.includes(failure.param) ? `${failure.param}: ${failure.message}` : failure.message;
  return { status: describe(failure.code).status, body: { type: "error", error: { type: anthropicErrorType(failure.code), message } } };
}
