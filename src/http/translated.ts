/**
 * What the HTTP routes of the translated wires (Responses, Messages, Gemini) share: the wire's
 * body becomes a chat body inside the chat operation (src/operations/chat/chat.ts: caller, then
 * body, then admission); src/wires/through.ts writes the relay's events as the wire's; a count
 * request's prompt is counted as admission counts it (countTranslatedPrompt).
 */
import { fail, type Failure } from "../errors.ts";
import { chat, type ChatWire } from "../operations/chat/chat.ts";
import type { GatewayDeps } from "../admission/deps.ts";
import type { FreeGate } from "../admission/free.ts";
import type { KeyRecord } from "../keys/store.ts";
import { isFailure } from "./guard.ts";
import { jsonLimits, type OperationInput } from "../operations/input.ts";
import type { OperationResult, Reply } from "../operations/run.ts";
import { httpInput, readJsonBodyText } from "./request.ts";
import { type Credentials, enter } from "../admission/caller.ts";
import { operationModel } from "../admission/model.ts";
import type { ChatCompletion } from "../wires/chat.ts";
import { countChatPrompt } from "../wires/through.ts";

/** A wire's own reading of a request, and the chat body it translates to. */
export interface WireRequest<W> {
  request: W;
  chat: Record<string, unknown>;
}

/**
 * Runs a wire's request down the chat path: `translate` turns the JSON body (read only once the
 * caller is known) into a chat body, or into the 400 the chat path records and returns;
 * `present` turns a whole reply into the wire's, before the request is settled (chat.ts), so a
 * whole reply's body is the wire's own. Returns the chat result and the wire's own reading of
 * the request, when it got that far.
 */
export async function chatThroughWire<W>(
  deps: GatewayDeps,
  request: Request,
  requestId: string,
  wire: {
    translate: (raw: unknown, headers: Headers) => WireRequest<W> | Failure;
    present: (reply: ChatCompletion, request: W, facts: { hostedCalls: number }) => unknown;
  },
  options: Pick<ChatWire, "lowerToWindow" | "outputLimitWording"> & { credentials?: Credentials } = {},
): Promise<{ result: OperationResult; wire: W | null }> {
  let read: W | null = null;
  const input: OperationInput = {
    ...httpInput(request, requestId, deps.env.PUBLIC_URL),
    ...(options.credentials ? { credentials: options.credentials } : {}),
    json: async (limits) => {
      const body = await readJsonBodyText(request, limits);
      if (isFailure(body)) return body;
      const translated = wire.translate(body.value, request.headers);
      if (isFailure(translated)) return translated;
      read = translated.request;
      // The chat body sent on is the translation: its bytes are what the prompt bound measures.
      return { value: translated.chat, text: JSON.stringify(translated.chat) };
    },
  };
  const result = await chat(input, deps, {
    ...(options.lowerToWindow ? { lowerToWindow: true } : {}),
    ...(options.outputLimitWording ? { outputLimitWording: options.outputLimitWording } : {}),
    // Called only after the body was read and translated.
    present: (reply, facts) => wire.present(reply, read!, facts),
  });
  return { result, wire: read };
}

/** A translated wire's whole reply: the body chat.ts presented, with the reply's headers. */
export function presentedReply(result: Pick<Reply, "body" | "headers">, headers: Record<string, string>): Response {
  return new Response(result.body, { status: 200, headers: { "content-type": "application/json", ...headers, ...result.headers } });
}

/** Sets a stream's reply headers (Elysia's `set`), as the chat route does. */
export function streamHeaders(set: { headers: Record<string, string | number> }, requestId: string, headers: Record<string, string>): void {
  Object.assign(set.headers, headers);
  set.headers["content-type"] = "text/event-stream";
  set.headers["cache-control"] = "no-cache";
  set.headers["x-request-id"] = requestId;
}

/** A count request as its wire read it: the chat model it names, and its prompt as chat messages and tools. */
export interface CountRequest {
  model: string;
  prompt: () => { messages: Record<string, unknown>[]; tools: unknown } | Failure;
}

/**
 * A translated wire's count request (Messages' count_tokens, Gemini's countTokens): the prompt's
 * tokens by the gateway's own count, what admission uses (src/wires/through.ts countChatPrompt),
 * not the vendor's tokenizer. Free of charge, not of limits: it needs a key and a chat model of
 * the catalog, takes one of the key's free slots within its FREE_RPM (src/admission/free.ts)
 * before the body is read, and counts in the key's own turn on the tokenizer threads. `read`
 * reads the wire's body (or the 400 naming its field); `model`, a model the path names, is
 * checked before the body is read. Returns the count, or the failure the wire answers in its shape.
 */
export async function countTranslatedPrompt(
  request: Request,
  deps: GatewayDeps,
  gate: FreeGate,
  wire: { credentials: Credentials; model?: string; read: (raw: unknown) => CountRequest | Failure },
): Promise<number | Failure> {
  const caller = await enter(deps, wire.credentials);
  if (isFailure(caller)) return caller;
  const release = gate.enter(caller.key, "count_tokens");
  if (isFailure(release)) return release;
  try {
    return await countWithin(request, deps, caller.key, wire);
  } finally {
    release();
  }
}

async function countWithin(
  request: Request,
  deps: GatewayDeps,
  key: KeyRecord,
  wire: { model?: string; read: (raw: unknown) => CountRequest | Failure },
): Promise<number | Failure> {
  const named = wire.model === undefined ? null : operationModel(deps, wire.model, "chat", key);
  if (isFailure(named)) return named;
  const body = await readJsonBodyText(request, jsonLimits(deps.env));
  if (isFailure(body)) return body;
  const read = wire.read(body.value);
  if (isFailure(read)) return read;
  const model = named ?? operationModel(deps, read.model, "chat", key);
  if (isFailure(model)) return model;
  const prompt = read.prompt();
  if (isFailure(prompt)) return prompt;
  const tokens = await countChatPrompt(prompt.messages, prompt.tools, key.id);
  return tokens ?? fail("service_unavailable", "The tokenizer is busy; try again shortly.", { retryAfterS: 1 });
}
