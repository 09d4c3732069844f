/**
 * One chat request's bookkeeping, from arrival to its single log entry. Every path that ends a
 * request (reply sent, refusal, injected failure, client abort, simulator stop) goes through
 * `finish`, which is idempotent, so a request is logged and un-counted from `inFlight` exactly once.
 */
import type { SimFinishReason, SimLog } from "./log.ts";
import type { SimMetrics } from "./metrics.ts";

export type ExchangeContext = {
  readonly log: SimLog;
  readonly metrics: SimMetrics;
  /** Requests not yet finished, so `stop()` can close them out. */
  readonly live: Set<Exchange>;
  /** True once `stop()` began: endings it causes are not the client's aborts. */
  stopping: boolean;
};

export class Exchange {
  readonly seq: number;
  readonly requestId: string | null;
  readonly startedAt = Date.now();
  model = "";
  /** The route served, for the wires besides chat completions (logged, so tests see which was used). */
  path: string | null = null;
  stream = false;
  promptTokens = 0;
  /** Parts of promptTokens reported as read from / written to the prompt cache. */
  cacheReadTokens = 0;
  cacheWriteTokens = 0;
  /** The part of cacheWriteTokens written for an hour. */
  cacheWrite1hTokens = 0;
  /** Web searches run (each billed per call); their results are part of promptTokens. */
  webSearchCalls = 0;
  /** Content tokens written to the caller so far. */
  sent = 0;
  /**
   * Tokens billed if the caller cancels (SimOptions.cancelBills `all`: the whole planned reply);
   * null: what was sent.
   */
  billedIfCancelled: number | null = null;
  /** The stream went silent on purpose; a later abort ends it as "stalled". */
  stalled = false;
  #done = false;
  #onDone: (() => void) | null = null;
  readonly #context: ExchangeContext;

  constructor(context: ExchangeContext, requestId: string | null) {
    this.#context = context;
    this.requestId = requestId;
    this.seq = context.log.begin();
    context.live.add(this);
  }

  /**
   * The prompt and the parts of it reported as cached: reads first, then writes, each at most
   * what remains of the prompt.
   */
  setPrompt(promptTokens: number, cache: { read: number; write: number; write1h?: number }): void {
    this.promptTokens = promptTokens;
    this.cacheReadTokens = Math.min(cache.read, promptTokens);
    this.cacheWriteTokens = Math.min(cache.write, promptTokens - this.cacheReadTokens);
    this.cacheWrite1hTokens = Math.min(cache.write1h ?? 0, this.cacheWriteTokens);
  }

  get done(): boolean {
    return this.#done;
  }

  /** Resolves when the exchange is finished, by whatever path. */
  whenDone(): Promise<void> {
    if (this.#done) return Promise.resolve();
    return new Promise((resolve) => {
      const previous = this.#onDone;
      this.#onDone = () => {
        previous?.();
        resolve();
      };
    });
  }

  /** The caller went away (or the simulator stopped) before the reply ended. */
  abort(): void {
    const byClient = !this.#context.stopping;
    const reason: SimFinishReason = this.stalled ? "stalled" : byClient ? "aborted" : "error";
    if (byClient && this.billedIfCancelled !== null) this.sent = Math.max(this.sent, this.billedIfCancelled);
    this.finish(reason, 200, byClient);
  }

  finish(finishReason: SimFinishReason, status: number, aborted = false): void {
    if (this.#done) return;
    this.#done = true;
    const { log, metrics, live } = this.#context;
    live.delete(this);
    if (this.promptTokens > 0) metrics.addTokens(this.model, this.promptTokens, this.sent);
    if (finishReason === "stop" || finishReason === "length") metrics.addSuccess(this.model);
    log.record({
      seq: this.seq,
      requestId: this.requestId,
      model: this.model,
      ...(this.path ? { path: this.path } : {}),
      stream: this.stream,
      promptTokens: this.promptTokens,
      ...(this.cacheReadTokens > 0 ? { cacheReadTokens: this.cacheReadTokens } : {}),
      ...(this.cacheWriteTokens > 0 ? { cacheWriteTokens: this.cacheWriteTokens } : {}),
      ...(this.webSearchCalls > 0 ? { webSearchCalls: this.webSearchCalls } : {}),
      completionTokens: this.sent,
      finishReason,
      status,
      aborted,
      startedAt: this.startedAt,
      endedAt: Date.now(),
    });
    this.#onDone?.();
    this.#onDone = null;
  }
}
