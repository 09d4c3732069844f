/** What every /v1 route shares: the caller (admission's one rule), error replies. */
import { enter, type Caller } from "../admission/caller.ts";
import { errorResponse, isFailure, type Failure } from "../errors.ts";
import type { GatewayDeps } from "../admission/deps.ts";
import type { Refused, Reply } from "../operations/run.ts";
import { credentialsOf } from "./request.ts";

/** Browser origin, the API key and residency, read from an HTTP request. */
export function callerOf(request: Request, deps: Pick<GatewayDeps, "env" | "keys">): Promise<Caller | Failure> {
  return enter(deps, credentialsOf(request));
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

/** An operation's whole result (a refusal or a reply) as an HTTP reply. */
export function resultResponse(result: Refused | Reply, requestId: string): Response {
  if (result.kind === "refused") return failed(result.failure, requestId, result.headers);
  return new Response(result.body, {
    status: 200,
    headers: { "content-type": result.contentType, "x-request-id": requestId, ...result.headers },
  });
}

export { isFailure };
export { zodFailure } from "../errors.ts";
