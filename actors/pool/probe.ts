/**
 * What the pool learns without sending traffic:
 *
 *   host metrics:  vLLM-compatible hosts expose `/metrics`; `vllm:num_requests_waiting`,
 *                  `vllm:num_requests_running` and `vllm:kv_cache_usage_perc` are read every
 *                  `HOST_METRICS_INTERVAL_MS` (bounded by `HOST_METRICS_TIMEOUT_MS`) into
 *                  `Backend.host`. A host without them is asked again only every
 *                  `HOST_METRICS_ABSENT_RETRY_MS`, and contributes no queue term meanwhile.
 *   health probes: a backend whose breaker is open is asked `GET <url>/models` every
 *                  `HEALTH_PROBE_INTERVAL_MS`; any answer that is not a 3xx, 5xx or 429 ends its
 *                  cool-down, so one real request (the half-open probe) can close it.
 *
 * Neither follows a redirect (as no upstream call does: src/providers/upstream.ts): a host that
 * redirects its metrics counts as one without them, and is logged and counted per backend.
 */
import { every } from "../../src/background.ts";
import type { Logger } from "../../src/log.ts";
import { redirectOf, type UpstreamRedirect } from "../../src/providers/upstream.ts";
import type { Backend, HostLoad, RedirectedCall } from "./backend.ts";
import type { PoolActor } from "./pool.ts";

export const HOST_METRICS_INTERVAL_MS = 1_000;
export const HOST_METRICS_TIMEOUT_MS = 500;
export const HOST_METRICS_ABSENT_RETRY_MS = 60_000;
/** A /metrics page larger than this is not read. */
export const HOST_METRICS_BYTES_MAX = 1024 * 1024;
export const HEALTH_PROBE_INTERVAL_MS = 1_000;
export const HEALTH_PROBE_TIMEOUT_MS = 1_000;

/** Sums a Prometheus text exposition's samples of the three vLLM gauges; null when none is present. */
export function parseVllmMetrics(text: string, atMs: number): HostLoad | null {
  let waiting = 0;
  let running = 0;
  let kv = 0;
  let found = false;
  for (const line of text.split("\n")) {
    if (!line.startsWith("vllm:")) continue;
    const match = /^(vllm:[a-z_]+)(\{[^}]*\})?\s+([-+0-9.eE]+|NaN)/.exec(line);
    if (!match) continue;
    const value = Number(match[3]);
    if (!Number.isFinite(value)) continue;
    if (match[1] === "vllm:num_requests_waiting") waiting += value;
    else if (match[1] === "vllm:num_requests_running") running += value;
    else if (match[1] === "vllm:kv_cache_usage_perc" || match[1] === "vllm:gpu_cache_usage_perc") kv = Math.max(kv, value);
    else continue;
    found = true;
  }
  return found ? { waiting, running, kvCacheUsage: Math.min(1, Math.max(0, kv)), atMs } : null;
}

/** `http://h:8000/v1` → `http://h:8000/metrics` (vLLM serves metrics at the root). */
export function metricsUrlOf(backendUrl: string): string {
  const url = new URL(backendUrl);
  url.pathname = `${url.pathname.replace(/\/+$/, "").replace(/\/v1$/, "")}/metrics`;
  return url.toString();
}

export class Prober {
  private readonly absentUntilMs = new WeakMap<Backend, number>();
  private stops: (() => void)[] = [];

  constructor(
    private readonly pools: () => PoolActor[],
    private readonly nowMs: () => number = () => performance.now(),
    private readonly log: Logger = () => {},
  ) {}

  start(): void {
    this.stops.push(every("host_metrics_scrape", HOST_METRICS_INTERVAL_MS, this.log, () => this.scrapeAll()));
    this.stops.push(every("health_probe", HEALTH_PROBE_INTERVAL_MS, this.log, () => this.probeOpen()));
  }

  stop(): void {
    for (const stop of this.stops) stop();
    this.stops = [];
  }

  /** Reads every openai-kind host's metrics once (a host shared by several pools is read once). */
  async scrapeAll(): Promise<void> {
    const byUrl = new Map<string, Backend[]>();
    const now = this.nowMs();
    for (const pool of this.pools()) {
      for (const b of pool.backends) {
        if (b.config.kind !== "openai" || (this.absentUntilMs.get(b) ?? 0) > now) continue;
        const url = metricsUrlOf(b.config.url);
        byUrl.set(url, [...(byUrl.get(url) ?? []), b]);
      }
    }
    await Promise.all([...byUrl].map(([url, backends]) => this.scrape(url, backends)));
  }

  private async scrape(url: string, backends: Backend[]): Promise<void> {
    let load: HostLoad | null = null;
    try {
      const response = await fetch(url, { redirect: "manual", signal: AbortSignal.timeout(HOST_METRICS_TIMEOUT_MS) });
      const length = Number(response.headers.get("content-length") ?? 0);
      if (response.ok && length <= HOST_METRICS_BYTES_MAX) load = parseVllmMetrics(await response.text(), this.nowMs());
      else await response.body?.cancel();
      const redirect = redirectOf(response, url);
      if (redirect) this.redirected(backends, "metrics", redirect);
    } catch {
      // Unreachable or slow: the breaker and the latency estimates deal with that host.
      return;
    }
    for (const b of backends) {
      b.host = load;
      if (!load) this.absentUntilMs.set(b, this.nowMs() + HOST_METRICS_ABSENT_RETRY_MS);
    }
  }

  /** One health request to every backend whose breaker is open. */
  async probeOpen(): Promise<void> {
    const now = this.nowMs();
    const open = this.pools().flatMap((pool) => pool.backends.filter((b) => b.breaker.state(now) === "open"));
    await Promise.all(open.map((b) => this.probe(b)));
  }

  private async probe(b: Backend): Promise<void> {
    try {
      const url = `${b.config.url.replace(/\/+$/, "")}/models`;
      const response = await fetch(url, { redirect: "manual", signal: AbortSignal.timeout(HEALTH_PROBE_TIMEOUT_MS) });
      await response.body?.cancel();
      const redirect = redirectOf(response, url);
      if (redirect) this.redirected([b], "probe", redirect);
      else if (response.status < 500 && response.status !== 429) b.breaker.healthy(this.nowMs());
    } catch {
      // Still down: the cool-down runs on.
    }
  }

  private redirected(backends: Backend[], call: RedirectedCall, redirect: UpstreamRedirect): void {
    for (const b of backends) {
      b.redirects[call]++;
      this.log("warn", "upstream_redirect", { call, backend: b.name, status: redirect.status, location: redirect.locationOrigin });
    }
  }
}
