/**
 * Prometheus metrics (one registry per gateway so that several can share a process). Per request
 * only counters and histograms are touched, and those through series bound once per (operation,
 * model, backend, status) (bound.ts); everything that is state (in-flight, breakers, leases, holds,
 * usage lag, NATS) is read by prom-client when Prometheus scrapes. Labels carry model, backend,
 * operation, status and key class (a concurrency tier): never a key, an account or message content.
 */
import { Counter, Gauge, Registry } from "prom-client";
import type { Backend } from "../../actors/pool/backend.ts";
import type { PoolHost } from "../../actors/pool/host.ts";
import { backendSnapshot, Traffic } from "./snapshot.ts";
import type { MemoryGuardStats } from "../memory.ts";
import { backgroundFailures } from "../background.ts";
import { silenceWatch } from "../providers/upstream.ts";
import { TOKEN_UNITS, type Counts, type Unit } from "../units.ts";
import { BoundCounter, BoundHistogram, type CounterCell, type HistogramCell, SERIES_MAX } from "./bound.ts";

/** Seconds: from a fast cached reply to a long generation. */
const DURATION_BUCKETS_S = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
/** Seconds to the first token: vLLM's own buckets' range, from cache hits to queued prompts. */
const TTFT_BUCKETS_S = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 10, 20, 40];
const TTFT_HELP = "Streams: time from the request's arrival to its first token.";
/** Seconds per output token: 1 ms (small models) to 1 s (a host under heavy load). */
const TPOT_BUCKETS_S = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1];
const TPOT_HELP = "Streams: mean time between output tokens after the first.";
const BACKEND_LABELS = ["model", "backend"] as const;

/** Characters queued for clients by every stream's relay in this process (src/operations/chat/relay.ts keeps it). */
export const relayQueue = { chars: 0 };
export interface RequestMetric {
  operation: string;
  model: string;
  backend: string | null;
  status: number;
  durationMs: number;
  /** Request arrival to the first streamed token; null for whole replies. */
  ttftMs?: number | null;
  /** Mean time between output tokens after the first; null for whole replies. */
  tpotMs?: number | null;
  /** The whole prompt, cache reads and writes included. */
  inputTokens: number;
  outputTokens: number;
  /** The tokens by unit as they were priced (a cache part apart from `input` when priced apart); absent: input and output. */
  unitTokens?: Counts;
  billedMicro: bigint;
  /** Metered at list price; metered − billed is written off (the wallet could not cover it). */
  meteredMicro?: bigint;
  /** For the live view's top keys (id and name only), never a label. */
  keyId?: string | null;
  keyName?: string | null;
}

export interface HoldTotals {
  pending: number;
  heldMicro: bigint;
}

export interface MetricSources {
  pools: PoolHost;
  /** Micro-toman held in this node's leases but not committed to a request. */
  leaseSlackMicro: () => bigint;
  /** This node's open leases and the micro-toman they hold. */
  leases?: () => { open: number; heldMicro: bigint };
  /** In-flight requests of this node's key actors by key class. */
  keyInFlight?: () => Map<string, number>;
  /** Pending holds in the ledger (every node's), read from the database at scrape time. */
  holds?: () => Promise<HoldTotals>;
  usageBacklog: () => number;
  /** Messages of the durable usage log not yet posted to the ledger; null without one. */
  usageLogLag?: () => Promise<number | null>;
  natsConnected: () => boolean | null;
  /** Usage records this node dead-lettered since start, by source and SQLSTATE. */
  deadLetters?: () => Iterable<{ source: string; sqlState: string; count: number }>;
  /** Dead letters awaiting replay (every node's), read from the database at scrape time. */
  deadLettersPending?: () => Promise<{ dead: number; writtenOffMicro: bigint }>;
  /** Admissions since start by path: from this node's share (`local`) or after asking the key's owner (cluster only). */
  keyAdmissions?: () => Record<string, number>;
  /** Admissions of keys with rpm, tpm or a monthly cap by path: from this node's permits (`local`), as the key's owner, or after asking it (cluster only). */
  keyRateAdmissions?: () => Record<string, number>;
  /** Key partitions this node owns (cluster only). */
  partitionsOwned?: () => number;
  /** Paid top-ups per state, every node's, read from the database at scrape time. */
  topups?: () => Promise<Record<string, number>>;
  /** Today's SMS against the daily budget, every node's, read from the database at scrape time. */
  smsBudget?: () => Promise<{ sent: number; refused: number; max: number; exhausted: boolean }>;
  /** The collections the memory guard ran, light and full, and their pauses (src/memory.ts). */
  memoryGuard?: () => MemoryGuardStats;
  /** The event loop's delays since the previous reading (loop.ts); reading starts a new window. */
  eventLoop?: () => { stallMaxMs: number };
}

/** The series one (operation, model, backend, status) adds to at a request's end. */
interface RequestCells {
  requests: CounterCell;
  duration: HistogramCell;
  ttft: HistogramCell;
  tpot: HistogramCell;
  /** One series per token unit (UNITS' `tokens`). */
  tokens: Partial<Record<Unit, CounterCell>>;
  cost: CounterCell;
  writeOff: CounterCell;
}

export class Metrics {
  readonly registry = new Registry();
  /** Cumulative counts for the live pool snapshot (snapshot.ts). */
  readonly traffic = new Traffic();
  private readonly requests = new BoundCounter(
    "darvaze_requests_total",
    "Requests answered, by operation, model, backend and HTTP status.",
    ["operation", "model", "backend", "status"],
  );
  private readonly duration = new BoundHistogram(
    "darvaze_request_duration_seconds",
    "Time from a request's arrival to its settlement.",
    ["operation", "model"],
    DURATION_BUCKETS_S,
  );
  private readonly ttft = new BoundHistogram("darvaze_time_to_first_token_seconds", TTFT_HELP, BACKEND_LABELS, TTFT_BUCKETS_S);
  private readonly tpot = new BoundHistogram("darvaze_time_per_output_token_seconds", TPOT_HELP, BACKEND_LABELS, TPOT_BUCKETS_S);
  private readonly tokens = new BoundCounter(
    "darvaze_tokens_total",
    "Tokens billed, by priced unit (input: prompt tokens not priced as cache reads or writes; cache_read, cache_write, cache_write_1h: prompt tokens read from or written to the vendor's cache; output).",
    ["model", "direction"],
  );
  private readonly cost = new BoundCounter("darvaze_cost_micro_toman_total", "Micro-toman charged to wallets.", ["model"]);
  private readonly writeOff = new BoundCounter(
    "darvaze_write_off_micro_toman_total",
    "Micro-toman metered at list price but not charged: usage past what the wallet could cover, text past a stream's cut.",
    BACKEND_LABELS,
  );
  /** Each (operation, model, backend, status) seen, its series bound; at most SERIES_MAX kept. */
  private readonly cells = new Map<string, RequestCells>();
  private readonly usageClamped: Counter<"model" | "backend" | "part">;
  private readonly usageRaised: Counter<"model" | "backend" | "part">;
  private readonly invariantBroken: Counter<"invariant">;
  private readonly cutAllowance: Counter<"model" | "backend">;
  private readonly cutBeyond: Counter<"model" | "backend">;

  constructor(sources: MetricSources) {
    const registers = [this.registry];
    this.usageClamped = new Counter({
      name: "darvaze_upstream_usage_clamped_total",
      help: "Upstream usage reports above the request's bounds (input above its cost value, output above the limit sent), clamped: by part (input, output, cache_write, hosted_calls).",
      labelNames: ["model", "backend", "part"],
      registers,
    });
    this.usageRaised = new Counter({
      name: "darvaze_upstream_usage_raised_total",
      help: "Upstream usage reports below what the gateway proved was used (the prompt's words, the output it relayed), raised to it: by part (input, output).",
      labelNames: ["model", "backend", "part"],
      registers,
    });
    this.invariantBroken = new Counter({
      name: "darvaze_invariant_broken_total",
      help: "Money and slot invariants found broken (held ≥ charged, in-flight ≥ 0, lease outstanding ≥ 0, settled once); the request was failed safe.",
      labelNames: ["invariant"],
      registers,
    });
    this.cutAllowance = new Counter({
      name: "darvaze_cut_allowance_tokens_total",
      help: "Output tokens billed as allowance when a client left (a cut stream's hidden reasoning and in-flight tokens, a hung-up whole reply's time), beyond what was metered until the cut.",
      labelNames: ["model", "backend"],
      registers,
    });
    this.cutBeyond = new Counter({
      name: "darvaze_cut_reported_beyond_tokens_total",
      help: "Output tokens an upstream's report showed beyond the cut's count (metered + allowance), where a report arrived after the client left: the operator's exposure.",
      labelNames: ["model", "backend"],
      registers,
    });
    this.stateGauges(sources, registers);
  }

  /** A cut stream was billed `tokens` of allowance. */
  cutAllowanceBilled(model: string, backend: string, tokens: number): void {
    this.cutAllowance.inc({ model, backend }, tokens);
  }

  /** A report after a leave showed `tokens` beyond what the cut's count would have billed. */
  cutReportedBeyond(model: string, backend: string, tokens: number): void {
    this.cutBeyond.inc({ model, backend }, Math.max(0, tokens));
  }

  /** An upstream reported more of `part` than the request's bounds allow (it was clamped). */
  clamped(model: string, backend: string | null, part: string): void {
    this.usageClamped.inc({ model, backend: backend ?? "none", part });
  }

  /** An upstream reported less of `part` than the gateway proved was used (it was raised). */
  raised(model: string, backend: string | null, part: string): void {
    this.usageRaised.inc({ model, backend: backend ?? "none", part });
  }

  /** A money or slot invariant was found broken (see src/invariant.ts). */
  broken(invariant: string): void {
    this.invariantBroken.inc({ invariant });
  }

  // biome-ignore lint/complexity/noExcessiveLinesPerFunction: a declarative table, one gauge per state with its name, help and read.
  private stateGauges(sources: MetricSources, registers: Registry[]): void {
    // Both hold gauges share the read in progress (prom-client collects a scrape's gauges together).
    let holdsRead: Promise<HoldTotals> | null = null;
    const holds = sources.holds
      ? () => {
          holdsRead ??= sources.holds!().finally(() => (holdsRead = null));
          return holdsRead;
        }
      : null;
    backendGauge(sources, registers, "darvaze_backend_in_flight", "Requests in flight to each backend from this node.", (b) =>
      b.requests > 0 || b.inFlight > 0 ? b.inFlight : null,
    );
    backendGauge(sources, registers, "darvaze_backend_breaker_open", "1 while a backend's breaker is open on this node.", (b, nowMs) =>
      b.requests > 0 ? (backendSnapshot(b, nowMs).breaker === "open" ? 1 : 0) : null,
    );
    new Gauge({
      name: "darvaze_relay_queued_chars",
      help: "Characters queued for clients by every stream's relay on this node (each relay's bound: STREAM_RELAY_BUFFER_CHARS_MAX).",
      registers,
      collect() {
        this.set(relayQueue.chars);
      },
    });
    new Gauge({
      name: "darvaze_upstream_streams_open",
      help: "Upstream streams open on this node (each one's silence watched).",
      registers,
      collect() {
        this.set(silenceWatch().streams);
      },
    });
    new Gauge({
      name: "darvaze_backend_breaker_state",
      help: "1 for the state each backend's breaker is in on this node (closed, half_open, open).",
      labelNames: ["model", "backend", "state"],
      registers,
      collect() {
        this.reset();
        const now = performance.now();
        for (const pool of sources.pools.all()) {
          for (const b of pool.backends) {
            if (b.requests === 0) continue;
            const state = backendSnapshot(b, now).breaker;
            for (const s of ["closed", "half_open", "open"] as const)
              this.set({ model: pool.model, backend: b.name, state: s }, s === state ? 1 : 0);
          }
        }
      },
    });
    new Gauge({
      name: "darvaze_key_in_flight",
      help: "Requests admitted and not yet settled on this node, by key class (concurrency tier).",
      labelNames: ["key_class"],
      registers,
      collect() {
        this.reset();
        for (const [keyClass, n] of sources.keyInFlight?.() ?? []) this.set({ key_class: keyClass }, n);
      },
    });
    new Counter({
      name: "darvaze_backend_redirects_total",
      help: "Redirects each backend answered with on this node, by call (request, metrics: the host metrics poll, probe: the health probe); none is followed.",
      labelNames: ["model", "backend", "call"],
      registers,
      collect() {
        this.reset();
        for (const pool of sources.pools.all()) {
          for (const b of pool.backends) {
            for (const [call, n] of Object.entries(b.redirects)) if (n > 0) this.inc({ model: pool.model, backend: b.name, call }, n);
          }
        }
      },
    });
    for (const [estimate, help] of [
      ["ttft", "This node's peak-EWMA estimate of each backend's time to first token, in milliseconds."],
      ["tpot", "This node's peak-EWMA estimate of each backend's time per output token, in milliseconds."],
    ] as const) {
      backendGauge(sources, registers, `darvaze_backend_${estimate}_ms`, help, (b) => (b.requests > 0 ? b[estimate].value : null));
    }
    if (sources.memoryGuard) {
      const guard = sources.memoryGuard;
      const counters = [
        [
          "darvaze_gc_forced_total",
          "Collections the memory guard ran, light and full (resident set grew by GC_RSS_GROWTH_MIB).",
          (g: MemoryGuardStats) => g.collections,
        ],
        [
          "darvaze_gc_forced_pause_seconds_total",
          "Time this node was paused by the memory guard's collections.",
          (g: MemoryGuardStats) => g.pauseMsTotal / 1000,
        ],
        [
          "darvaze_gc_forced_full_total",
          "Full collections (with the synchronous sweep) among them.",
          (g: MemoryGuardStats) => g.fullCollections,
        ],
        [
          "darvaze_gc_forced_full_pause_seconds_total",
          "Time this node was paused by the full ones.",
          (g: MemoryGuardStats) => g.fullPauseMsTotal / 1000,
        ],
      ] as const;
      for (const [name, help, read] of counters) {
        new Counter({
          name,
          help,
          registers,
          collect() {
            this.reset();
            this.inc(read(guard()));
          },
        });
      }
    }
    if (sources.eventLoop) {
      const read = sources.eventLoop;
      new Gauge({
        name: "darvaze_event_loop_stall_max_seconds",
        help: "Longest event-loop delay since the previous scrape: every request arriving then waited for it.",
        registers,
        collect() {
          this.set(read().stallMaxMs / 1000);
        },
      });
    }
    new Gauge({
      name: "darvaze_lease_slack_micro_toman",
      help: "Money held in this node's leases and not yet committed to a request.",
      registers,
      collect() {
        this.set(Number(sources.leaseSlackMicro()));
      },
    });
    new Gauge({
      name: "darvaze_leases_open",
      help: "Leases (holds carved from wallets) this node's key actors have open.",
      registers,
      collect() {
        if (sources.leases) this.set(sources.leases().open);
      },
    });
    new Gauge({
      name: "darvaze_lease_held_micro_toman",
      help: "Money this node's open leases hold (committed or not).",
      registers,
      collect() {
        if (sources.leases) this.set(Number(sources.leases().heldMicro));
      },
    });
    const topups = sources.topups;
    new Gauge({
      name: "darvaze_topups",
      help: "Paid top-ups by state (created, redirected, verifying, verified, failed, expired, needs_review, reversed), every node's.",
      labelNames: ["state"],
      registers,
      async collect() {
        const counts = await topups?.().catch(() => null);
        if (!counts) return;
        this.reset();
        for (const [state, n] of Object.entries(counts)) this.set({ state }, n);
      },
    });
    this.smsBudgetGauges(sources.smsBudget, registers);
    new Gauge({
      name: "darvaze_holds_pending",
      help: "Pending holds in the ledger, every node's (read from the database at scrape time).",
      registers,
      async collect() {
        const totals = await holds?.().catch(() => null);
        if (totals) this.set(totals.pending);
      },
    });
    new Gauge({
      name: "darvaze_holds_pending_micro_toman",
      help: "Money pending holds keep from their wallets (held minus posted), every node's.",
      registers,
      async collect() {
        const totals = await holds?.().catch(() => null);
        if (totals) this.set(Number(totals.heldMicro));
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
      name: "darvaze_usage_log_lag_messages",
      help: "Messages of the durable usage log (JetStream) not yet posted to the ledger; absent when embedded.",
      registers,
      async collect() {
        const lag = await sources.usageLogLag?.().catch(() => null);
        if (lag !== null && lag !== undefined) this.set(lag);
      },
    });
    new Counter({
      name: "darvaze_background_failures_total",
      help: "Failures of work outside requests (timers, sweeps, fire-and-forget tasks; unhandled_rejection: one nobody caught), by task; each was logged and retried by its next run.",
      labelNames: ["task"],
      registers,
      collect() {
        this.reset();
        for (const [task, n] of backgroundFailures()) this.inc({ task }, n);
      },
    });
    const deadLetters = sources.deadLetters;
    new Counter({
      name: "darvaze_usage_dead_letters_total",
      help: "Usage records this node dead-lettered (the database refused them, sql_state; or max_deliver reached), by source.",
      labelNames: ["source", "sql_state"],
      registers,
      collect() {
        this.reset();
        for (const d of deadLetters?.() ?? []) this.inc({ source: d.source, sql_state: d.sqlState }, d.count);
      },
    });
    // Both dead-letter gauges share the read in progress, as the hold gauges do.
    let pendingRead: Promise<{ dead: number; writtenOffMicro: bigint } | null> | null = null;
    const pendingDead = () => {
      pendingRead ??= (sources.deadLettersPending?.() ?? Promise.resolve(null)).catch(() => null).finally(() => (pendingRead = null));
      return pendingRead;
    };
    new Gauge({
      name: "darvaze_usage_dead_letters_pending",
      help: "Dead-lettered usage records awaiting replay, every node's (read from the database at scrape time).",
      registers,
      async collect() {
        const totals = await pendingDead();
        if (totals) this.set(totals.dead);
      },
    });
    new Gauge({
      name: "darvaze_usage_dead_letters_written_off_micro_toman",
      help: "Charges written off for dead-lettered usage records awaiting replay (reversed by replay).",
      registers,
      async collect() {
        const totals = await pendingDead();
        if (totals) this.set(Number(totals.writtenOffMicro));
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
      name: "darvaze_key_rate_admissions",
      help: "Admissions of keys with rpm, tpm or a monthly cap since start, by path: local (this node's permits, no broker hop), owner (this node owns the key's partition), asked (asked the owner for permits). Cluster only.",
      labelNames: ["path"],
      registers,
      collect() {
        for (const [path, n] of Object.entries(sources.keyRateAdmissions?.() ?? {})) this.set({ path }, n);
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

  /** The operator's alert on the SMS budget: today's use, the budget, and a flag once it is spent. */
  private smsBudgetGauges(read: MetricSources["smsBudget"], registers: Registry[]): void {
    if (!read) return;
    new Gauge({
      name: "darvaze_sms_today",
      help: "SMS the gateway sent (outcome=sent) and refused for a spent budget (outcome=refused) this UTC day, every node's.",
      labelNames: ["outcome"],
      registers,
      async collect() {
        const today = await read().catch(() => null);
        if (!today) return;
        this.set({ outcome: "sent" }, today.sent);
        this.set({ outcome: "refused" }, today.refused);
      },
    });
    new Gauge({
      name: "darvaze_sms_daily_budget",
      help: "SMS the gateway may send in a UTC day (SMS_DAILY_BUDGET_MAX).",
      registers,
      async collect() {
        const today = await read().catch(() => null);
        if (today) this.set(today.max);
      },
    });
    new Gauge({
      name: "darvaze_sms_budget_exhausted",
      help: "1 when today's SMS budget is spent: sign-in codes are refused (503) until the next UTC day. Alert on it.",
      registers,
      async collect() {
        const today = await read().catch(() => null);
        if (today) this.set(today.exhausted ? 1 : 0);
      },
    });
  }

  request(m: RequestMetric): void {
    const cells = this.cellsOf(m.operation, m.model, m.backend ?? "none", m.status);
    cells.requests.value++;
    this.duration.observe(cells.duration, m.durationMs / 1000);
    if (m.ttftMs != null) this.ttft.observe(cells.ttft, m.ttftMs / 1000);
    if (m.tpotMs != null) this.tpot.observe(cells.tpot, m.tpotMs / 1000);
    const tokens = m.unitTokens ?? { input: m.inputTokens, output: m.outputTokens };
    for (const unit of TOKEN_UNITS) {
      const count = tokens[unit] ?? 0;
      if (count > 0) cells.tokens[unit]!.value += count;
    }
    if (m.billedMicro > 0n) cells.cost.value += Number(m.billedMicro);
    if (m.meteredMicro !== undefined && m.meteredMicro > m.billedMicro) cells.writeOff.value += Number(m.meteredMicro - m.billedMicro);
    this.traffic.add({
      model: m.model,
      backend: m.backend,
      status: m.status,
      outputTokens: m.outputTokens,
      billedMicro: m.billedMicro,
      ttftMs: m.ttftMs ?? null,
      keyId: m.keyId ?? null,
      keyName: m.keyName ?? null,
    });
  }

  /** Requests refused before they reached a backend (401, 402, 429, …). */
  refused(operation: string, model: string, status: number): void {
    this.cellsOf(operation, model, "none", status).requests.value++;
  }

  private cellsOf(operation: string, model: string, backend: string, status: number): RequestCells {
    const key = `${operation}\u0000${model}\u0000${backend}\u0000${status}`;
    const found = this.cells.get(key);
    if (found) return found;
    const tokens: Partial<Record<Unit, CounterCell>> = {};
    for (const unit of TOKEN_UNITS) tokens[unit] = this.tokens.bind({ model, direction: unit });
    const cells: RequestCells = {
      requests: this.requests.bind({ operation, model, backend, status: String(status) }),
      duration: this.duration.bind({ operation, model }),
      ttft: this.ttft.bind({ model, backend }),
      tpot: this.tpot.bind({ model, backend }),
      tokens,
      cost: this.cost.bind({ model }),
      writeOff: this.writeOff.bind({ model, backend }),
    };
    if (this.cells.size < SERIES_MAX) this.cells.set(key, cells);
    return cells;
  }

  async exposition(): Promise<{ body: string; contentType: string }> {
    const bound = [this.requests, this.duration, this.ttft, this.tpot, this.tokens, this.cost, this.writeOff].map((f) => f.exposition());
    return { body: `${await this.registry.metrics()}\n${bound.join("\n")}`, contentType: this.registry.contentType };
  }
}

/** A gauge with one series per backend of this node: `value` reads it (null: no series for that backend). */
function backendGauge(
  sources: MetricSources,
  registers: Registry[],
  name: string,
  help: string,
  value: (backend: Backend, nowMs: number) => number | null,
): void {
  new Gauge({
    name,
    help,
    labelNames: ["model", "backend"],
    registers,
    collect() {
      this.reset();
      const nowMs = performance.now();
      for (const pool of sources.pools.all()) {
        for (const b of pool.backends) {
          const v = value(b, nowMs);
          if (v !== null) this.set({ model: pool.model, backend: b.name }, v);
        }
      }
    },
  });
}
