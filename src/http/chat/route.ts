/**
 * POST /v1/chat/completions: the whole path of a paid request.
 *
 *   edge:  origin → key → body (size, JSON, schema) → model → budget and reserve
 *   key actor (over the bus, a small ticket): slot + hold, or 429/402
 *   pool actor (this node): backend, upstream call, retries before the first byte
 *   edge:  relay the reply (JSON, or SSE frames metered live by relay.ts), then settle the
 *          actual usage through the key actor, exactly once, whatever happened.
 */
import { ADMIT, EXTEND, SETTLE, type AdmitTicket, type Settlement } from "../../../actors/protocol.ts";
import { partitionOf } from "../../../actors/subjects.ts";
import type { ChatOutcome } from "../../../actors/pool/pool.ts";
import type { CatalogModel } from "../../catalog/catalog.ts";
import { describe, fail, type Failure } from "../../errors.ts";
import type { KeyRecord } from "../../keys/store.ts";
import { choicesRefusal } from "../../providers/choices.ts";
import type { Usage } from "../../providers/types.ts";
import { countPromptTokens, countTokens } from "../../tokens/count.ts";
import { observeRefused, observeRequest } from "../../metrics/observe.ts";
import type { EdgeDeps } from "../deps.ts";
import { authorize, failed, isFailure, zodFailure } from "../guard.ts";
import { rateHeaders } from "../paid.ts";
import { readJsonBody } from "../request.ts";
import { chatBudget, exactChatReserve, type ChatBudget } from "./budget.ts";
import { relayStream } from "./relay.ts";
import { chatRequest, isPlainChatRequest, type ChatRequest } from "./schema.ts";

interface Admitted {
  requestId: string;
  key: KeyRecord;
  model: CatalogModel;
  body: ChatRequest;
  budget: ChatBudget;
  holdId: string;
  /** The reserve admitted: the cheap bound, or the exact count at the wallet's edge. */
  reserveMicro: bigint;
  headers: Record<string, string>;
  startedMs: number;
}

type Prepared = { body: ChatRequest; model: CatalogModel; key: KeyRecord; budget: ChatBudget };

async function prepare(request: Request, deps: EdgeDeps): Promise<Prepared | Failure> {
  const key = await authorize(request, deps);
  if (isFailure(key)) return key;
  const raw = await readJsonBody(request, deps.env.BODY_BYTES_MAX);
  if (isFailure(raw)) return raw;
  let body: ChatRequest;
  if (isPlainChatRequest(raw)) body = raw;
  else {
    const parsed = chatRequest.safeParse(raw);
    if (!parsed.success) return zodFailure(parsed.error);
    body = parsed.data;
  }
  const model = deps.catalog.get(body.model);
  if (!model) {
    return fail("model_not_found", `The model \`${body.model}\` does not exist or you do not have access to it.`, { param: "model" });
  }
  if (model.operation !== "chat") {
    return fail("invalid_request", `\`${model.id}\` is a ${model.operation} model, not a chat model.`, { param: "model" });
  }
  const budget = await chatBudget(body, model, { fairnessKey: key.id });
  if (isFailure(budget)) return budget;
  const choicesRefused = choicesRefusal(deps.pools.get(model.id)?.backends ?? [], body.n ?? 1, model.id);
  if (choicesRefused) return choicesRefused;
  return { body, model, key, budget };
}

export async function chatCompletions(request: Request, requestId: string, deps: EdgeDeps, set: { headers: Record<string, string | number> }) {
  const startedMs = performance.now();
  const prepared = await prepare(request, deps);
  if (isFailure(prepared)) {
    const status = describe(prepared.code).status;
    observeRefused(deps, { requestId, keyId: null, operation: "chat", model: null, status, code: prepared.code, durationMs: performance.now() - startedMs });
    return failed(prepared, requestId);
  }
  const { key, model, body, budget } = prepared;
  const residency = request.headers.get("x-darvaze-residency");
  if (residency !== null && residency !== "in-country") {
    return failed(fail("invalid_request", "x-darvaze-residency must be `in-country` when set.", { param: "x-darvaze-residency" }), requestId);
  }
  // The header or the key's setting: either one keeps the request in the country.
  const region = residency === "in-country" || key.residency === "in-country" ? "in-country" : undefined;
  const pool = deps.pools.get(model.id);
  if (!pool) return failed(fail("no_healthy_backend", `No backend is configured for ${model.id}.`, { retryAfterS: 5 }), requestId);
  if (region && !pool.hasRegion(region)) {
    return failed(fail("no_healthy_backend", `${model.id} has no in-country backend, and this request must stay in the country.`, { retryAfterS: 5 }), requestId);
  }

  const admitted = await admit(deps, { requestId, key, model, body, budget, startedMs });
  if ("failure" in admitted) {
    const status = describe(admitted.failure.code).status;
    observeRefused(deps, { requestId, keyId: key.id, operation: "chat", model: model.id, status, code: admitted.failure.code, durationMs: performance.now() - startedMs });
    return failed(admitted.failure, requestId, admitted.headers);
  }

  const stream = body.stream === true;
  let outcome: ChatOutcome;
  try {
    outcome = await pool.chat({
      body,
      stream,
      maxTokens: budget.outputTokensMax,
      requestId,
      created: Math.floor(Date.now() / 1000),
      region,
      // Only a stream is cut when its client leaves: Bun's request.signal costs about a tenth of
      // the throughput, and a whole reply is billed in full anyway.
      signal: stream ? request.signal : undefined,
    });
  } catch (error) {
    deps.log("error", "pool_failed", { requestId, error: (error as Error).message });
    outcome = { kind: "failed", backend: null, failure: fail("internal_error", "The gateway failed to call the upstream.") };
  }
  if (outcome.kind === "failed") {
    await settle(deps, admitted, { inputTokens: 0, outputTokens: 0 }, outcome.backend?.name ?? null, 502);
    return failed(outcome.failure, requestId, admitted.headers);
  }
  if (outcome.kind === "json") {
    const usage = outcome.usage ?? (await countJsonUsage(body, outcome.body));
    const reply = outcome.body;
    await settle(deps, admitted, usage, outcome.backend.name, 200, { completion: () => jsonCompletionText(reply) });
    return new Response(outcome.body, {
      status: 200,
      headers: { "content-type": "application/json", "x-request-id": requestId, ...admitted.headers },
    });
  }
  Object.assign(set.headers, admitted.headers);
  set.headers["content-type"] = "text/event-stream";
  set.headers["x-request-id"] = requestId;
  const partition = partitionOf(key.id);
  return relayStream(deps, { requestId, keyId: key.id, model: model.id, body, budget, reserveMicro: admitted.reserveMicro }, outcome, request.signal, {
    extend: async (addTokens) => {
      const ticket = { keyId: key.id, requestId, holdId: admitted.holdId, addTokens, addMicro: BigInt(addTokens) * budget.outputPricePer1m };
      try {
        const reply = await deps.bus.request(EXTEND, deps.subjects.keyExtend(partition), ticket);
        if (reply.ok) admitted.reserveMicro = reply.reserveMicro;
        return reply.ok;
      } catch (error) {
        deps.log("error", "extend_unreachable", { requestId, error: (error as Error).message });
        return false;
      }
    },
    settle: (usage, status, extra) => settle(deps, admitted, usage, outcome.backend.name, status, extra),
  });
}

type Admission = Admitted | { failure: Failure; headers: Record<string, string> };

/**
 * Asks the key actor with the cheap reserve; when that does not fit the wallet, counts the
 * prompt exactly and asks once more (the actor may then wait for money held elsewhere).
 */
async function admit(deps: EdgeDeps, a: Omit<Admitted, "holdId" | "reserveMicro" | "headers">): Promise<Admission> {
  const outputTokens = a.budget.reservedOutputTokens * a.budget.choices;
  const subject = deps.subjects.keyAdmit(partitionOf(a.key.id));
  let ticket: AdmitTicket = {
    keyId: a.key.id,
    requestId: a.requestId,
    model: a.model.id,
    reserveMicro: a.budget.reserveMicro,
    reserveTokens: a.budget.promptTokensBound + outputTokens,
    exact: false,
  };
  try {
    let reply = await deps.bus.request(ADMIT, subject, ticket);
    if (!reply.ok && reply.exactNeeded) {
      const exact = await exactChatReserve(a.body, a.budget);
      ticket = { ...ticket, reserveMicro: exact.reserveMicro, reserveTokens: exact.promptTokens + outputTokens, exact: true };
      reply = await deps.bus.request(ADMIT, subject, ticket);
    }
    const headers = rateHeaders(reply.rate);
    if (!reply.ok) return { failure: reply.failure as Failure, headers };
    return { ...a, holdId: reply.holdId, reserveMicro: ticket.reserveMicro, headers };
  } catch (error) {
    deps.log("error", "admit_unreachable", { requestId: a.requestId, error: (error as Error).message });
    return { failure: fail("service_unavailable", "Admission is unavailable right now; try again shortly.", { retryAfterS: 1 }), headers: {} };
  }
}

/** What the access line and the latency histograms need beyond the usage. */
interface SettleExtra {
  /** Performance-clock time of the first streamed token. */
  firstTokenMs?: number | null;
  /** The text delivered; read only when the operator logs message content. */
  completion?: () => string;
  /** Caps the charge below the reserve (a stream cut when its hold could not grow). */
  billedMicroMax?: bigint;
}

async function settle(deps: EdgeDeps, a: Admitted, usage: Usage, backend: string | null, status: number, extra: SettleExtra = {}): Promise<void> {
  const settlement: Settlement = {
    keyId: a.key.id,
    requestId: a.requestId,
    holdId: a.holdId,
    reserveMicro: a.reserveMicro,
    model: a.model.id,
    operation: "chat",
    backend,
    priceVersionId: a.budget.priceVersionId,
    inputUnits: BigInt(usage.inputTokens),
    outputUnits: BigInt(usage.outputTokens),
    inputPricePer1m: a.budget.inputPricePer1m,
    outputPricePer1m: a.budget.outputPricePer1m,
    status,
    durationMs: Math.round(performance.now() - a.startedMs),
    billedMicroMax: extra.billedMicroMax,
  };
  try {
    const reply = await deps.bus.request(SETTLE, deps.subjects.keySettle(partitionOf(a.key.id)), settlement);
    if (!reply.ok) {
      deps.log("error", "settle_refused", { requestId: a.requestId, code: reply.failure.code });
      return;
    }
    const first = extra.firstTokenMs ?? null;
    const endMs = a.startedMs + settlement.durationMs;
    observeRequest(deps, {
      requestId: a.requestId,
      keyId: a.key.id,
      keyName: a.key.name,
      operation: "chat",
      model: a.model.id,
      backend,
      status,
      durationMs: settlement.durationMs,
      ttftMs: first === null ? null : first - a.startedMs,
      tpotMs: first === null || usage.outputTokens < 2 ? null : (endMs - first) / (usage.outputTokens - 1),
      inputTokens: usage.inputTokens,
      outputTokens: usage.outputTokens,
      billedMicro: reply.billedMicro,
      meteredMicro: reply.meteredMicro,
      content: () => ({ prompt: a.body.messages, completion: extra.completion?.() ?? "" }),
    });
  } catch (error) {
    deps.log("error", "settle_unreachable", { requestId: a.requestId, error: (error as Error).message });
  }
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
