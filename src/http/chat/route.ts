/**
 * POST /v1/chat/completions over HTTP: the request's headers and body in, the chat operation
 * (src/operations/chat/chat.ts), a JSON reply or an SSE body out.
 */
import type { EdgeDeps } from "../../admission/deps.ts";
import { chat } from "../../operations/chat/chat.ts";
import { sseBody } from "./sse.ts";
import { failed } from "../guard.ts";
import { jsonLimits } from "../../operations/input.ts";
import { credentialsOf, readJsonBodyText } from "../request.ts";

/** The HTTP route: the request's headers and body in, a JSON reply or an SSE body out. */
export async function chatCompletions(
  request: Request,
  requestId: string,
  deps: EdgeDeps,
  set: { headers: Record<string, string | number> },
) {
  const result = await chat(deps, {
    requestId,
    credentials: credentialsOf(request),
    readBody: () => readJsonBodyText(request, jsonLimits(deps.env)),
    signal: request.signal,
  });
  if (result.kind === "refused") return failed(result.failure, requestId, result.headers);
  if (result.kind === "json") {
    return new Response(result.body, {
      status: 200,
      headers: { "content-type": "application/json", "x-request-id": requestId, ...result.headers },
    });
  }
  Object.assign(set.headers, result.headers);
  set.headers["content-type"] = "text/event-stream";
  set.headers["x-request-id"] = requestId;
  return sseBody(result.relay);
}
