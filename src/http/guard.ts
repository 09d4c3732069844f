/** Checks shared by every /v1 route: browser origin, then the API key. */
import type { z } from "zod";
import { errorResponse, fail, isFailure, type Failure } from "../errors.ts";
import type { KeyRecord } from "../keys/store.ts";
import type { EdgeDeps } from "./deps.ts";
import { bearerToken, checkOrigin } from "./request.ts";

export async function authorize(request: Request, deps: EdgeDeps): Promise<KeyRecord | Failure> {
  const refused = checkOrigin(request, deps.env.ALLOWED_ORIGINS);
  if (refused) return refused;
  return deps.keys.authenticate(bearerToken(request));
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
