/**
 * The pool actor: one per model on each node, owning this node's view of the model's backends.
 *
 *   pick:   power of two choices over cost = latency EWMA × (in-flight + 1) / weight, among
 *           backends under their concurrency cap whose breaker is closed (or due a probe).
 *   send:   through the backend's adapter; an error before the reply's headers (connection,
 *           timeout, 429, 5xx) is a latency penalty and a try on another backend, up to
 *           `ATTEMPTS_MAX`. Once a reply is accepted nothing is retried: bytes may have
 *           reached the client.
 *
 * Bodies and tokens stay on this node: the pool returns the upstream's reply to the edge.
 */
import type { BackendConfig } from "../../src/config.ts";
import { fail, type Failure } from "../../src/errors.ts";
import { adapterFor } from "../../src/providers/registry.ts";
import type { ProviderAdapter, UpstreamRequest, Usage } from "../../src/providers/types.ts";
import { sendUpstream, type UpstreamReply } from "../../src/providers/upstream.ts";

export const ATTEMPTS_MAX = 3;
/** A new backend's latency estimate: neither favoured nor avoided. */
export const LATENCY_MS_NEUTRAL = 250;
/** What an upstream failure counts as, so a backend that fails fast does not attract traffic. */
export const FAILURE_PENALTY_MS = 5_000;
const EWMA_WEIGHT_NEW = 0.3;
export const BREAKER_FAILURES_MAX = 5;
export const BREAKER_COOLDOWN_MS = 5_000;

export class Backend {
  readonly adapter: ProviderAdapter;
  inFlight = 0;
  latencyMs = LATENCY_MS_NEUTRAL;
  consecutiveFailures = 0;
  openUntilMs = 0;
  requests = 0;
  failures = 0;
  /** This node's share of the backend's cap (actors/pool/quota.ts sets it in a cluster). */
  concurrencyLimit: number;

  constructor(readonly config: BackendConfig) {
    this.adapter = adapterFor(config);
    this.concurrencyLimit = config.concurrency_max;
  }

  get name(): string {
    return this.config.name;
  }

  cost(): number {
    return (this.latencyMs * (this.inFlight + 1)) / this.config.weight;
  }

  available(nowMs: number): boolean {
    return this.inFlight < this.concurrencyLimit && this.openUntilMs <= nowMs;
  }

  succeeded(latencyMs: number): void {
    this.latencyMs += EWMA_WEIGHT_NEW * (latencyMs - this.latencyMs);
    this.consecutiveFailures = 0;
  }

  failed(nowMs: number): void {
    this.failures++;
    this.latencyMs += EWMA_WEIGHT_NEW * (Math.max(FAILURE_PENALTY_MS, this.latencyMs) - this.latencyMs);
    this.consecutiveFailures++;
    // Open (or re-open after a failed half-open probe) once failures run consecutively.
    if (this.consecutiveFailures >= BREAKER_FAILURES_MAX) this.openUntilMs = nowMs + BREAKER_COOLDOWN_MS;
  }
}

/**
 * One upstream call of any operation. `build` makes the backend's request, or returns undefined
 * when the backend's adapter lacks the operation (that backend is skipped).
 */
export interface PoolCall {
  requestId: string;
  /** Only backends in this region when set (residency). */
  region?: "in-country";
  signal?: AbortSignal;
  build(backend: Backend): UpstreamRequest | undefined;
}

/** An accepted reply (status 2xx, headers read, body not yet read); `release` frees the slot. */
export type SendOutcome =
  | { kind: "reply"; backend: Backend; reply: UpstreamReply; release: () => void; startedMs: number }
  | { kind: "failed"; backend: Backend | null; failure: Failure };

export interface ChatCall {
  body: Record<string, unknown>;
  stream: boolean;
  maxTokens: number;
  requestId: string;
  /** Only backends in this region when set (residency). */
  region?: "in-country";
  signal?: AbortSignal;
}

export type ChatOutcome =
  | { kind: "json"; backend: Backend; body: string; usage: Usage | null; status: number }
  | { kind: "stream"; backend: Backend; reply: UpstreamReply; release: () => void }
  | { kind: "failed"; backend: Backend | null; failure: Failure };

export interface PoolOptions {
  upstreamTimeoutMs: number;
  random?: () => number;
  nowMs?: () => number;
}

export class PoolActor {
  readonly backends: Backend[];

  constructor(
    readonly model: string,
    backends: BackendConfig[],
    private readonly options: PoolOptions,
  ) {
    this.backends = backends.map((b) => new Backend(b));
  }

  private now(): number {
    return this.options.nowMs?.() ?? performance.now();
  }

  /** Two random eligible backends, the cheaper of them; null when none is eligible. */
  pick(exclude: ReadonlySet<Backend>, region?: "in-country"): Backend | null {
    const now = this.now();
    const eligible = this.backends.filter(
      (b) => !exclude.has(b) && b.available(now) && (!region || b.config.region === region),
    );
    if (eligible.length <= 1) return eligible[0] ?? null;
    const random = this.options.random ?? Math.random;
    const i = Math.floor(random() * eligible.length);
    let j = Math.floor(random() * (eligible.length - 1));
    if (j >= i) j++;
    const a = eligible[i]!;
    const b = eligible[j]!;
    return a.cost() <= b.cost() ? a : b;
  }

  /**
   * Sends the call to the best backend, and to another on a retryable failure before any reply
   * was accepted, up to `ATTEMPTS_MAX`. The caller reads the accepted reply and calls `release`.
   */
  async send(call: PoolCall): Promise<SendOutcome> {
    const tried = new Set<Backend>();
    let last: SendOutcome | null = null;
    for (let attempt = 0; attempt < ATTEMPTS_MAX; attempt++) {
      const backend = this.pick(tried, call.region);
      if (!backend) break;
      tried.add(backend);
      const request = call.build(backend);
      if (!request) {
        attempt--;
        continue;
      }
      const outcome = await this.attempt(backend, request, call);
      if (outcome.kind !== "failed" || !(outcome.failure as { retryable?: boolean }).retryable) return outcome;
      last = outcome;
      if (call.signal?.aborted) break;
    }
    if (last) return last;
    const where = call.region ? " in-country" : "";
    return {
      kind: "failed",
      backend: null,
      failure: fail("no_healthy_backend", `No healthy${where} backend is available for ${this.model}.`, { retryAfterS: 1 }),
    };
  }

  /** A chat completion: a whole JSON reply (read and parsed here), or a stream to relay. */
  async chat(call: ChatCall): Promise<ChatOutcome> {
    const sent = await this.send({
      requestId: call.requestId,
      region: call.region,
      signal: call.signal,
      build: (backend) =>
        backend.adapter.chat.buildChatRequest({
          body: call.body,
          upstreamModel: backend.config.upstream_model ?? this.model,
          maxTokens: call.maxTokens,
          stream: call.stream,
        }),
    });
    if (sent.kind === "failed") return sent;
    const { backend, reply, release } = sent;
    if (call.stream) {
      reply.settleTimer();
      return { kind: "stream", backend, reply, release };
    }
    try {
      const body = await reply.response.text();
      const parsed = backend.adapter.chat.parseChatResponse(body);
      if ("code" in parsed) return { kind: "failed", backend, failure: parsed };
      return { kind: "json", backend, body, usage: parsed.usage, status: reply.response.status };
    } catch (error) {
      backend.failed(this.now());
      return { kind: "failed", backend, failure: fail("upstream_error", `The upstream reply broke off: ${(error as Error).message}`) };
    } finally {
      reply.finish();
      release();
    }
  }

  private async attempt(backend: Backend, request: UpstreamRequest, call: PoolCall): Promise<SendOutcome> {
    const startedMs = this.now();
    backend.inFlight++;
    backend.requests++;
    let released = false;
    const release = () => {
      if (!released) backend.inFlight--;
      released = true;
    };
    const sent = await sendUpstream({
      baseUrl: backend.config.url,
      request,
      requestId: call.requestId,
      signal: call.signal,
      timeoutMs: this.options.upstreamTimeoutMs,
    });
    if (!sent.ok) {
      release();
      if (!call.signal?.aborted) backend.failed(this.now());
      return { kind: "failed", backend, failure: sent.failure };
    }
    const { response } = sent.reply;
    if (!response.ok) {
      const text = await response.text().catch(() => "");
      sent.reply.abort();
      release();
      backend.failed(this.now());
      return { kind: "failed", backend, failure: backend.adapter.errorToFailure(response.status, text) };
    }
    backend.succeeded(this.now() - startedMs);
    return { kind: "reply", backend, reply: sent.reply, release, startedMs };
  }
}
