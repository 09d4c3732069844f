/**
 * POST /v1/chat/completions: the whole path of a paid request.
 *
 *   edge:  the caller (origin, key, residency) → body (size, JSON, schema) → model → budget and
 *          reserve → admission (src/admission: the key actor's slot and hold, or 429/402)
 *   pool actor (this node): backend, upstream call, retries before the first byte
 *   edge:  relay the reply (JSON, or frames metered live by relay.ts), then settle the actual
 *          usage through the admission, exactly once, whatever happened.
 *
 * `chat` is the path itself, for any transport: the HTTP route below and the internal NATS
 * service (src/internal/service.ts) both call it and only translate its result.
 */
import type { ChatOutcome, PoolActor } from "../../../actors/pool/pool.ts";
import {
  admit,
  type Admission,
  type Caller,
  operationModel,
  recordRefusal,
  type Reserve,
  servingPool,
  usedTokens,
} from "../../admission/admission.ts";
import type { CatalogModel } from "../../catalog/catalog.ts";
import { fail, type Failure } from "../../errors.ts";
import { choicesRefusal } from "../../providers/choices.ts";
import type { Usage } from "../../providers/types.ts";
import { countPromptTokens, countTokens } from "../../tokens/count.ts";
import type { EdgeDeps } from "../deps.ts";
import { failed, isFailure, zodFailure } from "../guard.ts";
import { credentialsOf, readJsonBodyText } from "../request.ts";
import { type Credentials, enter } from "../../admission/admission.ts";
import { chatBudget, exactChatReserve, type ChatBudget } from "./budget.ts";
import { Relay, sseBody } from "./relay.ts";
import { marksCache } from "./cache.ts";
import { chatRequest, isPlainChatRequest, type ChatRequest } from "./schema.ts";

type Prepared = { body: ChatRequest; model: CatalogModel; budget: ChatBudget; pool: PoolActor };

async function prepare(input: ChatInput, deps: EdgeDeps, caller: Caller): Promise<Prepared | Failure> {
  const read = await input.readBody();
  if (isFailure(read)) return read;
  const raw = read.value;
  let body: ChatRequest;
  if (isPlainChatRequest(raw)) body = raw;
  else {
    const parsed = chatRequest.safeParse(raw);
    if (!parsed.success) return zodFailure(parsed.error);
    body = parsed.data;
  }
  const model = operationModel(deps, body.model, "chat");
  if (isFailure(model)) return model;
  // Measured on the decoded text: an invalid byte became U+FFFD, three bytes when sent on.
  const bodyBytes = () => Buffer.byteLength(read.text, "utf8");
  const budget = await chatBudget(body, model, { fairnessKey: caller.key.id, bodyBytes, paidFields: deps.pools.get(model.id)?.paidFields });
  if (isFailure(budget)) return budget;
  const choicesRefused = choicesRefusal(deps.pools.get(model.id)?.backends ?? [], body.n ?? 1, model.id);
  if (choicesRefused) return choicesRefused;
  const pool = servingPool(deps, model, caller.region);
  if (isFailure(pool)) return pool;
  return { body, model, budget, pool };
}

/**
 * The reserve of a chat request: the prompt's bound at the input price and the output budget of
 * every choice at the output price. At the wallet's edge the prompt is counted exactly. A prompt
 * that marks `cache_control` may be written to the vendor's cache, priced above input: its bound
 * is then taken at the cache-write price (a vendor writes only at such marks).
 */
export function chatReserve(body: ChatRequest, budget: ChatBudget, model: CatalogModel, fairnessKey: string): Reserve {
  const outputUnits = budget.reservedOutputTokens * budget.choices;
  const writePrice = model.price.tomanPer1m.get("cache_write_token");
  const inputPricePer1mMax = writePrice !== undefined && writePrice > budget.inputPricePer1m && marksCache(body) ? writePrice : undefined;
  return {
    input: { unit: "input_token", units: budget.promptTokensBound, pricePer1m: budget.inputPricePer1m },
    ...(inputPricePer1mMax ? { inputPricePer1mMax } : {}),
    output: { unit: "output_token", units: outputUnits, pricePer1m: budget.outputPricePer1m },
    tokens: budget.promptTokensBound + outputUnits,
    exact: false,
    exactInputUnits: async () => (await exactChatReserve(body, budget, fairnessKey)).promptTokens,
  };
}

/** A chat request as any transport receives it. */
export interface ChatInput {
  requestId: string;
  credentials: Credentials;
  /** The body as JSON and the text it was parsed from, read only once the caller is known (or the 400/413 it deserves). */
  readBody: () => Promise<{ value: unknown; text: string } | Failure>;
  /** Aborted when the caller goes away: a stream is then drained, cut and billed once. */
  signal: AbortSignal;
}

/** What a chat request came to: a refusal, a whole reply, or a stream to relay. */
export type ChatResult =
  | { kind: "refused"; failure: Failure; headers: Record<string, string> }
  | { kind: "json"; body: string; headers: Record<string, string> }
  | { kind: "stream"; relay: Relay; headers: Record<string, string> };

/** The whole path of one chat request, whatever transport brought it. */
export async function chat(deps: EdgeDeps, input: ChatInput): Promise<ChatResult> {
  const { requestId } = input;
  const startedMs = performance.now();
  const caller = await enter(deps, input.credentials);
  if (isFailure(caller)) {
    recordRefusal(deps, { requestId, keyId: null, operation: "chat", model: null, startedMs }, caller);
    return { kind: "refused", failure: caller, headers: {} };
  }
  const prepared = await prepare(input, deps, caller);
  if (isFailure(prepared)) {
    recordRefusal(deps, { requestId, keyId: caller.key.id, operation: "chat", model: null, startedMs }, prepared);
    return { kind: "refused", failure: prepared, headers: {} };
  }
  const { model, body, budget, pool } = prepared;
  const admission = await admit(deps, {
    requestId,
    caller,
    model,
    operation: "chat",
    reserve: chatReserve(body, budget, model, caller.key.id),
    startedMs,
  });
  if ("failure" in admission) return { kind: "refused", failure: admission.failure, headers: admission.headers };

  const stream = body.stream === true;
  let outcome: ChatOutcome;
  try {
    outcome = await pool.chat({
      body,
      stream,
      maxTokens: budget.outputTokensMax,
      requestId,
      created: Math.floor(Date.now() / 1000),
      region: caller.region,
      // Only a stream is cut when its client leaves: Bun's request.signal costs about a tenth of
      // the throughput, and a whole reply is billed in full anyway.
      signal: stream ? input.signal : undefined,
    });
  } catch (error) {
    deps.log("error", "pool_failed", { requestId, error: (error as Error).message });
    outcome = {
      kind: "failed",
      backend: null,
      failure: { ...fail("internal_error", "The gateway failed to call the upstream."), retryable: false },
    };
  }
  if (outcome.kind === "failed") {
    await admission.settle({ input: 0, output: 0 }, outcome.backend?.name ?? null, 502);
    return { kind: "refused", failure: outcome.failure, headers: admission.headers };
  }
  if (outcome.kind === "json") {
    const usage = outcome.usage ?? (await countJsonUsage(body, outcome.body));
    const reply = outcome.body;
    await admission.settle(usedTokens(usage), outcome.backend.name, 200, {
      content: () => ({ prompt: body.messages, completion: jsonCompletionText(reply) }),
    });
    return { kind: "json", body: reply, headers: admission.headers };
  }
  return {
    kind: "stream",
    relay: new Relay(deps, admission as Admission, { body, budget }, outcome, input.signal),
    headers: admission.headers,
  };
}

/** The HTTP route: the request's headers and body in, a JSON reply or an SSE body out. */
export async function chatCompletions(
  request: Request,
  requestId: string,
  deps: EdgeDeps,
  set: { headers: Record<string, string | number> },
) {
  const result = await chat(deps, {
    requestId,
    credentials: credentialsOf(request),
    readBody: () => readJsonBodyText(request, deps.env.BODY_BYTES_MAX),
    signal: request.signal,
  });
  if (result.kind === "refused") return failed(result.failure, requestId, result.headers);
  if (result.kind === "json") {
    return new Response(result.body, {
      status: 200,
      headers: { "content-type": "application/json", "x-request-id": requestId, ...result.headers },
    });
  }
  Object.assign(set.headers, result.headers);
  set.headers["content-type"] = "text/event-stream";
  set.headers["x-request-id"] = requestId;
  return sseBody(result.relay);
}

/** Usage for a reply that reported none: the exact count of the prompt and the returned text. */
async function countJsonUsage(body: ChatRequest, reply: string): Promise<Usage> {
  return { inputTokens: await countPromptTokens(body.messages), outputTokens: await countTokens(jsonCompletionText(reply)) };
}

function jsonCompletionText(reply: string): string {
  let text = "";
  try {
    const parsed = JSON.parse(reply) as { choices?: { message?: { content?: unknown } }[] };
    for (const choice of parsed.choices ?? []) if (typeof choice.message?.content === "string") text += choice.message.content;
  } catch {}
  return text;
}
