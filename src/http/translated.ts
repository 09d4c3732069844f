/**
 * What the HTTP routes of the translated wires (Responses, Messages, Gemini) share: the wire's
 * body becomes a chat body inside the chat operation (src/operations/chat/chat.ts: caller, then
 * body, then admission); src/wires/through.ts re-writes the relay's frames in the wire's events.
 */
import type { Failure } from "../errors.ts";
import { chat, type ChatInput, type ChatResult } from "../operations/chat/chat.ts";
import type { EdgeDeps } from "../admission/deps.ts";
import { isFailure } from "./guard.ts";
import { jsonLimits } from "../operations/input.ts";
import { credentialsOf, readJsonBodyText } from "./request.ts";
import type { Credentials } from "../admission/admission.ts";

/**
 * Runs a wire's request down the chat path: `translate` turns the JSON body (read only once the
 * caller is known) into a chat body, or into the 400 the chat path records and returns.
 * Returns the chat result and the wire's own reading of the request, when it got that far.
 */
export async function chatThroughWire<W>(
  deps: EdgeDeps,
  request: Request,
  requestId: string,
  translate: (raw: unknown, headers: Headers) => { request: W; chat: Record<string, unknown> } | Failure,
  options: Pick<ChatInput, "lowerToWindow" | "outputLimitWording"> & { credentials?: Credentials } = {},
): Promise<{ result: ChatResult; wire: W | null }> {
  let wire: W | null = null;
  const result = await chat(deps, {
    ...(options.lowerToWindow ? { lowerToWindow: true } : {}),
    ...(options.outputLimitWording ? { outputLimitWording: options.outputLimitWording } : {}),
    requestId,
    credentials: options.credentials ?? credentialsOf(request),
    readBody: async () => {
      const read = await readJsonBodyText(request, jsonLimits(deps.env));
      if (isFailure(read)) return read;
      const translated = translate(read.value, request.headers);
      if (isFailure(translated)) return translated;
      wire = translated.request;
      // The chat body sent on is the translation: its bytes are what the prompt bound measures.
      return { value: translated.chat, text: JSON.stringify(translated.chat) };
    },
    signal: request.signal,
  });
  return { result, wire };
}

/** Sets a stream's reply headers (Elysia's `set`), as the chat route does. */
export function streamHeaders(set: { headers: Record<string, string | number> }, requestId: string, headers: Record<string, string>): void {
  Object.assign(set.headers, headers);
  set.headers["content-type"] = "text/event-stream";
  set.headers["cache-control"] = "no-cache";
  set.headers["x-request-id"] = requestId;
}
