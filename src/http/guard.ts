/** What every /v1 route shares: the caller (admission's one rule), error replies. */
import type { z } from "zod";
import { enter, type Caller } from "../admission/admission.ts";
import { errorResponse, fail, isFailure, type Failure } from "../errors.ts";
import type { EdgeDeps } from "./deps.ts";
import { credentialsOf } from "./request.ts";

/** Browser origin, the API key and residency, read from an HTTP request. */
export function callerOf(request: Request, deps: EdgeDeps): Promise<Caller | Failure> {
  return enter(deps, credentialsOf(request));
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

export function json(value: unknown, requestId: string, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(value), {
    status,
    headers: { "content-type": "application/json", "x-request-id": requestId, ...headers },
  });
}

export function failed(failure: Failure, requestId: string, headers: Record<string, string> = {}): Response {
  return errorResponse(failure, { "x-request-id": requestId, ...headers });
}

export { isFailure };
