/**
 * The stream relay: the upstream's SSE frames to the client as OpenAI's clients expect them,
 * metered live, settled exactly once.
 *
 *   pump (reads the upstream): decode → meter (extend the hold ahead of the tokens) → queue.
 *     The queue holds at most STREAM_RELAY_BUFFER_BYTES_MAX; past it the pump stops reading,
 *     so a client that stops reading pauses the upstream instead of growing our memory.
 *   client (Elysia's generator): takes what is queued, one write at a time; `: keep-alive`
 *     comments during long upstream silences; `data: [DONE]` or `data: {"error":…}`, then close.
 *   ends, each settled once before the last frame is queued:
 *     done        the upstream's usage, else js-tiktoken over the delivered text;
 *     cut         the hold could not be extended: finish_reason "length", the usage chunk when
 *                 asked, [DONE]; the upstream is aborted; billed = delivered tokens, and what was
 *                 read beyond them is metered and written off;
 *     failed      an error frame (a mid-stream upstream error, a break, a stall of
 *                 STREAM_STALL_MS); billed for the delivered tokens;
 *     client gone the upstream keeps being read for STREAM_DRAIN_MS for a late usage report,
 *                 then is aborted (right after its next chunk, at STREAM_ABORT_MS_MAX at the
 *                 latest); billed once: its report if it finished, else the count of what it
 *                 sent until the abort.
 */
import { METER_EVENTS, type MeterEvent } from "../../../actors/protocol.ts";
import type { ChatOutcome } from "../../../actors/pool/pool.ts";
import { type Admission, STATUS_CLIENT_CLOSED, usedTokens } from "../../admission/admission.ts";
import { errorBody, fail, type Failure } from "../../errors.ts";
import { usageToOpenAI } from "../../providers/chatShape.ts";
import type { StreamFrame, Usage } from "../../providers/types.ts";
import { readUpstreamStream, StreamStalled } from "../../providers/upstream.ts";
import { countPromptTokens, countTokens } from "../../tokens/count.ts";
import type { EdgeDeps } from "../deps.ts";
import type { ChatBudget } from "./budget.ts";
import { StreamMeter } from "./meter.ts";
import type { ChatRequest } from "./schema.ts";

/** Bytes of frames queued for a client that is not reading, before the upstream read pauses. */
export const STREAM_RELAY_BUFFER_BYTES_MAX = 16_384;
/**
 * The largest single read Bun's fetch hands over (measured: ~480 KiB after the socket piled up).
 * The queue can pass its bound by one read, so a stream's relay holds at most
 * STREAM_RELAY_BUFFER_BYTES_MAX + STREAM_READ_BYTES_MAX whatever its client does.
 */
export const STREAM_READ_BYTES_MAX = 524_288;
/** After the client went away: how long the upstream may still finish and report its usage. */
export const STREAM_DRAIN_MS = 100;
/** After the client went away, the upstream is aborted within this bound whatever it does. */
export const STREAM_ABORT_MS_MAX = 250;
/** Meter events per stream on the bus: at most one per this interval, plus one at the end. */
export const METER_EVENT_INTERVAL_MS = 1_000;

/** Bytes queued for clients by every stream of this process: the bound, measured (tests, metrics). */
let queuedBytesAll = 0;
export function relayQueuedBytes(): number {
  return queuedBytesAll;
}

const encoder = new TextEncoder();
const DONE_FRAME = encoder.encode("data: [DONE]\n\n");
/** An SSE comment: clients ignore it, proxies and load balancers see the connection is alive. */
const KEEP_ALIVE_FRAME = encoder.encode(": keep-alive\n\n");

/** What the relay reads of the request beyond its admission. */
export interface RelayRequest {
  body: ChatRequest;
  budget: ChatBudget;
}

type End = NonNullable<MeterEvent["end"]>;

/** What identifies the stream's chunks, taken from the first the upstream sent. */
interface ChunkIds {
  id: string;
  created: number;
  model: string;
}

function chunkIds(frame: StreamFrame, fallbackModel: string): ChunkIds | null {
  try {
    const chunk = JSON.parse(frame.data) as Partial<ChunkIds>;
    return {
      id: typeof chunk.id === "string" ? chunk.id : "chatcmpl-cut",
      created: typeof chunk.created === "number" ? chunk.created : Math.floor(Date.now() / 1000),
      model: typeof chunk.model === "string" ? chunk.model : fallbackModel,
    };
  } catch {
    return null;
  }
}

function frameBytes(data: string): Uint8Array {
  return encoder.encode(`data: ${data}\n\n`);
}

/**
 * Relays one admitted stream. The returned generator is what the Elysia route returns; the
 * upstream is read by a pump that runs beside it, bounded by the queue.
 */
export function relayStream(
  deps: EdgeDeps,
  admission: Admission,
  request: RelayRequest,
  outcome: Extract<ChatOutcome, { kind: "stream" }>,
  clientSignal: AbortSignal,
): AsyncGenerator<Uint8Array> {
  // From here the client's signal no longer aborts the upstream at once: the drain does.
  outcome.reply.finish();
  const wantsUsage = request.body.stream_options?.include_usage === true;
  const choices = request.budget.choices;
  const requestId = admission.requestId;
  const model = admission.model.id;
  const meter = new StreamMeter({ hold: admission, capTokens: request.budget.outputTokensMax * choices, enforce: request.budget.metered });

  const queue: Uint8Array[] = [];
  let queuedBytes = 0;
  let ended = false;
  let clientGone = false;
  // Who waits: the client for frames, the pump for room (an object: TS does not track closures).
  const wake: { client: (() => void) | null; pump: (() => void) | null } = { client: null, pump: null };
  const push = (bytes: Uint8Array) => {
    if (clientGone) return;
    queue.push(bytes);
    queuedBytes += bytes.length;
    queuedBytesAll += bytes.length;
    wake.client?.();
  };
  const roomForMore = async () => {
    while (queuedBytes > STREAM_RELAY_BUFFER_BYTES_MAX && !clientGone) await new Promise<void>((r) => (wake.pump = r));
  };

  let abortAfterNextPiece = false;
  let abortTimers: ReturnType<typeof setTimeout>[] = [];
  const onClientGone = () => {
    if (clientGone || ended) return;
    clientGone = true;
    queue.length = 0;
    queuedBytesAll -= queuedBytes;
    queuedBytes = 0;
    wake.pump?.();
    abortTimers = [
      setTimeout(() => (abortAfterNextPiece = true), STREAM_DRAIN_MS),
      setTimeout(() => outcome.reply.abort(), STREAM_ABORT_MS_MAX),
    ];
  };
  clientSignal.addEventListener("abort", onClientGone, { once: true });

  let lastEventMs = performance.now();
  const meterEvent = (end?: End, outputTokens = meter.tokens) => {
    const now = performance.now();
    if (!end && now - lastEventMs < METER_EVENT_INTERVAL_MS) return;
    lastEventMs = now;
    deps.bus.publish(METER_EVENTS, deps.subjects.meter(model), {
      requestId,
      keyId: admission.key.id,
      model,
      backend: outcome.backend.name,
      outputTokens,
      coveredTokens: meter.covered,
      reserveMicro: admission.reserveMicro,
      end,
    });
  };

  const pump = async () => {
    let reported: Usage | null = null;
    let finished = false;
    let failure: Failure | null = null;
    let ids: ChunkIds | null = null;
    let withheld: string | null = null;
    let withheldReport: number | undefined;
    /** Performance-clock time of the first delivered token, for TTFT. */
    let firstTokenMs: number | null = null;
    const content = () => ({ prompt: request.body.messages, completion: meter.delivered });
    const settle = (usage: Usage, status: number, billedMicroMax?: bigint) =>
      admission.settle(usedTokens(usage), outcome.backend.name, status, { firstTokenMs, content, billedMicroMax });
    let afterGone = ""; // read after the client left: generated, so billed
    const handle = async (frame: StreamFrame): Promise<boolean> => {
      if (frame.usage) reported = frame.usage;
      if (clientGone) {
        afterGone += frame.text;
        return true;
      }
      ids ??= chunkIds(frame, model);
      if (frame.usageOnly) {
        if (frame.usage) await meter.report(frame.usage.outputTokens);
        if (wantsUsage) push(frameBytes(frame.data));
        return true;
      }
      if (frame.text !== "" && !(await meter.deliver(frame.text, frame.usage?.outputTokens))) {
        withheld = frame.text;
        withheldReport = frame.usage?.outputTokens;
        return false;
      }
      if (frame.text !== "") firstTokenMs ??= performance.now();
      push(frameBytes(frame.data));
      return true;
    };
    try {
      // The pool's decoder: it times the tokens, which `release` reports to the backend's estimates.
      const decoder = outcome.decoder;
      const timing = { keepAliveMs: deps.env.STREAM_KEEPALIVE_MS, stallMsMax: deps.env.STREAM_STALL_MS };
      read: for await (const piece of readUpstreamStream(outcome.reply, decoder, timing)) {
        if (piece.keepAlive) {
          push(KEEP_ALIVE_FRAME);
          continue;
        }
        for (const frame of piece.frames) if (!(await handle(frame))) break read;
        // Translating decoders report usage on the piece (Anthropic's message_delta, Gemini's
        // usageMetadata with its thoughts), not on a frame: the meter sees every figure.
        if (piece.usage) {
          reported = piece.usage;
          if (!clientGone) await meter.report(piece.usage.outputTokens);
        }
        meterEvent();
        if (piece.error) failure = piece.error;
        if (piece.done || piece.error) {
          finished = piece.done;
          break;
        }
        if (abortAfterNextPiece) break;
        await roomForMore();
      }
      if (!finished && !failure && withheld === null && !clientGone) {
        failure = fail("upstream_error", "The upstream closed the stream before it finished.");
      }
    } catch (error) {
      if (!clientGone) {
        failure =
          error instanceof StreamStalled
            ? fail("upstream_timeout", `The upstream stalled: ${error.message}.`)
            : fail("upstream_error", `The upstream stream broke off: ${(error as Error).message}`);
      }
    } finally {
      abortTimers.forEach(clearTimeout);
      outcome.reply.abort(); // a no-op once the body was read to its end
      outcome.release();
    }
    await meter.idle();
    const usage = reported as Usage | null;
    // The prompt as reported, its cache parts included; counted when the upstream reported none.
    const input = async (): Promise<Usage> => (usage ? { ...usage } : { inputTokens: await countPromptTokens(request.body.messages), outputTokens: 0 });
    let end: End;
    let outputTokens: number;
    if (clientGone) {
      end = "client_gone";
      // Its final report if it finished, its running count if it keeps one, else our count: one figure.
      const output = usage ? usage.outputTokens : await countTokens(meter.delivered + afterGone);
      outputTokens = output;
      await settle({ ...(await input()), outputTokens: output }, STATUS_CLIENT_CLOSED);
    } else if (withheld !== null) {
      end = "length_cut";
      const prompt = await input();
      const billable = await meter.exact();
      outputTokens = billable;
      const metered = withheldReport ?? (await countTokens(meter.delivered + withheld));
      const billedMicroMax = admission.usedMicro(usedTokens({ ...prompt, outputTokens: billable }));
      await settle({ ...prompt, outputTokens: Math.max(metered, billable) }, 200, billedMicroMax);
      push(cutFrames(ids ?? { id: "chatcmpl-cut", created: Math.floor(Date.now() / 1000), model }, choices, wantsUsage ? { ...prompt, outputTokens: billable } : null));
    } else {
      end = failure ? "failed" : "done";
      const settled = finished && usage ? usage : { ...(await input()), outputTokens: await meter.exact() };
      outputTokens = settled.outputTokens;
      await settle(settled, failure ? 502 : 200);
      push(failure ? encoder.encode(`data: ${JSON.stringify(errorBody(failure))}\n\n`) : DONE_FRAME);
    }
    meterEvent(end, outputTokens);
  };

  const pumped = pump()
    .catch((error) => deps.log("error", "relay_failed", { requestId, error: (error as Error).message }))
    .finally(() => {
      ended = true;
      clientSignal.removeEventListener("abort", onClientGone);
      wake.client?.();
    });

  return (async function* client(): AsyncGenerator<Uint8Array> {
    try {
      for (;;) {
        if (queue.length > 0) {
          const bytes = queue.length === 1 ? queue[0]! : concat(queue);
          queue.length = 0;
          queuedBytesAll -= queuedBytes;
          queuedBytes = 0;
          wake.pump?.();
          yield bytes;
          continue;
        }
        if (ended) return;
        await new Promise<void>((resolve) => (wake.client = resolve));
        wake.client = null;
      }
    } finally {
      // Left before the end: the client went away (Elysia stops pulling and returns us).
      if (!ended) onClientGone();
      await pumped;
    }
  })();
}

function concat(parts: Uint8Array[]): Uint8Array {
  let length = 0;
  for (const part of parts) length += part.length;
  const out = new Uint8Array(length);
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

/** The end of a stream cut at its hold: finish_reason "length" per choice, usage, [DONE]. */
function cutFrames(ids: ChunkIds, choices: number, usage: Usage | null): Uint8Array {
  const base = { id: ids.id, object: "chat.completion.chunk", created: ids.created, model: ids.model };
  let text = "";
  for (let index = 0; index < choices; index++) {
    text += `data: ${JSON.stringify({ ...base, choices: [{ index, delta: {}, logprobs: null, finish_reason: "length" }] })}\n\n`;
  }
  if (usage) {
    text += `data: ${JSON.stringify({ ...base, choices: [], usage: usageToOpenAI(usage) })}\n\n`;
  }
  return encoder.encode(text + "data: [DONE]\n\n");
}
