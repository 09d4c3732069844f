/**
 * The chat completion operation: the whole path of a paid chat request, on the paid sequence
 * of run.ts.
 *
 *   parts given to run.ts: the body (size, JSON, schema), the model priced for chat, the budget
 *          and reserve (budget.ts, cache.ts, hosted.ts), the pool's call (backend, upstream call,
 *          retries before the first byte), and the reply read: a whole reply's usage, or a
 *          stream relayed by relay.ts, whose end is billed through the same `chatBill`.
 *   settled by run.ts exactly once, whatever happened (a failed call at zero, recorded with the
 *          status its client got; a client that hung up during the call at its input and an
 *          allowance).
 *
 * `chat` is the path itself, for any transport: the HTTP route (src/http/chat/route.ts), the
 * translated wires (src/http/translated.ts) and the internal NATS service
 * (src/internal/service.ts) call it and only encode its result.
 */
import type { ChatOutcome } from "../../../actors/pool/pool.ts";
import type { Backend } from "../../../actors/pool/backend.ts";
import type { Caller } from "../../admission/caller.ts";
import { presentedJson, valueWithUsageCost } from "../../admission/costReply.ts";
import { countsExactly, type PricedModel } from "../../admission/model.ts";
import type { Reserve } from "../../admission/reserve.ts";
import { type Admission, STATUS_CLIENT_CLOSED } from "../../admission/settlement.ts";
import type { CatalogModel } from "../../catalog/catalog.ts";
import { fail, type Failure, isFailure, zodFailure } from "../../errors.ts";
import { generatedText, type GeneratedFields } from "../../providers/chatShape.ts";
import { choicesRefusal } from "../../providers/choices.ts";
import type { Usage } from "../../providers/types.ts";
import { promptTokensLowerBound, wordsLowerBound } from "../../tokens/count.ts";
import { UNITS } from "../../units.ts";
import { type ChatCompletion, chatCompletionOf } from "../../wires/chat.ts";
import { jsonLimits, type OperationInput } from "../input.ts";
import {
  type Admitted,
  type Bill,
  type Delivered,
  type OperationResult,
  type Prepared,
  run,
  settleUsed,
  type Streamed,
  type PaidDeps,
} from "../run.ts";
import {
  chatBudget,
  chatPriceRefusal,
  exactChatReserve,
  OUTPUT_TOKENS_LOWERED_MIN,
  type ChatBudget,
  type OutputLimitWording,
} from "./budget.ts";
import { marksCache } from "./cache.ts";
import { hostedCallsReserve, withHostedCalls } from "./hosted.ts";
import { Relay, type RelaySettle, servedTierOf } from "./relay.ts";
import { chatRequest, isPlainChatRequest, type ChatRequest } from "./schema.ts";
import { type ChatEnding, chatUsage, cutOutputTokens, unreportedOutputTokens } from "./unreported.ts";

/** A chat request's body read: checked by the chat schema, with the text it was parsed from. */
interface ChatBody {
  body: ChatRequest;
  text: string;
}

/** The body as JSON within the configured bounds (BODY_BYTES_MAX, JSON_DEPTH_MAX), checked by the chat schema. */
async function readChat(input: OperationInput, env: PaidDeps["env"]): Promise<ChatBody | Failure> {
  const read = await input.json(jsonLimits(env));
  if (isFailure(read)) return read;
  const raw = read.value;
  if (isPlainChatRequest(raw)) return { body: raw, text: read.text };
  const parsed = chatRequest.safeParse(raw);
  return parsed.success ? { body: parsed.data, text: read.text } : zodFailure(parsed.error);
}

/** A chat request's budget and prompt bound, the choices its backends can make, and its reserve. */
async function prepare(read: ChatBody, priced: PricedModel, caller: Caller, wire: ChatWire): Promise<ChatPrepared | Failure> {
  const { body } = read;
  const { model, pool } = priced;
  // Measured on the decoded text: an invalid byte became U+FFFD, three bytes when sent on.
  const bodyBytes = () => Buffer.byteLength(read.text, "utf8");
  const budget = await chatBudget(body, model, {
    fairnessKey: caller.key.id,
    bodyBytes,
    paidFields: pool.paidFields,
    lowerToWindow: wire.lowerToWindow,
    outputLimitWording: wire.outputLimitWording,
    context1m: wire.context1m,
  });
  if (isFailure(budget)) return budget;
  const choicesRefused = choicesRefusal(pool.backends, body.n ?? 1, model.id);
  if (choicesRefused) return choicesRefused;
  return { ...priced, body, budget, reserve: chatReserve(body, budget, model, caller.key.id) };
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

/** What a wire asks of the chat operation beyond the request (the translated wires: src/http/translated.ts). */
export interface ChatWire {
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

type ChatPrepared = Prepared & { body: ChatRequest; budget: ChatBudget };
type ChatCalled = Exclude<ChatOutcome, { kind: "failed" }>;

/**
 * The whole path of one chat request, whatever transport brought it (the paid sequence: run.ts);
 * `wire`: what a translated wire asks beyond the request.
 */
export function chat(input: OperationInput, deps: PaidDeps, wire: ChatWire = {}): Promise<OperationResult> {
  // A client that hung up before any byte of the reply, once the upstream was called: billed by billFailed.
  let hungUp: { backend: Backend; sentMs: number } | null = null;
  return run(deps, input, {
    operation: "chat",
    read: (input) => readChat(input, deps.env),
    priced: ({ body }) => ({ model: body.model, unit: (model) => chatPriceRefusal(model) ?? "input_token" }),
    prepare: (read, priced, caller) => prepare(read, priced, caller, wire),
    call: async (admitted) => {
      const called = await callPool(admitted, input.signal);
      if (!isFailure(called) && "hungUp" in called) {
        hungUp = called.hungUp;
        return called.failure;
      }
      return called;
    },
    billFailed: async (admitted) => (hungUp ? hungUpBill(admitted, hungUp.backend, hungUp.sentMs) : null),
    deliver: (outcome, admitted) => deliver(outcome, admitted, input, wire),
  });
}

async function callPool(
  admitted: Admitted<ChatPrepared>,
  signal: AbortSignal,
): Promise<ChatCalled | Failure | { failure: Failure; hungUp: { backend: Backend; sentMs: number } }> {
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
  if (signal.aborted && outcome.backend) return { failure: outcome.failure, hungUp: { backend: outcome.backend, sentMs } };
  return outcome.failure;
}

/**
 * A client that hung up before any byte of the reply: the upstream call was cut, so nothing it
 * generated was seen. Billed (499) its input and a time-based output allowance (unreported.ts: the
 * time since it was sent ÷ the backend's time per token, within the limit sent).
 */
async function hungUpBill(admitted: Admitted<ChatPrepared>, backend: Backend, sentMs: number): Promise<Bill> {
  const { admission, deps } = admitted;
  // The input counted first (once, kept by the admission): the allowance runs until the count is done.
  await admission.inputUnitsUnreported();
  const cut = await cutOutputTokens(admission, {
    text: "",
    answeredMs: sentMs,
    lastReadMs: sentMs,
    cutMs: performance.now(),
    tpotMs: backend.tpot.value,
  });
  deps.metrics.cutAllowanceBilled(admission.model.id, backend.name, cut.allowance);
  const { bill } = await chatBill(admission, {
    backend,
    reported: null,
    output: cut.output,
    status: STATUS_CLIENT_CLOSED,
    usageOwed: false,
    extra: { early: { endedBy: "client", outputMeteredUnits: cut.metered, outputAllowanceUnits: cut.allowance } },
  });
  return bill;
}

/**
 * What a chat request is billed at its end, whole reply, stream or hang-up: its usage (the
 * upstream's report, else the gateway's count: unreported.ts `chatUsage`, called only here),
 * and, for a stream cut at its length, at most what was delivered (the rest metered, written off).
 */
async function chatBill(admission: Admission, ending: ChatEnding): Promise<{ bill: Bill; prompt: Usage; used: Usage }> {
  const { prompt, used: billed } = await chatUsage(admission, ending);
  const used = ending.metered === undefined ? billed : { ...prompt, output: ending.metered };
  const billedMicroMax = ending.metered === undefined ? undefined : admission.usedMicro(billed);
  // After the most that may be charged is reckoned (at the prices held), as it always was.
  if (ending.servedDefaultTier) admission.servedAtDefaultTier();
  const usageMissing = ending.reported === null && ending.usageOwed;
  const extra = { ...ending.extra, ...(billedMicroMax === undefined ? {} : { billedMicroMax }), ...(usageMissing ? { usageMissing } : {}) };
  return { bill: { used, status: ending.status, extra }, prompt, used: billed };
}

/** A whole reply, presented then settled at its usage; or a stream, settled by its relay at its end. */
async function deliver(
  outcome: ChatCalled,
  admitted: Admitted<ChatPrepared>,
  input: OperationInput,
  wire: ChatWire,
): Promise<Delivered<unknown> | Streamed> {
  const { deps, admission, prepared } = admitted;
  const { body, budget } = prepared;
  if (outcome.kind === "stream") {
    const settle: RelaySettle = async (ending) => {
      const { bill, prompt } = await chatBill(admission, ending);
      return { settled: await settleUsed(admitted, bill), prompt, used: bill.used };
    };
    return {
      kind: "stream",
      relay: new Relay(deps, admission, { body, budget, settle }, outcome, input.signal),
      headers: admission.headers,
    };
  }
  const generated = jsonGeneratedText(outcome.json);
  const output = outcome.usage?.output ?? (await unreportedOutputTokens(admission, generated));
  const { bill } = await chatBill(admission, {
    backend: outcome.backend,
    reported: outcome.usage,
    output,
    status: 200,
    usageOwed: true,
    servedDefaultTier: servedTierOf(outcome.json) === "default",
    extra: {
      content: () => ({ prompt: body.messages, completion: generated }),
      // A report is taken no lower than what was proven used: the prompt's words, every word generated.
      ...(outcome.usage ? { floor: { input: promptTokensLowerBound(body), output: wordsLowerBound(generated) } } : {}),
    },
  });
  const { present } = wire;
  return {
    used: bill.used,
    extra: bill.extra,
    ...(present ? { present: () => presentChat(present, outcome.json, admission.hostedCallsBilled(bill.used)) } : {}),
    reply: (settled, shown) => ({
      contentType: "application/json",
      body: present
        ? presentedJson(shown, settled)
        : settled
          ? valueWithUsageCost(outcome.json, outcome.body, settled.billedMicro)
          : outcome.body,
    }),
  };
}

/** The wire's reply from a chat completion the pool read, or the 502 when it is not one. */
function presentChat(present: NonNullable<ChatWire["present"]>, json: unknown, hostedCalls: number): unknown {
  const reply = chatCompletionOf(json);
  if (!reply) return fail("upstream_error", "The upstream reply could not be read as a completion.");
  // A cost the upstream wrote there (in its currency) is not the bill: presentedJson sets ours.
  if (reply.usage) reply.usage = { ...reply.usage, cost: undefined };
  return present(reply, { hostedCalls });
}

/** Every choice's generated text of a reply as a value (chatShape.ts `generatedText`: the same fields as a stream's deltas). */
function jsonGeneratedText(reply: unknown): string {
  let text = "";
  const choices = (reply as { choices?: unknown } | null)?.choices;
  if (!Array.isArray(choices)) return text;
  for (const choice of choices as ({ message?: GeneratedFields } | null)[]) if (choice?.message) text += generatedText(choice.message);
  return text;
}
