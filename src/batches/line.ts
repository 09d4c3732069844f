/**
 * One batch line through the same operation a live request takes (chat, embeddings, or the
 * Responses wire into chat): the runner's caller, admission, residency, pools, hold and
 * settlement, as the key that created the batch. Its reply becomes the output line's `response`.
 */
import { COST_HEADER } from "../admission/costReply.ts";
import type { GatewayDeps } from "../admission/deps.ts";
import { atBatchPrice, atBatchPrices } from "../catalog/catalog.ts";
import { errorBody, fail, type Failure, isFailure } from "../errors.ts";
import { describe } from "../errors.ts";
import type { KeyRecord, KeyStore } from "../keys/store.ts";
import { failureToAnthropicError } from "../wires/messages/errors.ts";
import { messagesOutputLimit, messagesToChat } from "../wires/messages/request.ts";
import { chatToMessage } from "../wires/messages/response.ts";
import { responsesOutputLimit, responsesToChat } from "../wires/responses/request.ts";
import { chatToResponse } from "../wires/responses/response.ts";
import { chat, type ChatWire } from "../operations/chat/chat.ts";
import { createEmbeddings } from "../operations/embeddings/embeddings.ts";
import type { OperationInput } from "../operations/input.ts";
import type { OperationResult, Reply } from "../operations/result.ts";
import type { BatchEndpoint } from "./lines.ts";

/** A line's reply: its status, its body as the live request's, what it was billed. */
export interface LineReply {
  statusCode: number;
  body: unknown;
  costMicro: bigint;
}

/** The key that created the batch, found by its id (a batch stores no key): revoked or expired since, the line is refused. */
function keyById(keys: KeyStore, keyId: string): KeyStore {
  const byId: KeyStore = Object.create(keys);
  byId.authenticate = async (): Promise<KeyRecord | Failure> => {
    const key = await keys.get(keyId);
    if (!key || key.revokedAt) return fail("invalid_api_key", "The API key that created this batch has been revoked.");
    if (key.expiresAt && key.expiresAt.getTime() <= Date.now())
      return fail("invalid_api_key", "The API key that created this batch expired.");
    return key;
  };
  return byId;
}

/** A refusal as the line's wire says it: Anthropic's error on the Messages wire, OpenAI's elsewhere. */
function refusedReply(failure: Failure, endpoint?: BatchEndpoint): LineReply {
  if (endpoint === "/v1/messages") {
    const { status, body } = failureToAnthropicError(failure);
    return { statusCode: status, body, costMicro: 0n };
  }
  return { statusCode: describe(failure.code).status, body: errorBody(failure), costMicro: 0n };
}

function costOf(headers: Record<string, string>): bigint {
  const cost = headers[COST_HEADER];
  return cost && /^\d+$/.test(cost) ? BigInt(cost) : 0n;
}

/** A whole reply's body as text (a JSON reply is a string; a stream of bytes is read). */
async function replyText(reply: Reply): Promise<string> {
  return typeof reply.body === "string" ? reply.body : await new Response(reply.body).text();
}

async function lineReply(result: OperationResult, endpoint?: BatchEndpoint): Promise<LineReply> {
  if (result.kind === "refused") return refusedReply(result.failure, endpoint);
  if (result.kind === "stream") {
    // Checked out at validation; a stream's relay is left so that it is cut and billed once.
    result.relay.leave();
    return refusedReply(fail("invalid_request", "A batch line cannot stream.", { param: "stream" }));
  }
  return { statusCode: 200, body: JSON.parse(await replyText(result)), costMicro: costOf(result.headers) };
}

/** The line's input as a transport's: its body already read, the batch creator's credentials. */
function lineInput(deps: GatewayDeps, line: LineInput, body: Record<string, unknown>): OperationInput {
  const text = JSON.stringify(body);
  return {
    ...line,
    json: async () => ({ value: body, text }),
    form: async () => null,
    origin: deps.env.PUBLIC_URL ?? "",
  };
}

/**
 * Runs one line's body as `keyId` under `requestId` (the line's own, so that a line run again is billed once).
 * @example await runLine(deps, { endpoint: "/v1/embeddings", requestId, keyId, body, signal })
 */
export async function runLine(
  deps: GatewayDeps,
  line: {
    endpoint: BatchEndpoint;
    requestId: string;
    keyId: string;
    /** The batch's `x-darvaze-residency`, as its creation sent it (the key's own setting applies besides). */
    residency: string | null;
    /** The line is at the batch price (its batch's estimate says so): run in the country, held and settled at the batch prices. */
    batchPrice: boolean;
    body: Record<string, unknown>;
    signal: AbortSignal;
  },
): Promise<LineReply> {
  const refused = line.batchPrice ? batchPriceGone(deps, line.body) : null;
  if (refused) return refusedReply(refused, line.endpoint);
  const catalog = line.batchPrice ? atBatchPrices(deps.catalog) : deps.catalog;
  const lineDeps: GatewayDeps = { ...deps, catalog, keys: keyById(deps.keys, line.keyId) };
  // The one place a request is marked a batch line: its limits are the worker's, not the key's live ones.
  // A line at the batch price runs in the country only: its in-country backend bills the batch price.
  const credentials = { key: null, origin: null, residency: line.batchPrice ? "in-country" : line.residency, batch: true as const };
  const input: LineInput = { requestId: line.requestId, credentials, signal: line.signal };
  const { body } = line;
  if (line.endpoint === "/v1/chat/completions") return lineReply(await chat(lineInput(deps, input, body), lineDeps));
  if (line.endpoint === "/v1/responses") return responsesLine(lineDeps, input, body);
  if (line.endpoint === "/v1/messages") return messagesLine(lineDeps, input, body);
  return lineReply(await createEmbeddings(lineInput(deps, input, body), lineDeps));
}

/**
 * The refusal of a line at the batch price whose model lost its batch price since the batch was
 * created: it is not run at another price than its batch promised (nor billed).
 */
function batchPriceGone(deps: Pick<GatewayDeps, "catalog">, body: Record<string, unknown>): Failure | null {
  const model = deps.catalog.get(String(body.model));
  if (model && atBatchPrice(model)) return null;
  const message = `${String(body.model)} has no batch price any more; this batch's lines of it run only at the batch price, so this one was not run.`;
  return fail("model_forbidden", message, { param: "model" });
}

/** A Messages line: translated into chat and its reply presented as a message, as the live route does. */
async function messagesLine(deps: GatewayDeps, input: LineInput, body: Record<string, unknown>): Promise<LineReply> {
  const translated = messagesToChat(body);
  if (isFailure(translated)) return refusedReply(translated, "/v1/messages");
  const wire: ChatWire = {
    present: (reply, facts) => chatToMessage(reply, { requestId: input.requestId, model: translated.request.model }, facts.hostedCalls),
    lowerToWindow: true,
    outputLimitWording: messagesOutputLimit,
  };
  return lineReply(await chat(lineInput(deps, input, translated.chat), deps, wire), "/v1/messages");
}

/** What a translated line hands the chat operation besides its body. */
type LineInput = {
  requestId: string;
  credentials: { key: null; origin: null; residency: string | null; batch: true };
  signal: AbortSignal;
};

/** A Responses line: translated into chat and its reply presented as a response, as the live route does. */
async function responsesLine(deps: GatewayDeps, input: LineInput, body: Record<string, unknown>): Promise<LineReply> {
  const translated = responsesToChat(body);
  if (isFailure(translated)) return refusedReply(translated);
  const createdAt = Math.floor(Date.now() / 1000);
  const context = {
    requestId: input.requestId,
    model: translated.request.model,
    createdAt,
    request: translated.request,
    toolNames: translated.toolNames,
  };
  const wire: ChatWire = {
    present: (reply) => chatToResponse(reply, context, Math.floor(Date.now() / 1000)),
    outputLimitWording: responsesOutputLimit,
  };
  return lineReply(await chat(lineInput(deps, input, translated.chat), deps, wire));
}
