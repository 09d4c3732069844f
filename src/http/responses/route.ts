/**
 * POST /v1/responses: OpenAI's Responses API, stateless, translated to the one chat path
 * (src/wires/responses) so that it shares admission, reserve bounds, live metering, the cut at
 * the wallet, disconnect rules and residency with chat. Errors keep the OpenAI shape.
 */
import { fail, isFailure } from "../../errors.ts";
import { parseChatCompletion } from "../../wires/chat.ts";
import { responsesOutputLimit, responsesToChat } from "../../wires/responses/request.ts";
import { chatToResponse, type ResponsesContext } from "../../wires/responses/response.ts";
import { ResponsesStream } from "../../wires/responses/stream.ts";
import type { EdgeDeps } from "../../admission/deps.ts";
import { failed, json } from "../guard.ts";
import { wireBody } from "../../wires/through.ts";
import { chatThroughWire, streamHeaders } from "../translated.ts";

const nowS = () => Math.floor(Date.now() / 1000);

type ResponsesTranslation = Exclude<ReturnType<typeof responsesToChat>, { code: string }>;

export async function createResponse(
  request: Request,
  requestId: string,
  deps: EdgeDeps,
  set: { headers: Record<string, string | number> },
) {
  const createdAt = nowS();
  const { result, wire } = await chatThroughWire<ResponsesTranslation>(
    deps,
    request,
    requestId,
    (raw) => {
      const translated = responsesToChat(raw);
      return isFailure(translated) ? translated : { request: translated, chat: translated.chat };
    },
    { outputLimitWording: responsesOutputLimit },
  );
  if (result.kind === "refused") return failed(result.failure, requestId, result.headers);
  const ctx: ResponsesContext = { requestId, model: wire!.request.model, createdAt, request: wire!.request, toolNames: wire!.toolNames };
  if (result.kind === "json") {
    const reply = parseChatCompletion(result.body);
    if (!reply) return failed(fail("upstream_error", "The upstream reply could not be read as a completion."), requestId, result.headers);
    return json(chatToResponse(reply, ctx, nowS()), requestId, 200, result.headers);
  }
  streamHeaders(set, requestId, result.headers);
  return wireBody(result.relay, new ResponsesStream(ctx, nowS));
}
