/**
 * The pool actor: one per model on each node, owning this node's view of the model's backends
 * (backend.ts: estimates, in-flight, breaker, host queue, concurrency limit).
 *
 * In full, with the reasoning: docs/internals.md#the-pool-actor.
 */
import { strict as assert } from "node:assert";
import { BACKENDS_PER_POOL_MAX, type BackendConfig, type PaidFields } from "../../src/config.ts";
import { fail } from "../../src/errors.ts";
import type { Logger } from "../../src/log.ts";
import { invariant } from "../../src/invariant.ts";
import type { ChatStreamDecoder, ReplyContext, UpstreamFailure, UpstreamRequest, Usage } from "../../src/providers/types.ts";
import {
  CHAT_REPLY_BYTES_MAX,
  readBounded,
  readTextBounded,
  sendUpstream,
  UPSTREAM_ERROR_BODY_BYTES_MAX,
  type UpstreamReply,
} from "../../src/providers/upstream.ts";
import { Backend, TPOT_MS_NEUTRAL, TTFT_MS_NEUTRAL } from "./backend.ts";

export { Backend } from "./backend.ts";

export const ATTEMPTS_MAX = 3;
/** A backend no request went to for this long gets the next one, as a probe of its speed. */
export const EXPLORE_AFTER_MS = 5_000;

export type Region = "in-country";

/**
 * One upstream call of any operation. `build` makes the backend's request, or returns undefined
 * when the backend's adapter lacks the operation (that backend is skipped).
 */
export interface PoolCall {
  requestId: string;
  /** Only backends in this region when set (residency). */
  region?: Region;
  signal?: AbortSignal;
  /** Output tokens the reply is expected to carry, for the cost (0 for operations without). */
  expectedOutputTokens?: number;
  build(backend: Backend): UpstreamRequest | undefined;
}

/**
 * An accepted reply (status 2xx, headers read, body not yet read). Its reader closes it once
 * (`reply.close(end, timing?)`): that frees the backend's slot and teaches the backend how it
 * ended (a `done` reply without timing counts the time to its headers).
 */
export type SendOutcome =
  | { kind: "reply"; backend: Backend; reply: UpstreamReply; startedMs: number }
  | { kind: "failed"; backend: Backend | null; failure: UpstreamFailure };

type Sent = Extract<SendOutcome, { kind: "reply" }>;
type Failed = Extract<SendOutcome, { kind: "failed" }>;

function isFailed(outcome: { kind: string }): outcome is Failed {
  return outcome.kind === "failed";
}

/** A reply read whole: its bytes, from the backend that sent them. */
export type WholeOutcome = { kind: "whole"; backend: Backend; bytes: Uint8Array } | Failed;

export interface ChatCall {
  body: Record<string, unknown>;
  stream: boolean;
  maxTokens: number;
  requestId: string;
  /** Unix seconds, for translated replies (adapters read no clock). */
  created: number;
  /** Only backends in this region when set (residency). */
  region?: Region;
  signal?: AbortSignal;
}

export type ChatOutcome =
  /** `body` is in the OpenAI format whatever the backend's kind. */
  /** `json`: `body` as a value (ChatReply), read instead of parsing `body` again. */
  | { kind: "json"; backend: Backend; body: string; json: unknown; usage: Usage | null; status: number }
  /** Read the stream with `decoder` (it times the tokens) and close the reply at its end: its timing is the decoder's. */
  | { kind: "stream"; backend: Backend; reply: UpstreamReply; decoder: ChatStreamDecoder }
  | { kind: "failed"; backend: Backend | null; failure: UpstreamFailure };

export interface PoolOptions {
  upstreamTimeoutMs: number;
  /** Where an upstream's misbehaviour (a redirect) is logged; unset: nowhere. */
  log?: Logger;
  random?: () => number;
  nowMs?: () => number;
}

/** The tries of one request: the backends already tried, within one deadline. */
interface Tries {
  tried: Set<Backend>;
  attempts: number;
  deadlineMs: number;
  /** Some backend answered (or timed out) rather than refusing the connection. */
  reached: boolean;
  last: Extract<SendOutcome, { kind: "failed" }> | null;
  unreachable: string[];
}

export class PoolActor {
  backends: Backend[];
  /** Chat fields this pool enables and their prices (src/operations/chat/paidFields.ts); none when unset. */
  paidFields: PaidFields | undefined = undefined;

  constructor(
    readonly model: string,
    backends: BackendConfig[],
    private readonly options: PoolOptions,
  ) {
    assertBackendCount(model, backends);
    const now = this.now();
    this.backends = backends.map((b) => new Backend(b, now));
  }

  now(): number {
    return this.options.nowMs?.() ?? performance.now();
  }

  hasRegion(region: Region): boolean {
    return this.backends.some((b) => b.config.region === region);
  }

  /**
   * Replaces the backend list. A backend with the same name, kind, url and key keeps its
   * estimates, breaker and in-flight count; a new one starts at the median of the warm ones
   * capped at the neutral estimate, so it is neither flooded nor starved.
   */
  update(configs: BackendConfig[]): void {
    assertBackendCount(this.model, configs);
    const now = this.now();
    const old = new Map(this.backends.map((b) => [b.name, b]));
    // Never above the neutral estimate: a low start is corrected by the first slow reply (the
    // peak rule), a high one only slowly, and the warm ones may carry failure penalties.
    const neutral =
      this.backends.length > 0
        ? {
            ttftMs: Math.min(TTFT_MS_NEUTRAL, median(this.backends.map((b) => b.ttft.value))),
            tpotMs: Math.min(TPOT_MS_NEUTRAL, median(this.backends.map((b) => b.tpot.value))),
          }
        : undefined;
    this.backends = configs.map((config) => {
      const kept = old.get(config.name);
      if (!kept || kept.config.url !== config.url || kept.config.kind !== config.kind || kept.config.api_key !== config.api_key) {
        return new Backend(config, now, neutral);
      }
      if (kept.config.concurrency_max !== config.concurrency_max) kept.concurrencyLimit = config.concurrency_max;
      kept.config = config;
      return kept;
    });
  }

  /** The backend for the next request, or null when none is eligible. */
  pick(exclude: ReadonlySet<Backend>, region?: Region, expectedOutputTokens = 0): Backend | null {
    const now = this.now();
    let stalest: Backend | null = null;
    const eligible: Backend[] = [];
    for (const b of this.backends) {
      if (exclude.has(b) || !b.available(now) || (region && b.config.region !== region)) continue;
      eligible.push(b);
      if (now - b.lastPickedMs > EXPLORE_AFTER_MS && (!stalest || b.lastPickedMs < stalest.lastPickedMs)) stalest = b;
    }
    let chosen = stalest;
    if (!chosen && eligible.length <= 1) chosen = eligible[0] ?? null;
    else if (!chosen) {
      // Power of d choices: d distinct random candidates (a partial shuffle), the cheapest wins.
      const random = this.options.random ?? Math.random;
      const d = choicesFor(eligible.length);
      let best = Infinity;
      for (let k = 0; k < d; k++) {
        const j = k + Math.floor(random() * (eligible.length - k));
        const candidate = eligible[j]!;
        eligible[j] = eligible[k]!;
        eligible[k] = candidate;
        const cost = candidate.cost(expectedOutputTokens, now);
        if (cost < best) {
          best = cost;
          chosen = candidate;
        }
      }
    }
    if (chosen) {
      chosen.lastPickedMs = now;
      chosen.breaker.taken(now);
    }
    return chosen;
  }

  /**
   * Sends the call to the best backend, and to another on a retryable failure before any reply
   * was accepted. The caller reads the accepted reply and calls `release`.
   */
  send(call: PoolCall): Promise<SendOutcome> {
    return this.sendWithin(call, this.tries());
  }

  /** A chat completion: a whole JSON reply (read and parsed here), or a stream to relay. */
  async chat(call: ChatCall): Promise<ChatOutcome> {
    const poolCall: PoolCall = {
      requestId: call.requestId,
      region: call.region,
      signal: call.signal,
      expectedOutputTokens: call.maxTokens,
      build: (backend) =>
        backend.adapter.chat?.buildChatRequest({
          body: call.body,
          upstreamModel: backend.config.upstream_model ?? this.model,
          maxTokens: call.maxTokens,
          stream: call.stream,
        }),
    };
    return this.sendAndRead(poolCall, async (sent) => (call.stream ? this.streamOutcome(sent, call) : this.readWhole(sent, call)));
  }

  /**
   * An operation's whole reply (embeddings, images, a transcript), read within `bytesMax` before
   * any byte reaches the client: a reply that breaks off is sent to another backend.
   */
  sendWhole(call: PoolCall, bytesMax: number): Promise<WholeOutcome> {
    return this.sendAndRead(call, async (sent) => {
      const read = await readWholeBytes(sent, bytesMax);
      if (read.kind === "whole") sent.reply.close("done");
      return read;
    });
  }

  /** Sends the call, reads the accepted reply with `read`, and tries another backend while a read fails retryably. */
  private async sendAndRead<T extends { kind: string }>(call: PoolCall, read: (sent: Sent) => Promise<T | Failed>): Promise<T | Failed> {
    const tries = this.tries();
    for (;;) {
      const sent = await this.sendWithin(call, tries);
      if (sent.kind === "failed") return sent;
      const outcome = await read(sent);
      if (!isFailed(outcome) || !outcome.failure.retryable || !this.mayRetry(tries, call.signal)) return outcome;
      tries.last = outcome;
    }
  }

  private tries(): Tries {
    return {
      tried: new Set(),
      attempts: 0,
      deadlineMs: this.now() + this.options.upstreamTimeoutMs,
      reached: false,
      last: null,
      unreachable: [],
    };
  }

  private mayRetry(tries: Tries, signal?: AbortSignal): boolean {
    return tries.attempts < ATTEMPTS_MAX && this.now() < tries.deadlineMs && !signal?.aborted;
  }

  private async sendWithin(call: PoolCall, tries: Tries): Promise<SendOutcome> {
    while (this.mayRetry(tries, call.signal)) {
      const backend = this.pick(tries.tried, call.region, call.expectedOutputTokens);
      if (!backend) break;
      tries.tried.add(backend);
      const request = call.build(backend);
      if (!request) continue;
      tries.attempts++;
      const outcome = await this.attempt(backend, request, call, tries);
      if (outcome.kind !== "failed" || !outcome.failure.retryable) return outcome;
      tries.last = outcome;
    }
    const where = call.region ? " in-country" : "";
    if (tries.last && (tries.reached || call.signal?.aborted)) return tries.last;
    const now = this.now();
    const full = this.backends.some(
      (b) => (!call.region || b.config.region === call.region) && b.breaker.allows(now) && b.inFlight >= b.concurrencyLimit,
    );
    const tried =
      tries.unreachable.length > 0
        ? ` (could not connect to ${tries.unreachable.join(", ")})`
        : full
          ? " (the healthy ones are at their concurrency limit)"
          : "";
    return {
      kind: "failed",
      backend: tries.last?.backend ?? null,
      // Every backend was tried or is down: nothing is left to retry on.
      failure: {
        ...fail("no_healthy_backend", `No healthy${where} backend is available for ${this.model}${tried}.`, { retryAfterS: 1 }),
        retryable: false,
      },
    };
  }

  private async attempt(backend: Backend, request: UpstreamRequest, call: PoolCall, tries: Tries): Promise<SendOutcome> {
    const startedMs = this.now();
    backend.inFlight++;
    backend.requests++;
    const sent = await sendUpstream({
      baseUrl: backend.config.url,
      request,
      requestId: call.requestId,
      signal: call.signal,
      timeoutMs: Math.max(1, tries.deadlineMs - startedMs),
    });
    const headersMs = this.now() - startedMs;
    if (!sent.ok) {
      leaveBackend(backend);
      if (call.signal?.aborted) backend.breaker.probeAbandoned();
      else backend.failed(this.now());
      if (sent.redirect) {
        backend.redirects.request++;
        this.options.log?.("warn", "upstream_redirect", {
          requestId: call.requestId,
          model: this.model,
          backend: backend.name,
          status: sent.redirect.status,
          location: sent.redirect.locationOrigin,
        });
      }
      if (sent.failure.code === "upstream_timeout" || sent.redirect) tries.reached = true;
      else tries.unreachable.push(backend.name);
      return { kind: "failed", backend, failure: sent.failure };
    }
    tries.reached = true;
    const { reply } = sent;
    reply.onClose = (end, timing) => {
      leaveBackend(backend);
      if (end === "done") backend.observe(timing ?? { outputTokens: 0, durationMs: headersMs }, this.now());
      else {
        backend.breaker.probeAbandoned();
        if (end === "failed") backend.failed(this.now());
      }
    };
    if (!reply.response.ok) {
      const { text } = await readTextBounded(reply.response, UPSTREAM_ERROR_BODY_BYTES_MAX).catch(() => ({ text: "" }));
      const failure = backend.adapter.errorToFailure(reply.response.status, text);
      // A request the upstream refuses as invalid says nothing against the backend.
      reply.close(failure.retryable ? "failed" : "abandoned");
      return { kind: "failed", backend, failure };
    }
    backend.accepted(this.now());
    return { kind: "reply", backend, reply, startedMs };
  }

  /** What a translating adapter stamps on the OpenAI-format reply it builds. */
  private replyContext(call: ChatCall): ReplyContext {
    return { requestId: call.requestId, model: this.model, created: call.created };
  }

  /** Reads and parses a whole reply within CHAT_REPLY_BYTES_MAX; a body that breaks off counts against the backend. */
  private async readWhole(sent: Sent, call: ChatCall): Promise<ChatOutcome> {
    const { backend, reply, startedMs } = sent;
    const read = await readWholeText(sent, CHAT_REPLY_BYTES_MAX);
    if (read.kind === "failed") return read;
    // A backend without chat was skipped by `build`.
    const parsed = backend.adapter.chat!.parseChatResponse(read.text, this.replyContext(call));
    if ("code" in parsed) {
      reply.close("failed");
      return { kind: "failed", backend, failure: parsed };
    }
    reply.close("done", { outputTokens: parsed.usage?.output ?? 0, durationMs: this.now() - startedMs });
    return { kind: "json", backend, body: parsed.body, json: parsed.json, usage: parsed.usage, status: reply.response.status };
  }

  /**
   * Hands a stream to the edge with a decoder that times its tokens: when the edge closes the
   * reply `done`, the backend learns its time to first token and per token.
   */
  private streamOutcome(sent: Extract<SendOutcome, { kind: "reply" }>, call: ChatCall): ChatOutcome {
    const { backend, reply, startedMs } = sent;
    reply.streaming();
    const inner = backend.adapter.chat!.createChatStreamDecoder(this.replyContext(call));
    let firstMs: number | null = null;
    let lastMs: number | null = null;
    let textFrames = 0;
    let usage: Usage | undefined;
    const decoder: ChatStreamDecoder = {
      push: (text) => {
        const piece = inner.push(text);
        for (const frame of piece.frames) {
          if (frame.text === "") continue;
          lastMs = this.now();
          firstMs ??= lastMs;
          textFrames++;
        }
        if (piece.usage) usage = piece.usage;
        return piece;
      },
    };
    const learn = reply.onClose!;
    reply.onClose = (end) => {
      if (end !== "done") return learn(end);
      const durationMs = (lastMs ?? this.now()) - startedMs;
      learn("done", {
        ttftMs: firstMs === null ? durationMs : firstMs - startedMs,
        outputTokens: usage?.output ?? textFrames,
        durationMs,
      });
    };
    return { kind: "stream", backend, reply, decoder };
  }
}

/**
 * Candidates compared per pick: two (P2C) up to four backends, then log2 of the pool size. With
 * two out of eight the fastest backend is in the pair only a quarter of the time, and the two
 * fastest together can win at most 46% of picks however slow the others are; three out of eight
 * lets them win about two thirds while the randomness still keeps bursts from piling up.
 */
export function choicesFor(eligible: number): number {
  return Math.min(eligible, Math.max(2, Math.ceil(Math.log2(eligible))));
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? 0;
}

/** A request leaves its backend: one fewer in flight, never below none. */
function leaveBackend(backend: Backend): void {
  backend.inFlight--;
  if (!invariant(backend.inFlight >= 0, "in_flight_non_negative", { backend: backend.name, inFlight: backend.inFlight }))
    backend.inFlight = 0;
}

/** Every door into a pool checks its backends against the one schema (src/config.ts), which refuses a longer list. */
function assertBackendCount(model: string, backends: BackendConfig[]): void {
  assert(backends.length <= BACKENDS_PER_POOL_MAX, `pool ${model}: ${backends.length} backends, above BACKENDS_PER_POOL_MAX`);
}

/**
 * Reads an accepted reply to its end within `bytesMax`, left open for its reader to close: a
 * larger reply is a 502 (the upstream is abandoned), one that breaks off a retryable 502.
 */
async function readWholeBytes(sent: Sent, bytesMax: number): Promise<WholeOutcome> {
  const read = await readWholeWith(sent, bytesMax, async (response, max) => {
    const { bytes, truncated } = await readBounded(response, max);
    return { value: bytes, truncated };
  });
  return read.kind === "failed" ? read : { kind: "whole", backend: read.backend, bytes: read.value };
}

/** readWholeBytes as text (a whole chat reply): a body whose declared length fits is decoded natively in one call. */
async function readWholeText(sent: Sent, bytesMax: number): Promise<{ kind: "whole"; text: string } | Failed> {
  const read = await readWholeWith(sent, bytesMax, async (response, max) => {
    const { text, truncated } = await readTextBounded(response, max);
    return { value: text, truncated };
  });
  return read.kind === "failed" ? read : { kind: "whole", text: read.value };
}

async function readWholeWith<T>(
  sent: Sent,
  bytesMax: number,
  read: (response: Response, bytesMax: number) => Promise<{ value: T; truncated: boolean }>,
): Promise<{ kind: "whole"; backend: Backend; value: T } | Failed> {
  const { backend, reply } = sent;
  try {
    const { value, truncated } = await read(reply.response, bytesMax);
    if (truncated) {
      reply.close("abandoned");
      return {
        kind: "failed",
        backend,
        failure: { ...fail("upstream_error", `The upstream reply is larger than the limit of ${bytesMax} bytes.`), retryable: false },
      };
    }
    return { kind: "whole", backend, value };
  } catch (error) {
    reply.close("failed");
    return {
      kind: "failed",
      backend,
      failure: { ...fail("upstream_error", `The upstream reply broke off: ${(error as Error).message}`), retryable: true },
    };
  }
}
