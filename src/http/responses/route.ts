/**
 * POST /v1/responses: OpenAI's Responses API, stateless, translated to the one chat path
 * (src/wires/responses) so that it shares admission, reserve bounds, live metering, the cut at
 * the wallet, disconnect rules and residency with chat. Errors keep the OpenAI shape.
 */
import { failed, isFailure, json } from "../guard.ts";
import type { EdgeDeps } from "../deps.ts";
import { runChat } from "../chat/route.ts";
import { fail } from "../../errors.ts";
import { parseChatCompletion } from "../../wires/chat.ts";
import { responsesToChat } from "../../wires/responses/request.ts";
import { chatToResponse, type ResponsesContext } from "../../wires/responses/response.ts";
import { ResponsesStream } from "../../wires/responses/stream.ts";
import { callerAndBody, recordWireRefusal, streamHeaders, translateRelay } from "../translated.ts";

const nowS = () => Math.floor(Date.now() / 1000);

export async function createResponse(request: Request, requestId: string, deps: EdgeDeps, set: { headers: Record<string, string | number> }) {
  const arrival = { requestId, startedMs: performance.now() };
  const read = await callerAndBody(request, deps, arrival);
  if (isFailure(read)) return failed(read, requestId);
  const translated = responsesToChat(read.raw);
  if (isFailure(translated)) {
    recordWireRefusal(deps, arrival, read.caller, translated);
    return failed(translated, requestId);
  }
  const ctx: ResponsesContext = { requestId, model: translated.request.model, createdAt: nowS(), request: translated.request };
  const run = await runChat(deps, { request, requestId, caller: read.caller, raw: translated.chat, startedMs: arrival.startedMs });
  if (run.kind === "failed") return failed(run.failure, requestId, run.headers);
  if (run.kind === "json") {
    const reply = parseChatCompletion(run.body);
    if (!reply) return failed(fail("upstream_error", "The upstream reply could not be read as a completion."), requestId, run.headers);
    return json(chatToResponse(reply, ctx, nowS()), requestId, 200, run.headers);
  }
  streamHeaders(set, requestId, run.headers);
  return translateRelay(run, new ResponsesStream(ctx, nowS));
}
