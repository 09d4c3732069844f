/**
 * The stream relay: the upstream's chunks to one consumer as typed events (events.ts), metered
 * live, settled exactly once. One Relay per stream owns the upstream reply from the pool to its
 * one close; its consumer (chat's SSE body, a translated wire's body, or the internal NATS
 * service) takes events in batches and encodes them. How a stream ends is decided by ending.ts,
 * a pure table.
 *
 *   pump (reads the upstream): decode → meter (extend the hold ahead of the tokens) → queue.
 *     The queue holds at most STREAM_RELAY_BUFFER_CHARS_MAX; past it the pump stops reading,
 *     so a client that stops reading pauses the upstream instead of growing our memory.
 *   consumer (a transport): takes what is queued, typed events (events.ts) it encodes once; a
 *     keep-alive during long upstream silences; the end (done) or the failure, then close.
 *   ends, each settled once before the last frame is queued:
 *     done        the upstream's usage, else the unreported bill (unreported.ts);
 *     cut         the meter withheld text: finish_reason "length", the usage chunk when asked,
 *                 [DONE]; the upstream is aborted; billed = delivered tokens, what was read
 *                 beyond them is metered and written off;
 *     failed      an error frame (a mid-stream upstream error, a break, a stall of
 *                 STREAM_STALL_MS); billed for what was delivered, or its report;
 *     client gone nothing more is relayed and the upstream is cut at once (its fetch aborted,
 *                 so its socket closes and the vendor stops generating); the backend's slot is
 *                 freed then, the key's slot and the hold at the settlement that follows. Billed
 *                 its report when it finished before the cut took effect; else the cut's count
 *                 (unreported.ts: what was read until the cut, plus the stated allowance).
 */
import { METER_EVENTS, type MeterEvent } from "../../../actors/protocol.ts";
import type { ChatOutcome } from "../../../actors/pool/pool.ts";
import type { Settlement } from "../../../actors/protocol.ts";
import type { UsedUnits } from "../../admission/prices.ts";
import type { Admission, Settled } from "../../admission/settlement.ts";
import { costToman, withUsageCost } from "../../admission/costReply.ts";
import { fail, type Failure } from "../../errors.ts";
import { usageToOpenAI } from "../../providers/chatShape.ts";
import type { ChatChunk } from "../../providers/chunk.ts";
import type { StreamFrame, Usage } from "../../providers/types.ts";
import { StreamStalled, UpstreamStream } from "../../providers/upstream.ts";
import { countTokens, promptTokensLowerBound, wordsLowerBound } from "../../tokens/count.ts";
import type { GatewayDeps } from "../../admission/deps.ts";
import type { ChatBudget } from "./budget.ts";
import { decideEnd, type EndDecision } from "./ending.ts";
import { NOTHING_YET, type RelayEvent } from "./events.ts";
import { StreamMeter } from "./meter.ts";
import { relayQueue } from "../../metrics/metrics.ts";
import { type ChatEnding, type CutOutput, cutOutputTokens, unreportedOutputTokens } from "./unreported.ts";
import { vendorCounter, type VendorCount } from "../../providers/count.ts";
import type { ChatRequest } from "./schema.ts";

/**
 * Characters of events queued for a client that is not reading, before the upstream read pauses
 * (what a queued event holds in memory: an upstream chunk's own text, or the upstream bytes a
 * decoder built its chunks from; one or two bytes a character).
 */
export const STREAM_RELAY_BUFFER_CHARS_MAX = 16_384;
/**
 * The largest single read Bun's fetch hands over (measured: ~480 KiB after the socket piled up).
 * The queue can pass its bound by one read's frames, so a stream's relay holds at most
 * STREAM_RELAY_BUFFER_CHARS_MAX + STREAM_READ_BYTES_MAX characters whatever its client does (an
 * upstream frame's text has about as many characters as its bytes).
 */
export const STREAM_READ_BYTES_MAX = 524_288;
/** Meter events per stream on the bus: at most one per this interval, plus one at the end. */
export const METER_EVENT_INTERVAL_MS = 1_000;

/** What an event is weighed beyond its chunk's text or bytes (a keep-alive's or an end's few characters). */
const EVENT_CHARS = 16;

/** What the relay reads of the request beyond its admission. */
export interface RelayRequest {
  body: ChatRequest;
  budget: ChatBudget;
  /** Settles the stream at its end: the one settlement of a chat request (chat.ts `chatBill`, run.ts `settleUsed`). */
  settle: RelaySettle;
}

/** A stream's settlement: what it was billed (null when the key actor could not be reached), its usage before its output, and its whole usage. */
export type RelaySettle = (ending: ChatEnding) => Promise<{ settled: Settled | null; prompt: Usage; used: UsedUnits }>;

type End = NonNullable<MeterEvent["end"]>;

/** What identifies the stream's chunks, taken from the first the upstream sent. */
interface ChunkIds {
  id: string;
  created: number;
  model: string;
  /** The tier the upstream says serves the stream (chat.ts servedTierOf), or null. */
  serviceTier: string | null;
}

/**
 * The `service_tier` a chat completion (or chunk) says served it, or null: OpenAI reports it on
 * every reply, and serves `default` when a `priority` request finds no priority capacity.
 * @example servedTierOf({ service_tier: "default" }) // "default"
 */
export function servedTierOf(value: unknown): string | null {
  const tier = (value as { service_tier?: unknown } | null)?.service_tier;
  return typeof tier === "string" ? tier : null;
}

function chunkIds(frame: StreamFrame, fallbackModel: string): ChunkIds | null {
  let chunk: ChatChunk | null = frame.chunk;
  // An upstream chunk the gateway cannot read as one still names the stream (read at the first frame only).
  if (frame.chunk === null) {
    try {
      chunk = JSON.parse(frame.json) as ChatChunk | null;
    } catch {
      return null;
    }
  }
  if (typeof chunk !== "object" || chunk === null) return null;
  return {
    id: typeof chunk.id === "string" ? chunk.id : "chatcmpl-cut",
    created: typeof chunk.created === "number" ? chunk.created : Math.floor(Date.now() / 1000),
    model: typeof chunk.model === "string" ? chunk.model : fallbackModel,
    serviceTier: servedTierOf(chunk),
  };
}

const KEEP_ALIVE: RelayEvent = { kind: "keepAlive" };
const DONE: RelayEvent = { kind: "done" };

function chunkEvent(frame: StreamFrame): RelayEvent {
  return frame.chunk === null ? { kind: "chunk", chunk: null, json: frame.json } : { kind: "chunk", chunk: frame.chunk, json: frame.json };
}

/** The upstream's usage chunk, sent once settled: its `usage.cost` the bill (null: not settled, sent as it came). */
function billedUsage(frame: StreamFrame, billedMicro: bigint | null): RelayEvent {
  const { chunk } = frame;
  if (chunk === null)
    return { kind: "usage", chunk: null, json: billedMicro === null ? frame.json : withUsageCost(frame.json, billedMicro) };
  if (billedMicro === null || !chunk.usage) return { kind: "usage", chunk, json: frame.json };
  // Written from the value: the same text as the upstream's with `cost` set (costReply.ts valueWithUsageCost).
  return { kind: "usage", chunk: { ...chunk, usage: { ...chunk.usage, cost: costToman(billedMicro) } }, json: null };
}

/**
 * Relays one admitted stream: a pump reads the upstream (decode → meter → queue, bounded by
 * STREAM_RELAY_BUFFER_CHARS_MAX) while the consumer takes what is queued.
 */
export class Relay {
  private readonly queue: RelayEvent[] = [];
  private queuedChars = 0;
  /** The bytes of the upstream read being handled, not yet weighed in the queue (push). */
  private unweighedBytes = 0;
  private ended = false;
  private clientGone = false;
  private wakeClient: (() => void) | null = null;
  private wakePump: (() => void) | null = null;
  private lastEventMs = performance.now();
  /** When the upstream answered, its last read, and the client's leave (performance clock). */
  private readonly answeredMs = performance.now();
  private lastReadMs = this.answeredMs;
  private cutMs: number | null = null;
  /** This stream's own pace: its text frames and when the first and last were read. */
  private textFrames = 0;
  private firstTextMs = 0;
  private lastTextMs = 0;
  /** A cut stream's count, once settled (the usage record and the exposure metric read it). */
  cut: CutOutput | null = null;
  private readonly vendorCount: VendorCount | undefined;
  private readonly meter: StreamMeter;
  private readonly wantsUsage: boolean;
  private readonly onClientGone = () => this.leave();
  // What the pump has seen.
  private reported: Usage | null = null;
  /** The prompt's tokens the upstream told at its stream's start (StreamPiece.inputTokensAtStart), or null. */
  inputTokensAtStart: number | null = null;
  /** The vendor-run tool's calls billed, once settled (before the last frames are queued). */
  hostedCallsBilled = 0;
  private finished = false;
  private failure: Failure | null = null;
  private ids: ChunkIds | null = null;
  private withheld: { text: string; reported?: number } | null = null;
  /** The upstream's usage chunk, for a client that asked for it: sent after settlement, with its cost. */
  private usageFrame: StreamFrame | null = null;
  /** Performance-clock time of the first delivered token, for TTFT. */
  private firstTokenMs: number | null = null;
  /** Read after the client left: generated, so billed. */
  private afterGone = "";
  /** Resolves once the stream is settled and its reply closed. */
  readonly done: Promise<void>;

  constructor(
    private readonly deps: Pick<GatewayDeps, "env" | "bus" | "subjects" | "metrics" | "log">,
    private readonly admission: Admission,
    private readonly request: RelayRequest,
    private readonly outcome: Extract<ChatOutcome, { kind: "stream" }>,
    clientSignal: AbortSignal,
  ) {
    this.wantsUsage = request.body.stream_options?.include_usage === true;
    // The upstream was told a limit the hold covers: the meter counts, it never needs to cut.
    this.meter = new StreamMeter({ hold: admission, capTokens: admission.coveredOutputUnits, enforce: false });
    const { backend } = outcome;
    this.vendorCount = vendorCounter(
      backend.adapter,
      backend.config.url,
      backend.config.upstream_model ?? admission.model.id,
      admission.requestId,
    );
    clientSignal.addEventListener("abort", this.onClientGone, { once: true });
    this.done = this.pump()
      .catch((error) => deps.log("error", "relay_failed", { requestId: admission.requestId, error: (error as Error).message }))
      .finally(() => {
        this.ended = true;
        clientSignal.removeEventListener("abort", this.onClientGone);
        this.wake();
      });
  }

  /**
   * The gateway's count of the prompt's tokens: the cost value's input (Admission.inputUnitsUnreported),
   * counted once; the reserve's bound when the tokenizer cannot count now.
   */
  inputTokensCounted(): Promise<number> {
    return this.admission.inputUnitsUnreported().catch(() => this.admission.reserve.input.units);
  }

  /** The events queued so far (waiting for some), or null once the stream has ended. */
  async take(): Promise<RelayEvent[] | null> {
    for (;;) {
      const frames = this.taken();
      if (frames !== NOTHING_YET) return frames;
      await new Promise<void>((resolve) => this.onNext(resolve));
    }
  }

  /**
   * The frames queued so far without waiting: NOTHING_YET when there are none, null once the
   * stream has ended. Taking them makes room for the pump.
   */
  taken(): RelayEvent[] | null {
    if (this.queue.length > 0) {
      const frames = this.queue.splice(0);
      relayQueue.chars -= this.queuedChars;
      this.queuedChars = 0;
      this.wakePump?.();
      return frames;
    }
    return this.ended ? null : NOTHING_YET;
  }

  /** Calls `wake` once, at the next frame queued or at the end (the one consumer's waiting). */
  onNext(wake: () => void): void {
    this.wakeClient = wake;
  }

  /**
   * The consumer went away before the end: nothing more is relayed, and the upstream is cut at
   * once (its pending read then fails, and the pump settles what it read).
   */
  leave(): void {
    if (this.clientGone || this.ended) return;
    this.clientGone = true;
    this.cutMs = performance.now();
    this.queue.length = 0;
    relayQueue.chars -= this.queuedChars;
    this.queuedChars = 0;
    this.outcome.reply.close("abandoned");
    this.wakePump?.();
  }

  private wake(): void {
    const wake = this.wakeClient;
    this.wakeClient = null;
    wake?.();
  }

  private push(event: RelayEvent): void {
    if (this.clientGone) return;
    this.queue.push(event);
    const chars = this.weight(event);
    this.queuedChars += chars;
    relayQueue.chars += chars;
    this.wake();
  }

  /** What a queued event holds: an upstream chunk's own text; else the bytes of the read its chunk was built from, taken once. */
  private weight(event: RelayEvent): number {
    if ((event.kind === "chunk" || event.kind === "usage") && event.json !== null) return event.json.length + EVENT_CHARS;
    const bytes = this.unweighedBytes;
    this.unweighedBytes = 0;
    return bytes + EVENT_CHARS;
  }

  private async roomForMore(): Promise<void> {
    while (this.queuedChars > STREAM_RELAY_BUFFER_CHARS_MAX && !this.clientGone) await new Promise<void>((r) => (this.wakePump = r));
  }

  private meterEvent(end?: End, outputTokens = this.meter.tokens): void {
    const now = performance.now();
    if (!end && now - this.lastEventMs < METER_EVENT_INTERVAL_MS) return;
    this.lastEventMs = now;
    const model = this.admission.model.id;
    this.deps.bus.publish(METER_EVENTS, this.deps.subjects.meter(model), {
      requestId: this.admission.requestId,
      keyId: this.admission.key.id,
      model,
      backend: this.outcome.backend.name,
      outputTokens,
      coveredTokens: this.meter.covered,
      reserveMicro: this.admission.reserveMicro,
      end,
    });
  }

  /**
   * One upstream frame: false when the hold cannot cover its text (the stream is cut there). A
   * frame the hold already covers is handled without waiting (no promise per chunk).
   */
  private handle(frame: StreamFrame): boolean | Promise<boolean> {
    if (frame.usage) this.reported = frame.usage;
    if (frame.text !== "") {
      if (this.textFrames++ === 0) this.firstTextMs = this.lastReadMs;
      this.lastTextMs = this.lastReadMs;
    }
    if (this.clientGone) {
      this.afterGone += frame.text;
      return true;
    }
    this.ids ??= chunkIds(frame, this.admission.model.id);
    if (frame.usageOnly) return this.handleUsage(frame);
    if (frame.text !== "") {
      if (!this.meter.deliverNow(frame.text, frame.usage?.output)) return this.handleUncovered(frame);
      this.firstTokenMs ??= performance.now();
    }
    this.push(chunkEvent(frame));
    return true;
  }

  private async handleUsage(frame: StreamFrame): Promise<boolean> {
    if (frame.usage) await this.meter.report(frame.usage.output);
    // Kept for the end: it goes out once settled, with the billed cost (settle).
    if (this.wantsUsage) this.usageFrame = frame;
    return true;
  }

  /** A frame whose text the hold does not cover yet: the meter makes room, or the stream is cut here. */
  private async handleUncovered(frame: StreamFrame): Promise<boolean> {
    if (!(await this.meter.deliver(frame.text, frame.usage?.output))) {
      this.withheld = { text: frame.text, reported: frame.usage?.output };
      return false;
    }
    this.firstTokenMs ??= performance.now();
    this.push(chunkEvent(frame));
    return true;
  }

  private async pump(): Promise<void> {
    const timing = { keepAliveMs: this.deps.env.STREAM_KEEPALIVE_MS, stallMsMax: this.deps.env.STREAM_STALL_MS };
    let upstream: UpstreamStream | null = null;
    try {
      // The pool's decoder: it times the tokens, which the reply's close reports to the backend's estimates.
      upstream = new UpstreamStream(this.outcome.reply, this.outcome.decoder, timing, () => this.push(KEEP_ALIVE));
      read: for (;;) {
        const chunk = await upstream.read();
        if (chunk.done) {
          upstream.ended();
          break;
        }
        if (this.cutMs === null) this.lastReadMs = performance.now();
        const piece = upstream.piece(chunk.value);
        this.unweighedBytes = chunk.value.byteLength;
        // Before the piece's frames: a wire that opens with the input count reads it at the first.
        if (piece.inputTokensAtStart !== undefined) this.inputTokensAtStart ??= piece.inputTokensAtStart;
        for (const frame of piece.frames) {
          const handled = this.handle(frame);
          if (!(handled === true || (handled !== false && (await handled)))) break read;
        }
        this.unweighedBytes = 0;
        // Translating decoders report usage on the piece (Anthropic's message_delta, Gemini's
        // usageMetadata with its thoughts), not on a frame: the meter sees every figure.
        if (piece.usage) {
          this.reported = piece.usage;
          if (!this.clientGone) await this.meter.report(piece.usage.output);
        }
        this.meterEvent();
        if (piece.error) this.failure = piece.error;
        if (piece.done || piece.error) {
          this.finished = piece.done;
          break;
        }
        if (this.queuedChars > STREAM_RELAY_BUFFER_CHARS_MAX) await this.roomForMore();
      }
      if (!this.finished && !this.failure && this.withheld === null && !this.clientGone) {
        this.failure = fail("upstream_error", "The upstream closed the stream before it finished.");
      }
    } catch (error) {
      if (!this.clientGone) {
        const stall = error instanceof StreamStalled ? error : (upstream?.stall() ?? null);
        this.failure = stall
          ? fail("upstream_timeout", `The upstream stalled: ${stall.message}.`)
          : fail("upstream_error", `The upstream stream broke off: ${(error as Error).message}`);
      }
    }
    upstream?.close();
    const decision = decideEnd({
      clientGone: this.clientGone,
      withheld: this.withheld !== null,
      finished: this.finished,
      failure: this.failure,
      reported: this.reported,
    });
    this.outcome.reply.close(decision.reply);
    await this.meter.idle();
    await this.settle(decision);
  }

  /** The output billed for a decided end (the admission bounds it by the hold). */
  private async outputTokens(decision: EndDecision): Promise<number> {
    switch (decision.output) {
      case "report":
        return this.reported!.output;
      case "cut":
        return this.cutOutput();
      case "count_sent":
        return this.unreported(this.afterGone);
      case "meter":
        return this.reported ? await this.meter.exact() : this.unreported("");
    }
  }

  /** What the upstream sent without a report: everything delivered, and `more` read after. */
  private unreported(more: string): Promise<number> {
    return unreportedOutputTokens(this.admission, this.meter.delivered + more, this.vendorCount, this.deps.log.bind(null, "warn"));
  }

  /** A stream cut when its client left: what was read until the cut and the allowance (unreported.ts). */
  private async cutOutput(): Promise<number> {
    const cut = await cutOutputTokens(
      this.admission,
      {
        text: this.meter.delivered + this.afterGone,
        answeredMs: this.answeredMs,
        lastReadMs: this.lastReadMs,
        cutMs: this.cutMs ?? performance.now(),
        tpotMs: Math.min(this.outcome.backend.tpot.value, this.ownTpotMs()),
      },
      this.vendorCount,
      this.deps.log.bind(null, "warn"),
    );
    // A running count the upstream sent (vLLM's continuous usage) is its own figure of what it generated.
    const reported = Math.min(this.reported?.output ?? 0, this.admission.coveredOutputUnits);
    this.cut = reported > cut.output ? { output: reported, metered: reported, allowance: 0 } : cut;
    return this.cut.output;
  }

  /**
   * How a stream that ended early was billed, for its usage record; and the operator's exposure
   * on a cut: the allowance billed, or what a report that came after the leave showed beyond the
   * cut's count.
   */
  private async early(decision: EndDecision, output: number): Promise<Settlement["early"]> {
    const { model } = this.admission;
    const backend = this.outcome.backend.name;
    if (decision.end === "done") return undefined;
    if (decision.end === "length_cut") return { endedBy: "gateway", outputMeteredUnits: output, outputAllowanceUnits: 0 };
    if (decision.end === "failed") return { endedBy: "upstream", outputMeteredUnits: output, outputAllowanceUnits: 0 };
    if (this.cut) {
      this.deps.metrics.cutAllowanceBilled(model.id, backend, this.cut.allowance);
      return { endedBy: "client", outputMeteredUnits: this.cut.metered, outputAllowanceUnits: this.cut.allowance };
    }
    // The upstream finished before the cut took effect: its report is billed; what the cut would have billed is the exposure.
    if (decision.output === "report" && this.cutMs !== null)
      this.deps.metrics.cutReportedBeyond(model.id, backend, output - (await this.cutOutput()));
    return { endedBy: "client", outputMeteredUnits: output, outputAllowanceUnits: 0 };
  }

  /** This stream's time per token so far (infinite before its second text frame). */
  private ownTpotMs(): number {
    return this.textFrames < 2 ? Infinity : (this.lastTextMs - this.firstTextMs) / (this.textFrames - 1);
  }

  /** Settles the stream as decided (through its request's `settle`), queues its last frames and reports its end on the bus. */
  private async settle(decision: EndDecision): Promise<void> {
    const { body, budget } = this.request;
    const usage = this.reported;
    const delivered = this.meter.delivered;
    const output = await this.outputTokens(decision);
    // A stream cut at its length is billed what was delivered; what was read beyond it is metered and written off.
    const metered =
      decision.end === "length_cut"
        ? Math.max(output, this.withheld!.reported ?? (await countTokens(delivered + this.withheld!.text)))
        : undefined;
    const content = () => ({ prompt: body.messages, completion: delivered });
    // A report is taken no lower than what was proven used: the prompt's words, every word the upstream sent.
    const floor = usage
      ? { input: promptTokensLowerBound(body), output: wordsLowerBound(delivered + this.afterGone + (this.withheld?.text ?? "")) }
      : undefined;
    const { settled, prompt, used } = await this.request.settle({
      backend: this.outcome.backend,
      reported: usage,
      inputAtStart: this.inputTokensAtStart,
      output,
      ...(metered === undefined ? {} : { metered }),
      status: decision.status,
      // Only a stream that finished owed a report; one cut or failed never sent it.
      usageOwed: decision.end === "done",
      servedDefaultTier: this.ids?.serviceTier === "default",
      extra: { firstTokenMs: this.firstTokenMs, content, floor, early: await this.early(decision, output) },
    });
    const billedMicro = settled?.billedMicro ?? null;
    this.hostedCallsBilled = this.admission.hostedCallsBilled(used);
    if (decision.last === "cut") {
      const ids = this.ids ?? {
        id: "chatcmpl-cut",
        created: Math.floor(Date.now() / 1000),
        model: this.admission.model.id,
        serviceTier: null,
      };
      const usage = this.wantsUsage ? { ...prompt, output } : null;
      for (const event of cutEvents(ids, budget.choices, usage, billedMicro)) this.push(event);
    } else if (decision.last !== null) {
      if (this.usageFrame !== null) this.push(billedUsage(this.usageFrame, billedMicro));
      this.push(decision.last === "error" ? { kind: "error", failure: this.failure! } : DONE);
    }
    this.meterEvent(decision.end, output);
  }
}

/**
 * A relayed stream as an HTTP body: what Elysia's generator route returns (an async iterator,
 * taken by Elysia's own generator streaming). Each `next` hands over what the relay has queued,
 * rendered by `render` (null: nothing to write for these frames); only when nothing is queued
 * does it return a promise, resolved by the relay's next frame. A slow stream's wait for its next
 * token thus holds one promise of ours, not the chain of an async generator awaiting an async
 * function. A client that stops pulling (Elysia calls `return`) has left.
 */
export class RelayBody implements AsyncIterableIterator<Uint8Array> {
  private resolveNext: ((result: IteratorResult<Uint8Array>) => void) | null = null;
  private readonly wake = () => {
    const resolve = this.resolveNext;
    if (resolve === null) return;
    let result: IteratorResult<Uint8Array> | null;
    try {
      result = this.ready();
    } catch {
      // Called from the pump or the silence watch: a frame that cannot be rendered ends this
      // body, not them (the client sees its stream end and the relay settles as if it left).
      this.relay.leave();
      result = { done: true, value: undefined };
    }
    if (result === null) this.relay.onNext(this.wake);
    else {
      this.resolveNext = null;
      resolve(result);
    }
  };

  constructor(
    private readonly relay: Relay,
    private readonly render: (events: RelayEvent[]) => Uint8Array | null,
    private first: Uint8Array | null = null,
  ) {}

  next(): Promise<IteratorResult<Uint8Array>> {
    const result = this.ready();
    if (result !== null) return Promise.resolve(result);
    return new Promise((resolve) => {
      this.resolveNext = resolve;
      this.relay.onNext(this.wake);
    });
  }

  /** What can be written now; null when the relay has nothing yet. */
  private ready(): IteratorResult<Uint8Array> | null {
    if (this.first) {
      const value = this.first;
      this.first = null;
      return { done: false, value };
    }
    for (;;) {
      const frames = this.relay.taken();
      if (frames === null) return { done: true, value: undefined };
      if (frames === NOTHING_YET) return null;
      const value = this.render(frames);
      if (value) return { done: false, value };
    }
  }

  async return(): Promise<IteratorResult<Uint8Array>> {
    this.relay.leave();
    await this.relay.done;
    return { done: true, value: undefined };
  }

  [Symbol.asyncIterator](): this {
    return this;
  }
}

/** The end of a stream cut at its hold: finish_reason "length" per choice, usage, the end. */
function cutEvents(ids: ChunkIds, choices: number, usage: Usage | null, billedMicro: bigint | null): RelayEvent[] {
  const base = { id: ids.id, object: "chat.completion.chunk", created: ids.created, model: ids.model };
  const events: RelayEvent[] = [];
  for (let index = 0; index < choices; index++) {
    events.push({
      kind: "chunk",
      chunk: { ...base, choices: [{ index, delta: {}, logprobs: null, finish_reason: "length" }] },
      json: null,
    });
  }
  if (usage) {
    const cost = billedMicro === null ? {} : { cost: costToman(billedMicro) };
    events.push({ kind: "usage", chunk: { ...base, choices: [], usage: { ...usageToOpenAI(usage), ...cost } }, json: null });
  }
  events.push(DONE);
  return events;
}
