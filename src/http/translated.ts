/**
 * What the routes of the translated wires (Responses, Messages) share: the caller and the body
 * read once, then the one chat path (chat/route.ts `runChat`), and the relay's frames re-written
 * in the wire's own events. Nothing here meters or settles: the chat path did.
 */
import type { Caller } from "../admission/admission.ts";
import { recordRefusal } from "../admission/admission.ts";
import type { Failure } from "../errors.ts";
import { relayFrames, type RelayFrame } from "../wires/chat.ts";
import type { ChatRun } from "./chat/route.ts";
import type { EdgeDeps } from "./deps.ts";
import { callerOf, isFailure } from "./guard.ts";
import { readJsonBody } from "./request.ts";

/** A wire's stream translation: its opening events, then the events of each relay frame. */
export interface WireStream {
  start(): string;
  frame(frame: RelayFrame): string;
}

export interface Arrival {
  requestId: string;
  startedMs: number;
}

/** The caller and the JSON body, or the refusal (recorded) to answer in the wire's shape. */
export async function callerAndBody(request: Request, deps: EdgeDeps, arrival: Arrival): Promise<{ caller: Caller; raw: unknown } | Failure> {
  const record = (keyId: string | null, failure: Failure) =>
    recordRefusal(deps, { requestId: arrival.requestId, keyId, operation: "chat", model: null, startedMs: arrival.startedMs }, failure);
  const caller = await callerOf(request, deps);
  if (isFailure(caller)) {
    record(null, caller);
    return caller;
  }
  const raw = await readJsonBody(request, deps.env.BODY_BYTES_MAX);
  if (isFailure(raw)) {
    record(caller.key.id, raw);
    return raw;
  }
  return { caller, raw };
}

/** A body the wire's own translation refused, recorded like any refusal before admission. */
export function recordWireRefusal(deps: EdgeDeps, arrival: Arrival, caller: Caller, failure: Failure): void {
  recordRefusal(deps, { requestId: arrival.requestId, keyId: caller.key.id, operation: "chat", model: null, startedMs: arrival.startedMs }, failure);
}

const encoder = new TextEncoder();

/**
 * The relay's frames re-written by `wire`. Leaving early (the client went away) returns the
 * relay's generator, which starts its drain-and-abort like a chat client's departure.
 */
export async function* translateRelay(run: Extract<ChatRun, { kind: "stream" }>, wire: WireStream): AsyncGenerator<Uint8Array> {
  try {
    yield encoder.encode(wire.start());
    for await (const bytes of run.frames) {
      let text = "";
      for (const frame of relayFrames(bytes)) text += wire.frame(frame);
      if (text !== "") yield encoder.encode(text);
    }
  } finally {
    await run.frames.return(undefined);
  }
}

/** Sets a stream's reply headers (Elysia's `set`), as the chat route does. */
export function streamHeaders(set: { headers: Record<string, string | number> }, requestId: string, headers: Record<string, string>): void {
  Object.assign(set.headers, headers);
  set.headers["content-type"] = "text/event-stream";
  set.headers["cache-control"] = "no-cache";
  set.headers["x-request-id"] = requestId;
}
