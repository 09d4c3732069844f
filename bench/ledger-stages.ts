/**
 * The cost ledger's map from code to stage, and the attribution of a CPU profile to stages.
 *
 * A sample of `bun --cpu-prof` is a call stack. Each sample goes to the stage of its innermost
 * frame that a rule below names: a library or built-in (zod, prom-client, JSON.parse, fetch) or a
 * project helper no rule names (src/json.ts, src/bus/local.ts, src/db/*) is charged to whichever
 * stage called it. A sample with no named frame at all is Bun's own work on the request, its
 * native HTTP server seen from the event loop ("http"), unless a fallback rule names one. Rules
 * with `functions` win over a rule for the whole file.
 */
import { join } from "node:path";

export const STAGES = ["parse", "count", "admit", "send", "relay", "usage", "settle", "metrics", "log", "http", "gc", "other"] as const;
export type Stage = (typeof STAGES)[number];

export const STAGE_NAMES: Record<Stage, string> = {
  parse: "parse and validate (and the key's authentication)",
  count: "count (prompt bounds, budget, tokenizer)",
  admit: "admit and lease",
  send: "upstream send",
  relay: "relay (the reply, upstream to client)",
  usage: "usage record",
  settle: "settle",
  metrics: "metrics",
  log: "access log",
  http: "Elysia and Bun's HTTP server (routing, Request and Response, stream plumbing)",
  gc: "garbage collection the memory guard runs on the main thread",
  other: "other: the route's sequencing, timers, code no rule names",
};

export interface StageRule {
  /** Path from the repository's root; ending in `/`, every file below that folder. */
  file: string;
  /** Only these functions (as the profile names them: a method by its own name); every function of the file when absent. */
  functions?: readonly string[];
  stage: Stage;
  /**
   * Only for a sample no other rule names: code that runs from a promise's continuation with
   * none of its callers on the stack.
   */
  fallback?: true;
}

export const STAGE_RULES: readonly StageRule[] = [
  // The body read with its size and depth limits, JSON.parse, the bearer token, the request id.
  { file: "src/http/request.ts", stage: "parse" },
  // An operation's request as a transport hands it over: the body read within its bounds.
  { file: "src/operations/input.ts", stage: "parse" },
  // The chat body's schema: the plain-request fast check and zod's parse.
  { file: "src/operations/chat/schema.ts", stage: "parse" },
  // Chat's own first steps: its body read and checked, its preparation (the budget is `count`).
  { file: "src/operations/chat/chat.ts", functions: ["readChat", "prepare"], stage: "parse" },
  // The caller: origin, key authentication (a keyed hash, then the cache), residency; the model's lookup.
  { file: "src/admission/caller.ts", stage: "parse" },
  { file: "src/admission/model.ts", stage: "parse" },
  { file: "src/keys/store.ts", stage: "parse" },
  { file: "src/keys/secret.ts", stage: "parse" },

  // The prompt's cheap bound (bytes, allowances) and the words floors, and the exact tokenizer.
  { file: "src/tokens/count.ts", stage: "count" },
  { file: "src/tokens/bpe.ts", stage: "count" },
  // The output budget and the prompt's bound at the model's prices (paid fields are called from here).
  { file: "src/operations/chat/budget.ts", stage: "count" },
  // A whole reply's generated text, read for the words floor of the bill.
  { file: "src/operations/chat/chat.ts", functions: ["jsonGeneratedText"], stage: "count" },

  // The reserve, the ticket to the key actor, and the actor's slots, windows and lease.
  { file: "src/operations/chat/chat.ts", functions: ["chatReserve", "highestWritePrice"], stage: "admit" },
  { file: "src/admission/admit.ts", functions: ["admit", "askKeyActor"], stage: "admit" },
  { file: "src/admission/reserve.ts", stage: "admit" },
  {
    file: "actors/key/actor.ts",
    functions: ["admit", "checkLimits", "checkMonthlyCap", "capRoom"],
    stage: "admit",
  },
  { file: "actors/key/purse.ts", functions: ["reserve", "take", "room", "leaseSize", "openLease"], stage: "admit" },
  { file: "actors/key/host.ts", functions: ["admit", "actor"], stage: "admit" },
  { file: "actors/key/window.ts", stage: "admit" },
  { file: "actors/key/permits.ts", stage: "admit" },
  { file: "actors/key/capacity.ts", stage: "admit" },
  { file: "actors/key/gate.ts", stage: "admit" },
  { file: "actors/key/grant.ts", stage: "admit" },
  // Leases are holds in the ledger: opened, grown, shrunk and closed with the lease.
  { file: "src/ledger/holds.ts", stage: "admit" },

  // The pool: backend choice, tries, the upstream request's body and the fetch itself.
  { file: "actors/pool/pool.ts", functions: ["chat", "send", "sendWithin", "attempt", "pick", "tries", "mayRetry"], stage: "send" },
  { file: "actors/pool/backend.ts", stage: "send" },
  { file: "actors/pool/breaker.ts", stage: "send" },
  { file: "actors/pool/ewma.ts", stage: "send" },
  { file: "src/providers/upstream.ts", functions: ["sendUpstream", "isRedirect", "redirectOf", "abortable"], stage: "send" },
  { file: "src/providers/openai/request.ts", stage: "send" },
  { file: "src/operations/chat/hosted.ts", functions: ["withHostedCalls"], stage: "send" },

  // The reply read from the upstream (whole, or as SSE frames) and checked.
  { file: "actors/pool/pool.ts", functions: ["readWhole", "streamOutcome", "replyContext"], stage: "relay" },
  { file: "src/providers/upstream.ts", stage: "relay" },
  { file: "src/providers/openai/response.ts", stage: "relay" },
  { file: "src/providers/openai/stream.ts", stage: "relay" },
  { file: "src/providers/sse.ts", stage: "relay" },
  { file: "src/providers/replyJson.ts", stage: "relay" },
  { file: "src/providers/jsonEvents.ts", stage: "relay" },
  { file: "src/providers/chatShape.ts", stage: "relay" },
  { file: "src/providers/chunk.ts", stage: "relay" },
  // The frames to the client, the live meter and the stream's end.
  { file: "src/operations/chat/relay.ts", stage: "relay" },
  { file: "src/http/chat/sse.ts", stage: "relay" },
  { file: "src/operations/chat/meter.ts", stage: "relay" },
  { file: "src/operations/chat/ending.ts", stage: "relay" },
  // The route's own sequencing between the stages (what it calls is charged to their stages).
  { file: "src/operations/chat/chat.ts", functions: ["chat"], stage: "other" },
  // The client's reply: the cost written into a whole reply, the Response built.
  { file: "src/admission/costReply.ts", stage: "relay" },
  { file: "src/http/chat/route.ts", functions: ["chatCompletions"], stage: "relay" },

  // The usage record's buffer and group commit (embedded), or the usage stream (NATS).
  { file: "src/ledger/usage.ts", stage: "usage" },
  { file: "src/ledger/stream.ts", stage: "usage" },

  // The units used, bounded and priced; the key actor's settlement and the spend it records.
  { file: "src/operations/chat/relay.ts", functions: ["settle", "outputTokens", "unreported"], stage: "settle" },
  { file: "src/operations/chat/chat.ts", functions: ["chatBill", "hungUpBill"], stage: "settle" },
  { file: "src/operations/run.ts", functions: ["settleUsed", "settledFailed"], stage: "settle" },
  { file: "src/operations/chat/unreported.ts", stage: "settle" },
  {
    file: "src/admission/settlement.ts",
    functions: ["settle", "bounded", "post", "priced", "usedMicro", "hostedCallsBilled", "inputUnitsUnreported"],
    stage: "settle",
  },
  { file: "src/admission/prices.ts", stage: "settle" },
  {
    file: "actors/key/actor.ts",
    functions: ["settle", "rememberSettled", "recordSpend", "coverOverrun"],
    stage: "settle",
  },
  { file: "actors/key/purse.ts", functions: ["settled", "coverOverrun", "retire", "shrink", "close", "signal"], stage: "settle" },
  { file: "actors/key/host.ts", functions: ["settle"], stage: "settle" },
  { file: "src/units.ts", functions: ["costOf", "tokensOf", "splitParts", "withUnitMaps"], stage: "settle" },

  // Prometheus counters and histograms (prom-client below them), the live view's counts.
  { file: "src/metrics/metrics.ts", stage: "metrics" },
  { file: "src/metrics/snapshot.ts", stage: "metrics" },
  { file: "src/metrics/live.ts", stage: "metrics" },
  { file: "src/metrics/loop.ts", stage: "metrics" },
  // The access line: built in observe.ts (its metrics call is `metrics`), encoded and written by the logger.
  { file: "src/metrics/observe.ts", stage: "log" },
  { file: "src/log.ts", stage: "log" },

  // Elysia's compiled handlers and hooks (named `map`, `handle`) and the app's own hooks.
  { file: "node_modules/elysia/", stage: "http" },
  { file: "src/http/app.ts", stage: "http" },
  { file: "src/http/listen.ts", stage: "http" },
  // The memory guard's collections (`Bun.gc`): the engine's own collections on the main thread
  // show inside whatever allocated, and its collector threads are rows of their own.
  { file: "src/memory.ts", stage: "gc" },
  // Background work on timers: backend probes, idle keys swept (charged per request all the same).
  { file: "src/background.ts", stage: "other" },
  { file: "actors/pool/probe.ts", stage: "other" },
  { file: "actors/key/host.ts", functions: ["sweepIdle"], stage: "other" },
  // With NATS, the usage records kept until PostgreSQL has them, and checked there by request id.
  { file: "src/ledger/confirm.ts", stage: "usage" },

  // The database's client and drizzle's query building run from a promise's `then`, their caller
  // gone from the stack. In steady state that is the usage batches' group commit: a lease's hold
  // is opened once for many requests, and its frames (holds.ts) say `admit` when they are there.
  { file: "src/db/", stage: "usage", fallback: true },
  { file: "node_modules/drizzle-orm/", stage: "usage", fallback: true },
  // With NATS and PostgreSQL, the clients' socket work runs from their own read and write loops.
  // On one node the key actor is local (no broker hop), so that is the usage stream's publish and
  // acknowledgement and its consumer's batches into PostgreSQL.
  { file: "node_modules/nats/", stage: "usage", fallback: true },
  { file: "node_modules/postgres/", stage: "usage", fallback: true },
];

/** A `.cpuprofile` as `bun --cpu-prof` writes it (the Chrome DevTools format). */
export interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string }; children?: number[] }[];
  /** Microseconds since the epoch. */
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface Attribution {
  /** Samples in the window. */
  samples: number;
  /** The sampler's period: the median gap between two samples of the window (µs). */
  periodUs: number;
  byStage: Record<Stage, number>;
  /** The hottest innermost frames (self samples), with the stage each was charged to. */
  hottest: { frame: string; stage: Stage; samples: number }[];
}

const hottestMax = 12;

function covers(root: string, rule: StageRule, path: string): boolean {
  return rule.file.endsWith("/") ? path.startsWith(join(root, rule.file)) : path === join(root, rule.file);
}

/** The stage of a frame, or null when no rule names it; `fallback` asks the fallback rules instead. */
export function stageOf(root: string, frame: { functionName: string; url: string }, fallback = false): Stage | null {
  if (!frame.url.startsWith("file://")) return null;
  const path = frame.url.slice("file://".length);
  let fileWide: Stage | null = null;
  for (const rule of STAGE_RULES) {
    if ((rule.fallback ?? false) !== fallback || !covers(root, rule, path)) continue;
    if (rule.functions === undefined) fileWide ??= rule.stage;
    else if (rule.functions.includes(frame.functionName)) return rule.stage;
  }
  return fileWide;
}

function frameLabel(root: string, frame: { functionName: string; url: string }): string {
  const url = frame.url.startsWith(`file://${root}/`) ? frame.url.slice(`file://${root}/`.length) : frame.url;
  const file = url.includes("node_modules/") ? url.slice(url.lastIndexOf("node_modules/") + "node_modules/".length) : url;
  const name = frame.functionName || "(anonymous)";
  return file ? `${name} (${file})` : name;
}

/**
 * The samples taken between `fromUs` and `toUs` (µs since the epoch), by stage.
 * @example attribute(profile, { root: ROOT, fromUs: startMs * 1000, toUs: endMs * 1000 })
 */
export function attribute(profile: CpuProfile, window: { root: string; fromUs: number; toUs: number }): Attribution {
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  const parents = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parents.set(child, node.id);
  /** The innermost frame's stage from `id` down to the root, by the ordinary or the fallback rules. */
  const named = (fallback: boolean) => {
    const memo = new Map<number, Stage | null>();
    const walk = (id: number): Stage | null => {
      if (memo.has(id)) return memo.get(id)!;
      const parent = parents.get(id);
      const stage = stageOf(window.root, nodes.get(id)!.callFrame, fallback) ?? (parent === undefined ? null : walk(parent));
      memo.set(id, stage);
      return stage;
    };
    return walk;
  };
  const ordinary = named(false);
  const fallback = named(true);
  const resolve = (id: number): Stage => ordinary(id) ?? fallback(id) ?? "http";
  const byStage = Object.fromEntries(STAGES.map((s) => [s, 0])) as Record<Stage, number>;
  const self = new Map<number, number>();
  const gaps: number[] = [];
  let at = profile.startTime;
  let previous: number | null = null;
  let samples = 0;
  for (const [i, id] of profile.samples.entries()) {
    at += profile.timeDeltas[i] ?? 0;
    if (at < window.fromUs || at > window.toUs) continue;
    if (previous !== null) gaps.push(at - previous);
    previous = at;
    samples += 1;
    byStage[resolve(id)] += 1;
    self.set(id, (self.get(id) ?? 0) + 1);
  }
  const byFrame = new Map<string, { stage: Stage; samples: number }>();
  for (const [id, count] of self) {
    const label = frameLabel(window.root, nodes.get(id)!.callFrame);
    const entry = byFrame.get(`${label}\u0000${resolve(id)}`) ?? { stage: resolve(id), samples: 0 };
    entry.samples += count;
    byFrame.set(`${label}\u0000${resolve(id)}`, entry);
  }
  const hottest = [...byFrame.entries()]
    .map(([key, { stage, samples }]) => ({ frame: key.split("\u0000")[0]!, stage, samples }))
    .sort((a, b) => b.samples - a.samples)
    .slice(0, hottestMax);
  gaps.sort((a, b) => a - b);
  return { samples, periodUs: gaps[Math.floor(gaps.length / 2)] ?? 0, byStage, hottest };
}
