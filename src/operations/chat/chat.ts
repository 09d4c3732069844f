/**
 * The chat completion operation: the whole path of a paid chat request, on the paid sequence
 * of run.ts.
 *
 *   edge:  the caller (origin, key, residency) → body (size, JSON, schema) → model → budget and
 *          reserve → admission (src/admission: the key actor's slot and hold, or 429/402)
 *   pool actor (this node): backend, upstream call, retries before the first byte
 *   edge:  relay the reply (JSON, or frames metered live by relay.ts), then settle the actual
 *          usage through the admission, exactly once, whatever happened (a failed call at zero,
 *          recorded with the status its client got).
 *
 * `chat` is the path itself, for any transport: the HTTP route (src/http/chat/route.ts), the
 * translated wires (src/http/translated.ts) and the internal NATS service
 * (src/internal/service.ts) call it and only translate its result.
 */
import type { ChatOutcome, PoolActor } from "../../../actors/pool/pool.ts";
import type { Backend } from "../../../actors/pool/backend.ts";
import { countsExactly, operationModel, servingPool } from "../../admission/model.ts";
import { type Admission, STATUS_CLIENT_CLOSED } from "../../admission/settlement.ts";
import type { Caller, Credentials } from "../../admission/caller.ts";
import type { Reserve } from "../../admission/reserve.ts";
import { presentedJson, valueWithUsageCost } from "../../admission/costReply.ts";
import type { CatalogModel } from "../../catalog/catalog.ts";
import { fail, type Failure, isFailure, zodFailure } from "../../errors.ts";
import { generatedText, type GeneratedFields } from "../../providers/chatShape.ts";
import { choicesRefusal } from "../../providers/choices.ts";
import type { Usage } from "../../providers/types.ts";
import { cutOutputTokens, unreportedOutputTokens } from "./unreported.ts";
import { promptTokensLowerBound, wordsLowerBound } from "../../tokens/count.ts";
import type { GatewayDeps } from "../../admission/deps.ts";
import { type Admitted, isRefused, presented, type Refused, run } from "../run.ts";
import { type ChatCompletion, chatCompletionOf } from "../../wires/chat.ts";
import { chatBudget, exactChatReserve, OUTPUT_TOKENS_LOWERED_MIN, type ChatBudget, type OutputLimitWording } from "./budget.ts";
import { Relay, servedTierOf } from "./relay.ts";
import { marksCache } from "./cache.ts";
import { hostedCallsReserve, withHostedCalls } from "./hosted.ts";
import { chatRequest, isPlainChatRequest, type ChatRequest } from "./schema.ts";
import { UNITS } from "../../units.ts";

/** A chat request checked: its body, model, budget and a pool that may serve it. */
type Checked = { body: ChatRequest; model: CatalogModel; budget: ChatBudget; pool: PoolActor };

async function prepare(input: ChatInput, deps: GatewayDeps, caller: Caller): Promise<Checked | Failure> {
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
  const model = operationModel(deps, body.model, "chat", caller.key);
  if (isFailure(model)) return model;
  // Measured on the decoded text: an invalid byte became U+FFFD, three bytes when sent on.
  const bodyBytes = () => Buffer.byteLength(read.text, "utf8");
  const budget = await chatBudget(body, model, {
    fairnessKey: caller.key.id,
    bodyBytes,
    paidFields: deps.pools.get(model.id)?.paidFields,
    lowerToWindow: input.lowerToWindow,
    outputLimitWording: input.outputLimitWording,
    context1m: input.context1m,
  });
  if (isFailure(budget)) return budget;
  const choicesRefused = choicesRefusal(deps.pools.get(model.id)?.backends ?? [], body.n ?? 1, model.id);
  if (choicesRefused) return choicesRefused;
  const pool = servingPool(deps, model, caller.region);
  if (isFailure(pool)) return pool;
  return { body, model, budget, pool };
}

/** The dearer of the model's cache-write prices (a 1-hour write costs more than a 5-minute one). */
function highestWritePrice(prices: ReadonlyMap<string, bigint>): bigint | undefined {
  const written = [prices.get(UNITS.cache_write.priceKey), prices.get(UNITS.cache_write_1h.priceKey)].filter((p) => p !== undefined);
  return written.length === 0 ? undefined : written.reduce((a, b) => (a > b ? a : b));
}

/**
 * The reserve of a chat request: the prompt's bound at the input price and the output budget of
 * every choice at the output price. At the wallet's edge the prompt is counted exactly. A prompt
 * that marks `cache_control` may be written to the vendor's cache, priced above input: its bound
 * is then taken at the cache-write price (a vendor writes only at such marks). A hosted tool's
 * calls are reserved at their per-call price (hosted.ts).
 */
export function chatReserve(body: ChatRequest, budget: ChatBudget, model: CatalogModel, fairnessKey: string): Reserve {
  // Rejected predicted tokens are billed as output beyond the limit: the hold covers them too.
  const outputUnits = budget.outputTokensMax * budget.choices + budget.predictionTokensBound;
  // A paid field's percent applies to every unit's price: cache reads and writes as input and output.
  const writePrice = highestWritePrice(budget.unitPricesPer1m);
  const inputPricePer1mMax = writePrice !== undefined && writePrice > budget.inputPricePer1m && marksCache(body) ? writePrice : undefined;
  const hostedCalls = hostedCallsReserve(body, model);
  return {
    input: { unit: "input_token", units: budget.promptTokensBound, pricePer1m: budget.inputPricePer1m },
    ...(inputPricePer1mMax ? { inputPricePer1mMax } : {}),
    ...(budget.unitPricesPer1m !== model.price.tomanPer1m ? { unitPricesPer1m: budget.unitPricesPer1m } : {}),
    ...(budget.promptTier ? { promptTier: budget.promptTier } : {}),
    ...(budget.atDefaultServiceTier ? { atDefaultServiceTier: budget.atDefaultServiceTier } : {}),
    output: { unit: "output_token", units: outputUnits, pricePer1m: budget.outputPricePer1m },
    ...(hostedCalls ? { hostedCalls } : {}),
    tokens: budget.promptTokensBound + outputUnits,
    exact: false,
    // An exact count bounds only the vendor whose tokenizer it is; elsewhere the bytes bound it.
    ...(countsExactly(model) ? { exactInputUnits: async () => (await exactChatReserve(body, budget, fairnessKey)).promptTokens } : {}),
    outputLowerable: {
      perChoice: budget.outputTokensMax,
      choices: budget.choices,
      fixedUnits: budget.predictionTokensBound,
      perChoiceMin: Math.min(OUTPUT_TOKENS_LOWERED_MIN, budget.outputTokensMax),
    },
  };
}

/** A chat request as any transport receives it. */
export interface ChatInput {
  requestId: string;
  credentials: Credentials;
  /** The body as JSON and the text it was parsed from, read only once the caller is known (or the 400/413 it deserves). */
  readBody: () => Promise<{ value: unknown; text: string } | Failure>;
  /** Aborted when the caller goes away: the upstream call is then cut at once and billed once (unreported.ts). */
  signal: AbortSignal;
  /** The wire lowers an output limit the context window cannot hold instead of refusing it (budget.ts). */
  lowerToWindow?: boolean;
  /**
   * A translated wire's whole reply (Responses, Messages, Gemini) from the chat completion, made
   * before the request is settled (run.ts `presented`); `hostedCalls`: the vendor-run tool's
   * calls billed. Sent as JSON, with `usage.cost` once settled.
   */
  present?: (reply: ChatCompletion, facts: { hostedCalls: number }) => unknown;
  /** The wire's words for an output limit above the model's (budget.ts); OpenAI's when absent. */
  outputLimitWording?: OutputLimitWording;
  /** The request asks for Anthropic's context-1m: the model's long-context window and tier (budget.ts `context1m`). */
  context1m?: boolean;
}

/** What a chat request came to: a refusal, a whole reply, or a stream to relay. */
export type ChatResult =
  | Refused
  /** `body`: the chat completion, or the wire's reply when the input presents one. */
  | { kind: "json"; body: string; headers: Record<string, string> }
  | { kind: "stream"; relay: Relay; headers: Record<string, string> };

type ChatPrepared = Checked & { reserve: Reserve };
type ChatCalled = Exclude<ChatOutcome, { kind: "failed" }>;

/** The whole path of one chat request, whatever transport brought it (the paid sequence: run.ts). */
export function chat(deps: GatewayDeps, input: ChatInput): Promise<ChatResult> {
  return run(deps, input, {
    operation: "chat",
    prepare: async (caller): Promise<ChatPrepared | Failure> => {
      const prepared = await prepare(input, deps, caller);
      if (isFailure(prepared)) return prepared;
      return { ...prepared, reserve: chatReserve(prepared.body, prepared.budget, prepared.model, caller.key.id) };
    },
    call: (admitted) => callPool(admitted, input.signal),
    deliver: (outcome, admitted) => deliver(outcome, admitted, input),
  });
}

async function callPool(admitted: Admitted<ChatPrepared>, signal: AbortSignal): Promise<ChatCalled | Failure> {
  const { prepared, admission, requestId, caller } = admitted;
  const { body, budget, pool } = prepared;
  const stream = body.stream === true;
  const sentMs = performance.now();
  const outcome = await pool.chat({
    body: withHostedCalls(body, admission.hostedCallsAllowed),
    stream,
    maxTokens: admission.outputPerChoice ?? budget.outputTokensMax,
    requestId,
    created: Math.floor(Date.now() / 1000),
    region: caller.region,
    // A client that hangs up cuts the upstream call, stream or whole reply.
    signal,
  });
  admitted.backend = outcome.backend?.name ?? null;
  if (outcome.kind !== "failed") return outcome;
  if (signal.aborted && outcome.backend) await settleHungUp(admitted, outcome.backend, sentMs);
  return outcome.failure;
}

/**
 * A client that hung up before any byte of the reply: the upstream call was cut, so nothing it
 * generated was seen. Billed (499) its input and a time-based output allowance (unreported.ts: the
 * time since it was sent ÷ the backend's time per token, within the limit sent).
 */
async function settleHungUp(admitted: Admitted<ChatPrepared>, backend: Backend, sentMs: number): Promise<void> {
  const { admission, deps } = admitted;
  const hosted = admission.hostedUnreported(backend.adapter.kind === "anthropic");
  const input = (await admission.inputUnitsUnreported()) + hosted.inputUnits;
  const now = performance.now();
  const cut = await cutOutputTokens(admission, {
    text: "",
    answeredMs: sentMs,
    lastReadMs: sentMs,
    cutMs: now,
    tpotMs: backend.tpot.value,
  });
  deps.metrics.cutAllowanceBilled(admission.model.id, backend.name, cut.allowance);
  await admission.settle({ input, output: cut.output, hosted_call: hosted.calls }, backend.name, STATUS_CLIENT_CLOSED, {
    early: { endedBy: "client", outputMeteredUnits: cut.metered, outputAllowanceUnits: cut.allowance },
  });
}

/** A whole reply, presented then settled at its usage; or a stream, settled by its relay at its end. */
async function deliver(outcome: ChatCalled, admitted: Admitted<ChatPrepared>, input: ChatInput): Promise<ChatResult> {
  const { deps, admission, prepared } = admitted;
  const { body, budget } = prepared;
  if (outcome.kind === "stream") {
    return { kind: "stream", relay: new Relay(deps, admission, { body, budget }, outcome, input.signal), headers: admission.headers };
  }
  if (servedTierOf(outcome.json) === "default") admission.servedAtDefaultTier();
  const generated = jsonGeneratedText(outcome.json);
  const used = outcome.usage ?? (await unreportedJsonUsage(admission, generated, outcome.backend.adapter.kind === "anthropic"));
  const { present } = input;
  const shown = present ? await presented(admitted, () => presentChat(present, outcome.json, admission.hostedCallsBilled(used))) : null;
  if (isRefused(shown)) return shown;
  // A report is taken no lower than what was proven used: the prompt's words, every word generated.
  const floor = outcome.usage ? { input: promptTokensLowerBound(body), output: wordsLowerBound(generated) } : undefined;
  const settled = await admission.settle(used, outcome.backend.name, 200, {
    content: () => ({ prompt: body.messages, completion: generated }),
    floor,
    usageMissing: outcome.usage === null,
  });
  if (present) return { kind: "json", body: presentedJson(shown, settled), headers: admission.headers };
  const reply = settled ? valueWithUsageCost(outcome.json, outcome.body, settled.billedMicro) : outcome.body;
  return { kind: "json", body: reply, headers: admission.headers };
}

/** The wire's reply from a chat completion the pool read, or the 502 when it is not one. */
function presentChat(present: NonNullable<ChatInput["present"]>, json: unknown, hostedCalls: number): unknown {
  const reply = chatCompletionOf(json);
  if (!reply) return fail("upstream_error", "The upstream reply could not be read as a completion.");
  // A cost the upstream wrote there (in its currency) is not the bill: presentedJson sets ours.
  if (reply.usage) reply.usage = { ...reply.usage, cost: undefined };
  return present(reply, { hostedCalls });
}

/** Usage for a reply that reported none: the cost value's input, everything every choice generated, every hosted call sent. */
async function unreportedJsonUsage(admission: Admission, generated: string, backendRunsTools: boolean): Promise<Usage> {
  const hosted = admission.hostedUnreported(backendRunsTools);
  return {
    input: (await admission.inputUnitsUnreported()) + hosted.inputUnits,
    output: await unreportedOutputTokens(admission, generated),
    hosted_call: hosted.calls,
  };
}

/** Every choice's generated text of a reply as a value (chatShape.ts `generatedText`: the same fields as a stream's deltas). */
function jsonGeneratedText(reply: unknown): string {
  let text = "";
  const choices = (reply as { choices?: unknown } | null)?.choices;
  if (!Array.isArray(choices)) return text;
  for (const choice of choices as ({ message?: GeneratedFields } | null)[]) if (choice?.message) text += generatedText(choice.message);
  return text;
}
