/**
 * POST /v1/chat/completions. Flow: auth → parse → validate → roll 429 → roll 500 → plan the
 * reply → send it. The log entry is written before the reply's last byte leaves (see log.ts).
 *
 * With ttftMs = itlMs = 0 and no injected stream fault, the whole reply is built as one string and
 * sent at once: no timers, no stream machinery, which keeps the simulator well above the gateway
 * it benchmarks.
 */
import type { z } from "zod";
import { Exchange, type ExchangeContext } from "./exchange.ts";
import type { SimGate } from "./gate.ts";
import { ChatRequestSchema, type ChatRequest, type SimOptions } from "./options.ts";
import { simCompletion, simPromptText } from "./text.ts";
import { simChatPromptTokens } from "./tokens.ts";
import { openAIToolPlan, type OpenAIToolPlan } from "./openaiTools.ts";
import { simStructuredPieces } from "./tools.ts";
import { ChunkFrames, completionBody, doneFrame, errorBody, usageOf, type WireFinishReason } from "./wire.ts";

export type ChatContext = ExchangeContext & {
  /** Live options: tests change them between requests. */
  readonly options: SimOptions;
  /** Seeded roll: true with probability `rate`. */
  roll(rate: number): boolean;
  /** The batch limit (`options.concurrency`). */
  readonly gate: SimGate;
  /** Count requests answered (count.ts): free, so not in the log. */
  counts: number;
};

type Plan = {
  id: string;
  created: number;
  /** The tier the reply says served it, or null (servedTier). */
  serviceTier: string | null;
  /** Content tokens, or the pieces of a tool call's arguments: of each choice (all alike). */
  deltas: string[];
  /** Choices (`n`): their chunks go out in turn, position by position (chunk i is choice i mod n). */
  choices: number;
  tool: OpenAIToolPlan | null;
  finishReason: WireFinishReason;
  includeUsage: boolean;
  continuousUsage: boolean;
  omitUsage: boolean;
  usageScale: number;
  ttftMs: number;
  itlMs: number;
  failAfterChunks: number | null;
  stallAfterChunks: number | null;
};

const encoder = new TextEncoder();
const jsonHeaders = { "content-type": "application/json" } as const;
const sseHeaders = { "content-type": "text/event-stream", "cache-control": "no-cache" } as const;

const unauthorizedBytes = encoder.encode(
  errorBody({
    message: "Incorrect API key provided.",
    type: "invalid_request_error",
    code: "invalid_api_key",
  }),
);
const rateLimitedBytes = encoder.encode(
  errorBody({
    message: "Rate limit reached for requests (simulated).",
    type: "requests",
    code: "rate_limit_exceeded",
  }),
);
const serverErrorBytes = encoder.encode(
  errorBody({
    message: "The server had an error while processing your request (simulated).",
    type: "server_error",
  }),
);
const queueFullBytes = encoder.encode(errorBody({ message: "The simulator's queue is full.", type: "server_error", code: "overloaded" }));
const badJsonBytes = encoder.encode(
  errorBody({
    message: "We could not parse the JSON body of your request.",
    type: "invalid_request_error",
  }),
);

/** True when the request carries the configured key, or when no key is configured. */
export function authorized(options: SimOptions, req: Request): boolean {
  return options.apiKey === null || req.headers.get("authorization") === `Bearer ${options.apiKey}`;
}

export function unauthorizedResponse(): Response {
  return new Response(unauthorizedBytes, { status: 401, headers: jsonHeaders });
}

export async function handleChat(context: ChatContext, req: Request): Promise<Response> {
  const exchange = new Exchange(context, req.headers.get("x-request-id"));
  if (!authorized(context.options, req)) return refuse(exchange, 401, unauthorizedBytes);
  const parsed = await parseChatRequest(req);
  if (!parsed.ok) return refuse(exchange, 400, parsed.error);
  const body = parsed.body;
  exchange.model = body.model;
  exchange.stream = body.stream === true;
  context.metrics.see(body.model);
  if (context.roll(context.options.rateLimitRate)) {
    return refuse(exchange, 429, rateLimitedBytes, { "retry-after": "1" });
  }
  if (context.roll(context.options.failRate)) return refuse(exchange, 500, serverErrorBytes);
  if (!(await context.gate.enter(req.signal))) {
    if (req.signal.aborted) {
      exchange.abort();
      return new Response(null, { status: 499 });
    }
    return refuse(exchange, 503, queueFullBytes);
  }
  void exchange.whenDone().then(() => context.gate.leave());
  exchange.setPrompt(simChatPromptTokens(body), { read: context.options.cacheReadTokens, write: 0 });
  const plan = planReply(context.options, body, exchange.seq);
  if (context.options.cancelBills === "all") exchange.billedIfCancelled = tokensAt(plan, chunkCount(plan));
  if (!exchange.stream) return completeReply(exchange, req.signal, plan);
  return needsPacing(plan) ? pacedStream(exchange, req.signal, plan) : instantStream(exchange, plan);
}

function refuse(exchange: Exchange, status: number, body: Uint8Array | string, headers: Record<string, string> = {}): Response {
  exchange.finish("error", status);
  return new Response(body, { status, headers: { ...jsonHeaders, ...headers } });
}

type Parsed = { ok: true; body: ChatRequest } | { ok: false; error: Uint8Array | string };

/** The validated body, or the serialized 400 error to send. */
async function parseChatRequest(req: Request): Promise<Parsed> {
  let raw: unknown;
  try {
    raw = await req.json();
  } catch {
    return { ok: false, error: badJsonBytes };
  }
  const result = ChatRequestSchema.safeParse(raw);
  if (!result.success) return { ok: false, error: invalidRequestBody(result.error) };
  return { ok: true, body: result.data };
}

function invalidRequestBody(error: z.ZodError): string {
  const issue = error.issues[0];
  const param = issue ? pathToParam(issue.path) : null;
  return errorBody({
    message: `Invalid value for '${param ?? "body"}': ${issue?.message ?? "invalid request"}`,
    type: "invalid_request_error",
    param,
  });
}

/** ["messages", 0, "content"] → "messages[0].content", as OpenAI names params. */
function pathToParam(path: readonly PropertyKey[]): string | null {
  let param = "";
  for (const key of path) {
    param += typeof key === "number" ? `[${key}]` : `${param === "" ? "" : "."}${String(key)}`;
  }
  return param === "" ? null : param;
}

function planReply(options: SimOptions, body: ChatRequest, seq: number): Plan {
  const maxTokens = body.max_completion_tokens ?? body.max_tokens ?? null;
  const cut = maxTokens !== null && maxTokens < options.outputTokens;
  const tokens = cut ? maxTokens : options.outputTokens;
  const promptText = simPromptText(body.messages);
  const tool = openAIToolPlan(body, seq);
  const structured = tool ? null : structuredReply(body, maxTokens);
  return {
    id: `chatcmpl-sim-${seq}`,
    created: Math.floor(Date.now() / 1000),
    deltas: tool ? tool.pieces : (structured?.deltas ?? simCompletion({ seed: options.seed, promptText, tokens })),
    choices: body.n ?? 1,
    tool,
    finishReason: tool ? "tool_calls" : (structured ? structured.cut : cut) ? "length" : "stop",
    serviceTier: servedTier(options, body),
    includeUsage: body.stream_options?.include_usage === true,
    continuousUsage: body.stream_options?.continuous_usage_stats === true,
    omitUsage: options.omitUsage,
    usageScale: options.usageScale,
    ttftMs: options.ttftMs,
    itlMs: options.itlMs,
    failAfterChunks: options.failAfterChunks,
    stallAfterChunks: options.stallAfterChunks,
  };
}

/** The tier a reply says served it: for a request that asked one besides auto or default, that one or `servedServiceTier`. */
function servedTier(options: SimOptions, body: ChatRequest): string | null {
  const asked = (body as { service_tier?: unknown }).service_tier;
  if (typeof asked !== "string" || asked === "auto" || asked === "default") return null;
  return options.servedServiceTier ?? asked;
}

/** A reply to `response_format: json_schema` keeps to its schema (simStructuredPieces). */
function structuredReply(body: ChatRequest, maxTokens: number | null): { deltas: string[]; cut: boolean } | null {
  const format = body.response_format as { type?: unknown; json_schema?: { schema?: unknown } } | undefined;
  if (format?.type !== "json_schema") return null;
  const { pieces, cut } = simStructuredPieces(format.json_schema?.schema ?? {}, maxTokens);
  return { deltas: pieces, cut };
}

/** Delta chunks of the whole reply: each choice's deltas. */
function chunkCount(plan: Plan): number {
  return plan.deltas.length * plan.choices;
}

/** Completion tokens of one choice once `deltas` of its deltas are sent: one per delta, except a tool call's pieces. */
function choiceTokensAt(plan: Plan, deltas: number): number {
  return deltas === 0 ? 0 : plan.tool ? (plan.tool.tokensAfter[deltas - 1] ?? 0) : deltas;
}

/** Completion tokens of all choices once `chunks` delta chunks are sent (chunk i is choice i mod n). */
function tokensAt(plan: Plan, chunks: number): number {
  const position = Math.floor(chunks / plan.choices);
  const ahead = chunks % plan.choices;
  return (plan.choices - ahead) * choiceTokensAt(plan, position) + ahead * choiceTokensAt(plan, position + 1);
}

/** The log knows stop, length and failures; a tool call is a normal stop. */
function logReason(plan: Plan): "stop" | "length" {
  return plan.finishReason === "length" ? "length" : "stop";
}

async function completeReply(exchange: Exchange, signal: AbortSignal, plan: Plan): Promise<Response> {
  const tokens = tokensAt(plan, chunkCount(plan));
  const waitMs = plan.ttftMs + plan.itlMs * Math.max(0, plan.deltas.length - 1);
  if (waitMs > 0 && !(await sleepUnlessAborted(waitMs, signal))) {
    exchange.abort();
    return new Response(null, { status: 499 });
  }
  const usage = plan.omitUsage ? null : usageOf(exchange.promptTokens, tokens, exchange.cacheReadTokens, plan.usageScale);
  const body = completionBody({
    id: plan.id,
    created: plan.created,
    model: exchange.model,
    content: plan.tool ? null : plan.deltas.join(""),
    toolCall: plan.tool ? { id: plan.tool.id, name: plan.tool.name, arguments: plan.deltas.join("") } : null,
    finishReason: plan.finishReason,
    usage,
    choices: plan.choices,
    serviceTier: plan.serviceTier,
  });
  exchange.sent = tokens;
  exchange.finish(logReason(plan), 200);
  return new Response(body, { headers: jsonHeaders });
}

/** Sleeps; false if the signal aborted first (the timer is then cleared). */
export function sleepUnlessAborted(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/** A chunk count option that fires within this reply (at most one per content chunk + the end). */
function firesWithin(afterChunks: number | null, tokens: number): boolean {
  return afterChunks !== null && afterChunks <= tokens;
}

function needsPacing(plan: Plan): boolean {
  const tokens = chunkCount(plan);
  return plan.ttftMs > 0 || plan.itlMs > 0 || firesWithin(plan.failAfterChunks, tokens) || firesWithin(plan.stallAfterChunks, tokens);
}

function framesFor(exchange: Exchange, plan: Plan): ChunkFrames {
  return new ChunkFrames({
    id: plan.id,
    created: plan.created,
    model: exchange.model,
    serviceTier: plan.serviceTier,
    promptTokens: exchange.promptTokens,
    cachedTokens: exchange.cacheReadTokens,
    includeUsage: plan.includeUsage && !plan.omitUsage,
    continuousUsage: plan.continuousUsage && !plan.omitUsage,
    usageScale: plan.usageScale,
  });
}

/** The frames after the last content chunk: each choice's finish, optional usage, [DONE]. */
function closingFrames(frames: ChunkFrames, plan: Plan): string {
  const tokens = tokensAt(plan, chunkCount(plan));
  const usage = plan.includeUsage && !plan.omitUsage ? frames.usage(tokens) : "";
  let closing = "";
  for (let index = 0; index < plan.choices; index++) closing += frames.finish(plan.finishReason, tokens, index);
  return closing + usage + doneFrame;
}

/** The opening chunk of each choice: the role, and for a tool call its id and name. */
function openingFrame(frames: ChunkFrames, plan: Plan): string {
  let opening = "";
  for (let index = 0; index < plan.choices; index++) {
    opening += plan.tool ? frames.toolStart(plan.tool.id, plan.tool.name, index) : frames.role(index);
  }
  return opening;
}

/** Delta chunk `i` (0-based, choice i mod n): a content token, or a piece of the tool call's arguments. */
function deltaFrame(frames: ChunkFrames, plan: Plan, i: number): string {
  const index = i % plan.choices;
  const delta = plan.deltas[Math.floor(i / plan.choices)] ?? "";
  const tokens = tokensAt(plan, i + 1);
  return plan.tool ? frames.toolArguments(delta, tokens, index) : frames.content(delta, tokens, index);
}

function instantStream(exchange: Exchange, plan: Plan): Response {
  const frames = framesFor(exchange, plan);
  let body = openingFrame(frames, plan);
  for (let i = 0; i < chunkCount(plan); i++) body += deltaFrame(frames, plan, i);
  body += closingFrames(frames, plan);
  exchange.sent = tokensAt(plan, chunkCount(plan));
  exchange.finish(logReason(plan), 200);
  return new Response(body, { headers: sseHeaders });
}

function pacedStream(exchange: Exchange, signal: AbortSignal, plan: Plan): Response {
  signal.addEventListener("abort", () => exchange.abort(), { once: true });
  const frames = framesFor(exchange, plan);
  const body = new ReadableStream({
    type: "direct",
    pull: (controller) => pump(controller, exchange, plan, frames),
  });
  return new Response(body, { headers: sseHeaders });
}

async function pump(controller: ReadableStreamDirectController, exchange: Exchange, plan: Plan, frames: ChunkFrames): Promise<void> {
  if (!(await send(controller, openingFrame(frames, plan)))) return exchange.abort();
  const tokens = chunkCount(plan);
  for (let i = 0; i <= tokens; i++) {
    if (plan.failAfterChunks === i) return destroy(controller, exchange);
    if (plan.stallAfterChunks === i) return stall(exchange);
    if (i === tokens) break;
    const delayMs = i === 0 ? plan.ttftMs : plan.itlMs;
    if (delayMs > 0) await Bun.sleep(delayMs);
    if (exchange.done) return;
    if (!(await send(controller, deltaFrame(frames, plan, i)))) return exchange.abort();
    exchange.sent = tokensAt(plan, i + 1);
  }
  exchange.finish(logReason(plan), 200);
  await send(controller, closingFrames(frames, plan));
  controller.close();
}

/** Writes and flushes one frame; false once the caller has gone away. */
export async function send(controller: ReadableStreamDirectController, frame: string): Promise<boolean> {
  const written = await controller.write(frame);
  controller.flush();
  return written > 0;
}

/** How long written chunks get to leave before an injected failure drops the connection. */
const FAIL_FLUSH_MS = 25;

/**
 * Drops the connection without the chunked terminator, as a crashing host would. Bun discards
 * bytes still buffered when a body source rejects, so the written chunks get `FAIL_FLUSH_MS` to
 * leave first (one event-loop turn was not always enough on a busy core). Rejecting with `undefined` (not an Error) keeps Bun from printing a stack trace
 * for every injected failure.
 */
export async function destroy(controller: ReadableStreamDirectController, exchange: Exchange): Promise<void> {
  exchange.finish("error", 200);
  controller.flush();
  await Bun.sleep(FAIL_FLUSH_MS);
  return Promise.reject(undefined);
}

/** Goes silent with the connection open until the caller gives up or the simulator stops. */
export function stall(exchange: Exchange): Promise<void> {
  exchange.stalled = true;
  return exchange.whenDone();
}
