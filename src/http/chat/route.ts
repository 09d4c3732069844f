/**
 * POST /v1/chat/completions over HTTP: the request's headers and body in, the chat operation
 * (src/operations/chat/chat.ts), a JSON reply or an SSE body out.
 */
import type { GatewayDeps } from "../../admission/deps.ts";
import { chat } from "../../operations/chat/chat.ts";
import { sseBody } from "./sse.ts";
import { resultResponse } from "../guard.ts";
import { httpInput } from "../request.ts";

/** The HTTP route: the request's headers and body in, a JSON reply or an SSE body out. */
export async function chatCompletions(
  request: Request,
  requestId: string,
  deps: GatewayDeps,
  set: { headers: Record<string, string | number> },
) {
  const result = await chat(httpInput(request, requestId, deps.env.PUBLIC_URL), deps);
  if (result.kind !== "stream") return resultResponse(result, requestId);
  Object.assign(set.headers, result.headers);
  set.headers["content-type"] = "text/event-stream";
  set.headers["x-request-id"] = requestId;
  return sseBody(result.relay);
}
