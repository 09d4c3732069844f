/**
 * Google's Gemini API for any model of the catalog (`@google/genai` with `httpOptions.baseUrl`,
 * the Gemini CLI with GOOGLE_GEMINI_BASE_URL):
 *
 *   POST /v1beta/models/{model}:generateContent, :streamGenerateContent (SSE with `alt=sse`, a
 *        JSON array without it): translated to the one chat path (src/wires/gemini)
 *   POST …:countTokens: the gateway's own count, within the key's free slots and rate
 *   POST …:embedContent, :batchEmbedContents: the embeddings operation
 *   GET  /v1beta/models, /v1beta/models/{model}: the catalog's chat and embedding models
 *
 * `/v1/models/{model}:…` (the SDK's `apiVersion: "v1"`) is answered the same way. The key comes
 * as `x-goog-api-key` or `?key=` (never logged: access lines carry the path only), or as
 * `Authorization: Bearer`. Errors keep Google's shape.
 */
import { z } from "zod";
import type { Credentials } from "../../admission/caller.ts";
import { servedModel } from "../../admission/model.ts";
import type { FreeGate } from "../../admission/free.ts";
import type { CatalogModel } from "../../catalog/catalog.ts";
import { errorHeaders, fail, isFailure, type Failure } from "../../errors.ts";
import { failureToGoogleError } from "../../wires/gemini/errors.ts";
import { geminiObject } from "../../wires/gemini/spellings.ts";
import {
  contentsToChat,
  countTokensRequest,
  GEMINI_PARTS_MAX,
  generateContentToChat,
  geminiOutputLimit,
  toolsToChat,
} from "../../wires/gemini/request.ts";
import { EMBEDDING_DIMENSIONS_MAX, EMBEDDING_INPUTS_MAX } from "../../operations/embeddings/schema.ts";
import { chatToGemini } from "../../wires/gemini/response.ts";
import { GeminiStream } from "../../wires/gemini/stream.ts";
import { enter } from "../../admission/caller.ts";
import { createEmbeddings } from "../../operations/embeddings/embeddings.ts";
import type { GatewayDeps } from "../../admission/deps.ts";
import { zodFailure } from "../guard.ts";
import { bearerToken, credentialsOf, decodedSegment, httpInput, readJsonBodyText } from "../request.ts";
import { wireBody } from "../../wires/through.ts";
import { chatThroughWire, type CountRequest, countTranslatedPrompt, presentedReply, streamHeaders } from "../translated.ts";
import { COST_HEADER } from "../../admission/costReply.ts";

/** The actions of `models/{model}:{action}` that are paid operations (they write their own access line). */
export const PAID_ACTIONS: ReadonlySet<string> = new Set([
  "generateContent",
  "streamGenerateContent",
  "embedContent",
  "batchEmbedContents",
]);

/** Paths of Google's wire: its errors are answered in Google's shape. */
export function speaksGoogle(request: Request): boolean {
  return new URL(request.url).pathname.startsWith("/v1beta/") || sentByGemini(request);
}

/** A request from a Gemini client on a path the OpenAI wire shares (`/v1/models`): its key in Google's places. */
export function sentByGemini(request: Request): boolean {
  return request.headers.has("x-goog-api-key") || new URL(request.url).searchParams.has("key");
}

/** `models/{model}:{action}` of a path's last segment, decoded (`*` of the route, decodeParams), or null. */
export function modelAction(decoded: string): { model: string; action: string } | null {
  const at = decoded.lastIndexOf(":");
  if (at <= 0) return null;
  return { model: decoded.slice(0, at), action: decoded.slice(at + 1) };
}

/** Whether a POST on the wire's model path is a paid operation. */
export function isPaidGeminiPath(pathname: string): boolean {
  const action = modelAction(decodedSegment(pathname.slice(pathname.lastIndexOf("/") + 1)) ?? "")?.action;
  return action !== undefined && PAID_ACTIONS.has(action);
}

/** The caller as the Gemini clients present it: `x-goog-api-key`, `?key=`, else a Bearer token. */
export function geminiCredentials(request: Request): Credentials {
  const key = request.headers.get("x-goog-api-key") || new URL(request.url).searchParams.get("key") || bearerToken(request);
  return { ...credentialsOf(request), key };
}

function replyHeaders(requestId: string, headers: Record<string, string> = {}): Record<string, string> {
  return { "content-type": "application/json", "x-request-id": requestId, ...headers };
}

/** A failure in Google's shape, with the failure's headers (`retry-after` …) and the rate headers that still apply. */
export function googleFailed(failure: Failure, requestId: string, headers: Record<string, string> = {}): Response {
  const { status, body } = failureToGoogleError(failure);
  return new Response(JSON.stringify(body), { status, headers: replyHeaders(requestId, { ...errorHeaders(failure), ...headers }) });
}

/** POST /v1beta/models/{model}:{action}. */
export function geminiAction(request: Request, requestId: string, deps: GatewayDeps, gate: FreeGate, set: StreamSet, rest: string) {
  const target = modelAction(rest);
  switch (target?.action) {
    case "generateContent":
    case "streamGenerateContent":
      return generateContent(request, requestId, deps, set, target);
    case "countTokens":
      return countGeminiTokens(request, requestId, deps, gate, target.model);
    case "embedContent":
    case "batchEmbedContents":
      return embedContent(request, requestId, deps, target);
    default:
      return googleFailed(fail("not_found", "No such endpoint."), requestId);
  }
}

type StreamSet = { headers: Record<string, string | number> };

async function generateContent(
  request: Request,
  requestId: string,
  deps: GatewayDeps,
  set: StreamSet,
  target: { model: string; action: string },
) {
  const stream = target.action === "streamGenerateContent";
  const ctx = { requestId, model: target.model };
  const { result } = await chatThroughWire(
    deps,
    request,
    requestId,
    { translate: (raw) => generateContentToChat(raw, target.model, stream), present: (reply) => chatToGemini(reply, ctx) },
    { credentials: geminiCredentials(request), outputLimitWording: geminiOutputLimit },
  );
  if (result.kind === "refused") return googleFailed(result.failure, requestId, result.headers);
  if (result.kind === "reply") return presentedReply(result, replyHeaders(requestId));
  const sse = new URL(request.url).searchParams.get("alt") === "sse";
  streamHeaders(set, requestId, result.headers);
  if (!sse) set.headers["content-type"] = "application/json";
  return wireBody(result.relay, new GeminiStream(ctx, sse));
}

/** …:countTokens: the prompt's tokens by the gateway's own count, as `{totalTokens}` (translated.ts countTranslatedPrompt). */
async function countGeminiTokens(request: Request, requestId: string, deps: GatewayDeps, gate: FreeGate, modelId: string) {
  const credentials = geminiCredentials(request);
  const counted = await countTranslatedPrompt(request, deps, gate, {
    credentials,
    model: modelId,
    read: (raw) => countRequestOf(raw, modelId),
  });
  if (isFailure(counted)) return googleFailed(counted, requestId);
  return new Response(JSON.stringify({ totalTokens: counted }), { status: 200, headers: replyHeaders(requestId) });
}

function countRequestOf(raw: unknown, model: string): CountRequest | Failure {
  const parsed = countTokensRequest.safeParse(raw);
  if (!parsed.success) return zodFailure(parsed.error);
  const { generateContentRequest: whole, ...fields } = parsed.data;
  const body = { ...(whole ?? fields), contents: whole?.contents ?? fields.contents ?? [] };
  const prompt = () => {
    const messages = contentsToChat(body);
    return isFailure(messages) ? messages : { messages, tools: toolsToChat(body).tools };
  };
  return { model, prompt };
}

/**
 * Embedding requests: one `content` of text parts, and `outputDimensionality`; every field known
 * (any other is a 400 naming it), each in either spelling. `taskType` and `title` are accepted
 * and not sent on (no embeddings backend behind the operation takes them; they have no price);
 * a batch's requests name their `model` as the SDKs send it, the path's model answers.
 */
const embedRequest = geminiObject({
  content: geminiObject({
    role: z.string().max(16).optional(),
    parts: z
      .array(geminiObject({ text: z.string() }))
      .min(1)
      .max(GEMINI_PARTS_MAX),
  }),
  model: z.string().max(256).optional(),
  outputDimensionality: z.number().int().min(1).max(EMBEDDING_DIMENSIONS_MAX).optional(),
  taskType: z.string().max(64).optional(),
  title: z.string().optional(),
});
const batchEmbedRequest = geminiObject({ requests: z.array(embedRequest).min(1).max(EMBEDDING_INPUTS_MAX) });
/** An embedding request as the embeddings operation's body (its texts, floats), or the 400 naming the field. */
function embedToOpenAI(raw: unknown, model: string, batch: boolean): Record<string, unknown> | Failure {
  const parsed = batch ? batchEmbedRequest.safeParse(raw) : embedRequest.safeParse(raw);
  if (!parsed.success) return zodFailure(parsed.error);
  const requests: z.infer<typeof embedRequest>[] = "requests" in parsed.data ? parsed.data.requests : [parsed.data];
  const dimensions = new Set(requests.map((r) => r.outputDimensionality));
  if (dimensions.size > 1)
    return fail("invalid_request", "Every request of a batch must ask for the same outputDimensionality.", { param: "requests" });
  const [size] = dimensions;
  const input = requests.map((r) => r.content.parts.map((p) => p.text).join("\n"));
  return { model, input, encoding_format: "float", ...(size !== undefined ? { dimensions: size } : {}) };
}

/** :embedContent and :batchEmbedContents through the embeddings operation, its reply and errors in Google's shape. */
async function embedContent(request: Request, requestId: string, deps: GatewayDeps, target: { model: string; action: string }) {
  const batch = target.action === "batchEmbedContents";
  const input = {
    ...httpInput(request, requestId, deps.env.PUBLIC_URL),
    credentials: geminiCredentials(request),
    json: async (limits: Parameters<ReturnType<typeof httpInput>["json"]>[0]) => {
      const read = await readJsonBodyText(request, limits);
      if (isFailure(read)) return read;
      const body = embedToOpenAI(read.value, target.model, batch);
      return isFailure(body) ? body : { value: body, text: JSON.stringify(body) };
    },
  };
  const result = await createEmbeddings(input, deps, ({ vectors }) =>
    batch ? { embeddings: vectors.map((values) => ({ values })) } : { embedding: { values: vectors[0] } },
  );
  if (result.kind === "refused") {
    const { failure } = result;
    const sent = { ...errorHeaders(failure), ...result.headers };
    const headers: Record<string, string> = {};
    for (const name of ["retry-after", "x-should-retry", COST_HEADER]) if (sent[name] !== undefined) headers[name] = sent[name];
    return googleFailed(fail(failure.code, failure.message, { param: failure.param ?? null }), requestId, headers);
  }
  return new Response(result.body, { status: 200, headers: replyHeaders(requestId, result.headers) });
}

/** The supported methods of a catalog model, or null for a model this wire does not serve. */
function methodsOf(model: CatalogModel): string[] | null {
  if (model.operation === "chat") return ["generateContent", "streamGenerateContent", "countTokens"];
  return model.operation === "embeddings" ? ["embedContent", "batchEmbedContents"] : null;
}

function googleModel(model: CatalogModel, methods: string[]): Record<string, unknown> {
  return {
    name: `models/${model.id}`,
    baseModelId: model.id,
    version: "001",
    displayName: model.id,
    inputTokenLimit: model.contextWindow,
    outputTokenLimit: model.outputMax ?? model.contextWindow,
    supportedGenerationMethods: methods,
  };
}

/** GET /v1beta/models: the catalog's chat and embedding models in Google's list shape. */
export async function listGeminiModels(request: Request, requestId: string, deps: GatewayDeps): Promise<Response> {
  const caller = await enter(deps, geminiCredentials(request));
  if (isFailure(caller)) return googleFailed(caller, requestId);
  const models = deps.catalog.list().flatMap((m) => {
    const methods = methodsOf(m);
    return methods ? [googleModel(m, methods)] : [];
  });
  return new Response(JSON.stringify({ models }), { status: 200, headers: replyHeaders(requestId) });
}

/** GET /v1beta/models/{model}: one model by its id or an alias (`models/` in front or not). */
export async function getGeminiModel(request: Request, requestId: string, deps: GatewayDeps, id: string): Promise<Response> {
  const caller = await enter(deps, geminiCredentials(request));
  if (isFailure(caller)) return googleFailed(caller, requestId);
  const model = servedModel(deps.catalog, id.replace(/^models\//, ""));
  if (isFailure(model)) return googleFailed(model, requestId);
  const methods = methodsOf(model);
  if (!methods) return googleFailed(fail("model_not_found", `The model \`${model.id}\` is not served on this API.`), requestId);
  return new Response(JSON.stringify(googleModel(model, methods)), { status: 200, headers: replyHeaders(requestId) });
}
