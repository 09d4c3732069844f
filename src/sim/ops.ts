/** What the simulator's non-chat operations share: auth, JSON bodies, errors and the log entry. */
import type { z } from "zod";
import type { ChatContext } from "./chat.ts";
import { authorized, unauthorizedResponse } from "./chat.ts";
import type { SimOperation } from "./log.ts";
import { errorBody } from "./wire.ts";

export function simError(status: number, message: string, param: string | null = null): Response {
  const type = status === 400 ? "invalid_request_error" : "server_error";
  return new Response(errorBody({ message, type, param }), { status, headers: { "content-type": "application/json" } });
}

/** Runs an operation: checks the key, rolls 429/500 like chat does, and logs what it served. */
export async function simOperation(
  context: ChatContext,
  req: Request,
  operation: SimOperation,
  serve: () => Promise<{ response: Response; model: string; units: number; promptTokens?: number }>,
  /** The vendor's key check; OpenAI's bearer token unless given. */
  isAuthorized: (req: Request) => boolean = (r) => authorized(context.options, r),
): Promise<Response> {
  if (!isAuthorized(req)) return unauthorizedResponse();
  const seq = context.log.begin();
  const startedAt = Date.now();
  const entry = (model: string, status: number, units: number, promptTokens = 0) => ({
    seq,
    requestId: req.headers.get("x-request-id"),
    model,
    stream: false,
    promptTokens,
    completionTokens: 0,
    finishReason: status === 200 ? ("stop" as const) : ("error" as const),
    status,
    aborted: false,
    startedAt,
    endedAt: Date.now(),
    operation,
    units,
  });
  if (context.roll(context.options.rateLimitRate)) {
    context.log.record(entry("", 429, 0));
    return new Response(errorBody({ message: "Simulated rate limit.", type: "rate_limit_error" }), {
      status: 429,
      headers: { "retry-after": "1", "content-type": "application/json" },
    });
  }
  if (context.roll(context.options.failRate)) {
    context.log.record(entry("", 500, 0));
    return simError(500, "Simulated upstream failure.");
  }
  try {
    const served = await serve();
    context.log.record(entry(served.model, served.response.status, served.units, served.promptTokens));
    return served.response;
  } catch (error) {
    context.log.record(entry("", 500, 0));
    return simError(500, `Simulator failed: ${(error as Error).message}`);
  }
}

/** A JSON body checked by a schema, or a 400 reply. */
export async function simJson<T extends z.ZodType>(req: Request, schema: T): Promise<z.infer<T> | Response> {
  let raw: unknown;
  try {
    raw = await req.json();
  } catch {
    return simError(400, "The body is not valid JSON.");
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success)
    return simError(400, parsed.error.issues[0]?.message ?? "invalid body", parsed.error.issues[0]?.path.join(".") ?? null);
  return parsed.data;
}

/** A 400 reply thrown out of `serve` so the log records it as refused, with no units. */
export class SimRefusal extends Error {
  constructor(readonly response: Response) {
    super("refused");
  }
}
