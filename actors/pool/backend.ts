/**
 * One backend as this node sees it: peak-EWMA estimates of time to first token and time per
 * output token, requests in flight, a breaker, the host's own queue (vLLM `/metrics`) and this
 * node's concurrency limit.
 *
 *   cost = (ttft + expected output tokens × tpot) × (in flight + 1 + host queue) / weight
 *
 * A failure (connect error, timeout, 429, 5xx) is a sample of `FAILURE_PENALTY_MS`, which the
 * peak rule takes at once, so a backend that fails fast looks slow rather than attractive.
 */
import type { BackendConfig } from "../../src/config.ts";
import { adapterFor } from "../../src/providers/registry.ts";
import type { ProviderAdapter } from "../../src/providers/types.ts";
import { Breaker } from "./breaker.ts";
import { PeakEwma } from "./ewma.ts";

/** A new backend's time to first token: neither favoured nor avoided. */
export const TTFT_MS_NEUTRAL = 250;
/** A new backend's time per output token. */
export const TPOT_MS_NEUTRAL = 20;
/** What a failure counts as. */
export const FAILURE_PENALTY_MS = 5_000;
/** Time constant of the estimates' decay towards lower samples. */
export const EWMA_DECAY_MS = 2_000;
/** Output tokens the cost expects at most, however large the request's budget. */
export const EXPECTED_OUTPUT_TOKENS_MAX = 512;
/** Host metrics older than this are ignored (the scrape failed or the host stopped reporting). */
export const HOST_METRICS_STALE_MS = 5_000;
/** KV-cache use above this share makes a host look busier: it is about to queue or preempt. */
export const KV_CACHE_USAGE_HIGH = 0.9;

/** What the host reports about itself (vLLM `/metrics`). */
export interface HostLoad {
  waiting: number;
  running: number;
  kvCacheUsage: number;
  atMs: number;
}

/** The calls to a backend that can meet a redirect: requests, the host metrics poll, the health probe. */
export type RedirectedCall = "request" | "metrics" | "probe";

export interface Observation {
  /** Time from sending the request to the first content token; absent for whole replies. */
  ttftMs?: number;
  outputTokens: number;
  /** Time from sending the request to the last token. */
  durationMs: number;
}

export class Backend {
  readonly adapter: ProviderAdapter;
  readonly breaker = new Breaker();
  readonly ttft: PeakEwma;
  readonly tpot: PeakEwma;
  inFlight = 0;
  /** This node's share of `concurrency_max` (the cluster may set a node quota here). */
  concurrencyLimit: number;
  requests = 0;
  failures = 0;
  /** Redirects this backend answered with, by call (none is followed: src/providers/upstream.ts). */
  readonly redirects: Record<RedirectedCall, number> = { request: 0, metrics: 0, probe: 0 };
  /** Samples since the statistics were last shared with other nodes. */
  samplesUnshared = 0;
  /** Samples behind the last shared message: how much this node's own view weighs. */
  samplesSeen = 0;
  host: HostLoad | null = null;
  lastPickedMs: number;

  constructor(
    public config: BackendConfig,
    nowMs: number,
    neutral: { ttftMs: number; tpotMs: number } = { ttftMs: TTFT_MS_NEUTRAL, tpotMs: TPOT_MS_NEUTRAL },
  ) {
    this.adapter = adapterFor(config);
    this.ttft = new PeakEwma(neutral.ttftMs, EWMA_DECAY_MS, nowMs);
    this.tpot = new PeakEwma(neutral.tpotMs, EWMA_DECAY_MS, nowMs);
    this.concurrencyLimit = config.concurrency_max;
    this.lastPickedMs = nowMs;
  }

  get name(): string {
    return this.config.name;
  }

  /** The host's metrics, when it reported within HOST_METRICS_STALE_MS; null otherwise. */
  freshHost(nowMs: number): HostLoad | null {
    return this.host !== null && nowMs - this.host.atMs <= HOST_METRICS_STALE_MS ? this.host : null;
  }

  /** The host's queue, when it reported recently. */
  hostQueue(nowMs: number): number {
    const host = this.freshHost(nowMs);
    if (!host) return 0;
    const kvPressure = Math.max(0, host.kvCacheUsage - KV_CACHE_USAGE_HIGH) / (1 - KV_CACHE_USAGE_HIGH);
    // A nearly full KV cache is as good as one more request queued per tenth above the mark.
    return host.waiting + kvPressure * 10;
  }

  cost(expectedOutputTokens: number, nowMs: number): number {
    const tokens = Math.min(expectedOutputTokens, EXPECTED_OUTPUT_TOKENS_MAX);
    const latencyMs = this.ttft.value + tokens * this.tpot.value;
    return (latencyMs * (this.inFlight + 1 + this.hostQueue(nowMs))) / this.config.weight;
  }

  available(nowMs: number): boolean {
    return this.inFlight < this.concurrencyLimit && this.breaker.allows(nowMs);
  }

  /** A finished reply's timing. Whole replies have no TTFT of their own: the tpot estimate splits them. */
  observe(o: Observation, nowMs: number): void {
    const tokens = Math.max(0, o.outputTokens);
    const ttftMs = o.ttftMs ?? Math.max(0, o.durationMs - Math.max(0, tokens - 1) * this.tpot.value);
    this.ttft.observe(ttftMs, nowMs);
    if (o.ttftMs !== undefined && tokens >= 2) this.tpot.observe(Math.max(0, o.durationMs - o.ttftMs) / (tokens - 1), nowMs);
    this.samplesUnshared++;
  }

  /**
   * The upstream accepted the request (a 2xx with headers): a success for the breaker now, not
   * when the reply ends, or quick failures would outrun slow successes and look consecutive.
   */
  accepted(nowMs: number): void {
    this.breaker.succeeded(nowMs);
  }

  /** An upstream failure: a latency penalty and a mark against the breaker. */
  failed(nowMs: number): void {
    this.failures++;
    this.samplesUnshared++;
    this.ttft.observe(Math.max(FAILURE_PENALTY_MS, this.ttft.value), nowMs);
    this.breaker.failed(nowMs);
  }
}
