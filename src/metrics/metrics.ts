/**
 * Prometheus metrics (prom-client, one registry per gateway so that several can share a
 * process). Per request only counters and one histogram are touched; everything that is state
 * (in-flight, breakers, leases, usage backlog, NATS) is read when Prometheus scrapes. Labels
 * carry model, backend, operation and status: never a key, an account or message content.
 */
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { PoolHost } from "../../actors/pool/host.ts";

/** Seconds: from a fast cached reply to a long generation. */
const DURATION_BUCKETS_S = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

export interface RequestMetric {
  operation: string;
  model: string;
  backend: string | null;
  status: number;
  durationMs: number;
  inputTokens: number;
  outputTokens: number;
  billedMicro: bigint;
}

export interface MetricSources {
  pools: PoolHost;
  /** Micro-toman held in this node's leases but not committed to a request. */
  leaseSlackMicro: () => bigint;
  usageBacklog: () => number;
  natsConnected: () => boolean | null;
  /** Admissions since start by path: from this node's share (`local`) or after asking the key's owner (cluster only). */
  keyAdmissions?: () => Record<string, number>;
  /** Key partitions this node owns (cluster only). */
  partitionsOwned?: () => number;
}

export class Metrics {
  readonly registry = new Registry();
  private readonly requests: Counter<"operation" | "model" | "backend" | "status">;
  private readonly duration: Histogram<"operation" | "model">;
  private readonly tokens: Counter<"model" | "direction">;
  private readonly cost: Counter<"model">;

  constructor(sources: MetricSources) {
    const registers = [this.registry];
    this.requests = new Counter({
      name: "darvaze_requests_total",
      help: "Requests answered, by operation, model, backend and HTTP status.",
      labelNames: ["operation", "model", "backend", "status"],
      registers,
    });
    this.duration = new Histogram({
      name: "darvaze_request_duration_seconds",
      help: "Time from a request's arrival to its settlement.",
      labelNames: ["operation", "model"],
      buckets: DURATION_BUCKETS_S,
      registers,
    });
    this.tokens = new Counter({ name: "darvaze_tokens_total", help: "Tokens billed, by direction (input, output).", labelNames: ["model", "direction"], registers });
    this.cost = new Counter({ name: "darvaze_cost_micro_toman_total", help: "Micro-toman charged to wallets.", labelNames: ["model"], registers });
    new Gauge({
      name: "darvaze_backend_in_flight",
      help: "Requests in flight to each backend from this node.",
      labelNames: ["model", "backend"],
      registers,
      collect() {
        this.reset();
        for (const pool of sources.pools.all()) for (const b of pool.backends) if (b.requests > 0 || b.inFlight > 0) this.set({ model: pool.model, backend: b.name }, b.inFlight);
      },
    });
    new Gauge({
      name: "darvaze_backend_breaker_open",
      help: "1 while a backend's breaker is open on this node.",
      labelNames: ["model", "backend"],
      registers,
      collect() {
        this.reset();
        const now = performance.now();
        for (const pool of sources.pools.all()) for (const b of pool.backends) if (b.requests > 0) this.set({ model: pool.model, backend: b.name }, b.openUntilMs > now ? 1 : 0);
      },
    });
    new Gauge({
      name: "darvaze_lease_slack_micro_toman",
      help: "Money held in this node's leases and not yet committed to a request.",
      registers,
      collect() {
        this.set(Number(sources.leaseSlackMicro()));
      },
    });
    new Gauge({
      name: "darvaze_usage_backlog_records",
      help: "Usage records waiting to be written (the durability bound's backlog).",
      registers,
      collect() {
        this.set(sources.usageBacklog());
      },
    });
    new Gauge({
      name: "darvaze_key_admissions",
      help: "Admissions since start, by path: local (from this node's share, no broker hop), owner_local, owner_remote (asked the key's partition owner).",
      labelNames: ["path"],
      registers,
      collect() {
        for (const [path, n] of Object.entries(sources.keyAdmissions?.() ?? {})) this.set({ path }, n);
      },
    });
    new Gauge({
      name: "darvaze_partitions_owned",
      help: "Key partitions this node owns (cluster only).",
      registers,
      collect() {
        if (sources.partitionsOwned) this.set(sources.partitionsOwned());
      },
    });
    new Gauge({
      name: "darvaze_nats_connected",
      help: "1 when the NATS connection is up, 0 when down; absent on the in-process bus.",
      registers,
      collect() {
        const connected = sources.natsConnected();
        if (connected !== null) this.set(connected ? 1 : 0);
      },
    });
  }

  request(m: RequestMetric): void {
    const backend = m.backend ?? "none";
    this.requests.inc({ operation: m.operation, model: m.model, backend, status: String(m.status) });
    this.duration.observe({ operation: m.operation, model: m.model }, m.durationMs / 1000);
    if (m.inputTokens > 0) this.tokens.inc({ model: m.model, direction: "input" }, m.inputTokens);
    if (m.outputTokens > 0) this.tokens.inc({ model: m.model, direction: "output" }, m.outputTokens);
    if (m.billedMicro > 0n) this.cost.inc({ model: m.model }, Number(m.billedMicro));
  }

  /** Requests refused before they reached a backend (401, 402, 429, …). */
  refused(operation: string, model: string, status: number): void {
    this.requests.inc({ operation, model, backend: "none", status: String(status) });
  }

  async exposition(): Promise<{ body: string; contentType: string }> {
    return { body: await this.registry.metrics(), contentType: this.registry.contentType };
  }
}
