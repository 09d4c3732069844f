/**
 * POST /v1/responses: OpenAI's Responses API, stateless, translated to the one chat path
 * (src/wires/responses) so that it shares admission, reserve bounds, live metering, the cut at
 * the wallet, disconnect rules and residency with chat. Errors keep the OpenAI shape.
 */
import { isFailure } from "../../errors.ts";
import { responsesOutputLimit, responsesToChat } from "../../wires/responses/request.ts";
import { chatToResponse, type ResponsesContext } from "../../wires/responses/response.ts";
import { ResponsesStream } from "../../wires/responses/stream.ts";
import type { GatewayDeps } from "../../admission/deps.ts";
import { failed } from "../guard.ts";
import { wireBody } from "../../wires/through.ts";
import { chatThroughWire, presentedReply, streamHeaders } from "../translated.ts";

const nowS = () => Math.floor(Date.now() / 1000);

type ResponsesTranslation = Exclude<ReturnType<typeof responsesToChat>, { code: string }>;

export async function createResponse(
  request: Request,
  requestId: string,
  deps: GatewayDeps,
  set: { headers: Record<string, string | number> },
) {
  const createdAt = nowS();
  const contextOf = (wire: ResponsesTranslation): ResponsesContext => ({
    requestId,
    model: wire.request.model,
    createdAt,
    request: wire.request,
    toolNames: wire.toolNames,
  });
  const { result, wire } = await chatThroughWire<ResponsesTranslation>(
    deps,
    request,
    requestId,
    {
      translate: (raw) => {
        const translated = responsesToChat(raw);
        return isFailure(translated) ? translated : { request: translated, chat: translated.chat };
      },
      present: (reply, wire) => chatToResponse(reply, contextOf(wire), nowS()),
    },
    { outputLimitWording: responsesOutputLimit },
  );
  if (result.kind === "refused") return failed(result.failure, requestId, result.headers);
  if (result.kind === "reply") return presentedReply(result, { "x-request-id": requestId });
  streamHeaders(set, requestId, result.headers);
  return wireBody(result.relay, new ResponsesStream(contextOf(wire!), nowS));
}
