/**
 * The flow shared by the simulator's other wire formats (anthropic.ts, gemini.ts, responses.ts): auth →
 * parse → roll 429 → roll 500 → plan → reply, with the same knobs (latency, failures, stalls)
 * and the same log as the OpenAI route. A wire format only says how to read a request and how
 * to write a reply; what is generated, and what is logged, is decided here.
 *
 * Tool calls: when the request offers tools and requires one (tool choice) or its last user
 * message names a tool, the reply is one deterministic call of that tool (arguments built from
 * its schema), never after a tool result: so tool streaming is testable without a model.
 */
import { destroy, send, sleepUnlessAborted, stall, type ChatContext } from "./chat.ts";
import { Exchange } from "./exchange.ts";
import type { SimOptions } from "./options.ts";
import { simCompletion, simPromptText } from "./text.ts";
import { simCountTokens, simPromptTokens } from "./tokens.ts";
import { simStructuredPieces, simToolArguments, splitByTokens, toolPieceTokens, toolToCall, type ToolQuestion } from "./tools.ts";

/** What the simulator reads from any vendor's request. */
export interface VendorRequest extends ToolQuestion {
  model: string;
  stream: boolean;
  /** Prompt tokens outside the messages' text and overhead: tools, schemas, tool calls, images (by tokens.ts's rule). */
  promptExtraTokens: number;
  maxTokens: number | null;
  /** Anthropic's web search tool offered: the most searches it allows (null: no `max_uses`); absent: not offered. */
  webSearchMaxUses?: number | null;
  /** Gemini's thinkingConfig.thinkingBudget: thoughts stop there (null or -1: no budget). */
  thinkingBudget?: number | null;
  /** A structured-output schema (Gemini's responseJsonSchema): the reply is JSON of its shape. */
  outputSchema?: unknown;
}

export interface PlannedChunk {
  kind: "text" | "tool";
  text: string;
  /** Completion tokens served once this chunk is sent. */
  tokensAfter: number;
}

export interface ReplyPlan {
  seq: number;
  model: string;
  promptTokens: number;
  /** Parts of promptTokens reported as read from / written to the prompt cache. */
  cacheReadTokens: number;
  cacheWriteTokens: number;
  cacheWrite1hTokens: number;
  /** Web searches run before the answer (their results are in promptTokens). */
  webSearchCalls: number;
  chunks: PlannedChunk[];
  tool: { name: string; argumentsJson: string } | null;
  finish: "stop" | "length" | "tool";
  tokens: number;
  thoughtTokens: number;
  /** How usage is reported (SimOptions.omitUsage, usageScale); read by the wires that honour them (Anthropic's). */
  usageReport: { omit: boolean; scale: number };
}

export interface Refusal {
  status: number;
  body: string;
  headers?: Record<string, string>;
}

export interface VendorWire {
  authorized(options: SimOptions, req: Request): boolean;
  unauthorized: Refusal;
  rateLimited: Refusal;
  serverError: Refusal;
  invalid(message: string): Refusal;
  /** Tool-call arguments are sent whole in one chunk (Gemini), not streamed in pieces. */
  toolArgumentsWhole: boolean;
  /** Reports `thoughtTokens` (Gemini's thoughtsTokenCount); other formats generate none. */
  reportsThoughtTokens: boolean;
  /** Reports cache writes (Anthropic's cache_creation_input_tokens); other formats have none. */
  reportsCacheWrites: boolean;
  /** The request, or why it is invalid. `path` carries the model for path-routed vendors. */
  parse(raw: unknown, req: Request): VendorRequest | string;
  /** The whole non-streamed reply body. */
  complete(plan: ReplyPlan): string;
  /** Stream frames: the opening, one per planned chunk, and the closing. */
  head(plan: ReplyPlan): string;
  chunk(plan: ReplyPlan, index: number): string;
  tail(plan: ReplyPlan): string;
}

const jsonHeaders = { "content-type": "application/json" } as const;
const sseHeaders = { "content-type": "text/event-stream", "cache-control": "no-cache" } as const;
export async function handleVendorChat(context: ChatContext, req: Request, wire: VendorWire): Promise<Response> {
  const exchange = new Exchange(context, req.headers.get("x-request-id"));
  exchange.path = new URL(req.url).pathname;
  if (!wire.authorized(context.options, req)) return refuse(exchange, wire.unauthorized);
  let raw: unknown;
  try {
    raw = await req.json();
  } catch {
    return refuse(exchange, wire.invalid("The request body is not valid JSON."));
  }
  const parsed = wire.parse(raw, req);
  if (typeof parsed === "string") return refuse(exchange, wire.invalid(parsed));
  exchange.model = parsed.model;
  exchange.stream = parsed.stream;
  context.metrics.see(parsed.model);
  if (context.roll(context.options.rateLimitRate)) return refuse(exchange, wire.rateLimited);
  if (context.roll(context.options.failRate)) return refuse(exchange, wire.serverError);
  const writes = wire.reportsCacheWrites;
  const cache = {
    read: context.options.cacheReadTokens,
    write: writes ? context.options.cacheWriteTokens : 0,
    write1h: writes ? context.options.cacheWrite1hTokens : 0,
  };
  // Searches run before the answer; their results are read as input, like the vendor bills them.
  const searches =
    parsed.webSearchMaxUses === undefined ? 0 : Math.min(context.options.webSearchCalls, parsed.webSearchMaxUses ?? Infinity);
  exchange.webSearchCalls = searches;
  const resultTokens = searches * context.options.webSearchResultTokens;
  exchange.setPrompt(simPromptTokens(parsed.messages) + parsed.promptExtraTokens + resultTokens, cache);
  const plan = planVendorReply(context.options, parsed, exchange, wire);
  if (context.options.cancelBills === "all") exchange.billedIfCancelled = served(plan, plan.tokens);
  if (!parsed.stream) return completeReply(exchange, req.signal, context.options, plan, wire);
  return streamReply(exchange, req.signal, context.options, plan, wire);
}

function refuse(exchange: Exchange, refusal: Refusal): Response {
  exchange.finish("error", refusal.status);
  return new Response(refusal.body, { status: refusal.status, headers: { ...jsonHeaders, ...refusal.headers } });
}

function planVendorReply(options: SimOptions, request: VendorRequest, exchange: Exchange, wire: VendorWire): ReplyPlan {
  const budget = request.thinkingBudget ?? -1;
  const thoughtTokens = wire.reportsThoughtTokens ? (budget >= 0 ? Math.min(options.thoughtTokens, budget) : options.thoughtTokens) : 0;
  const base = {
    seq: exchange.seq,
    model: request.model,
    promptTokens: exchange.promptTokens,
    cacheReadTokens: exchange.cacheReadTokens,
    cacheWriteTokens: exchange.cacheWriteTokens,
    cacheWrite1hTokens: exchange.cacheWrite1hTokens,
    webSearchCalls: exchange.webSearchCalls,
    thoughtTokens,
    usageReport: { omit: options.omitUsage, scale: options.usageScale },
  };
  const tool = toolToCall(request);
  if (tool) {
    const argumentsJson = JSON.stringify(simToolArguments(tool.schema));
    let served = "";
    const pieces = wire.toolArgumentsWhole ? [argumentsJson] : splitByTokens(argumentsJson, toolPieceTokens);
    const chunks = pieces.map((text): PlannedChunk => {
      served += text;
      return { kind: "tool", text, tokensAfter: simCountTokens(served) };
    });
    return { ...base, chunks, tool: { name: tool.name, argumentsJson }, finish: "tool", tokens: simCountTokens(argumentsJson) };
  }
  if (request.outputSchema !== undefined) {
    const { pieces, cut } = simStructuredPieces(request.outputSchema, request.maxTokens);
    const chunks = pieces.map((text, i): PlannedChunk => ({ kind: "text", text, tokensAfter: i + 1 }));
    return { ...base, chunks, tool: null, finish: cut ? "length" : "stop", tokens: pieces.length };
  }
  const cut = request.maxTokens !== null && request.maxTokens < options.outputTokens;
  const tokens = cut ? request.maxTokens! : options.outputTokens;
  const deltas = simCompletion({ seed: options.seed, promptText: simPromptText(request.messages), tokens });
  const chunks = deltas.map((text, i): PlannedChunk => ({ kind: "text", text, tokensAfter: i + 1 }));
  return { ...base, chunks, tool: null, finish: cut ? "length" : "stop", tokens };
}

/** Thinking tokens are generated and billed, so the log counts them with the rest. */
function served(plan: ReplyPlan, tokens: number): number {
  return tokens + plan.thoughtTokens;
}

async function completeReply(
  exchange: Exchange,
  signal: AbortSignal,
  options: SimOptions,
  plan: ReplyPlan,
  wire: VendorWire,
): Promise<Response> {
  const waitMs = options.ttftMs + options.itlMs * Math.max(0, plan.chunks.length - 1);
  if (waitMs > 0 && !(await sleepUnlessAborted(waitMs, signal))) {
    exchange.abort();
    return new Response(null, { status: 499 });
  }
  const body = wire.complete(plan);
  exchange.sent = served(plan, plan.tokens);
  exchange.finish(plan.finish === "length" ? "length" : "stop", 200);
  return new Response(body, { headers: jsonHeaders });
}

function streamReply(exchange: Exchange, signal: AbortSignal, options: SimOptions, plan: ReplyPlan, wire: VendorWire): Response {
  const { ttftMs, itlMs, failAfterChunks, stallAfterChunks } = options;
  const fires = (n: number | null) => n !== null && n <= plan.chunks.length;
  if (ttftMs === 0 && itlMs === 0 && !fires(failAfterChunks) && !fires(stallAfterChunks)) {
    let body = wire.head(plan);
    for (let i = 0; i < plan.chunks.length; i++) body += wire.chunk(plan, i);
    body += wire.tail(plan);
    exchange.sent = served(plan, plan.tokens);
    exchange.finish(plan.finish === "length" ? "length" : "stop", 200);
    return new Response(body, { headers: sseHeaders });
  }
  signal.addEventListener("abort", () => exchange.abort(), { once: true });
  const body = new ReadableStream({
    type: "direct",
    pull: async (controller) => {
      const head = wire.head(plan);
      // An empty write reads as "caller gone"; Gemini streams have no opening frame.
      if (head !== "" && !(await send(controller, head))) return exchange.abort();
      for (let i = 0; i <= plan.chunks.length; i++) {
        if (failAfterChunks === i) return destroy(controller, exchange);
        if (stallAfterChunks === i) return stall(exchange);
        if (i === plan.chunks.length) break;
        const delayMs = i === 0 ? ttftMs : itlMs;
        if (delayMs > 0) await Bun.sleep(delayMs);
        if (exchange.done) return;
        if (!(await send(controller, wire.chunk(plan, i)))) return exchange.abort();
        exchange.sent = served(plan, plan.chunks[i]!.tokensAfter);
      }
      exchange.sent = served(plan, plan.tokens);
      exchange.finish(plan.finish === "length" ? "length" : "stop", 200);
      await send(controller, wire.tail(plan));
      controller.close();
    },
  });
  return new Response(body, { headers: sseHeaders });
}
