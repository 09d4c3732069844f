/**
 * Liveness and readiness for load balancers and orchestrators, without a token.
 *
 *   GET /health  200 "ok" while the process serves HTTP at all (restart it when this fails).
 *   GET /ready   200 when this node should get traffic, else 503; the body says why:
 *                  database      answers `SELECT 1` within READY_DATABASE_MS_MAX
 *                  bus           NATS connected (the in-process bus always is)
 *                  usage_writer  writing usage (not failing, buffer not full): otherwise admission
 *                                refuses paid work, so traffic is better sent elsewhere
 *                  draining      the node is shutting down
 *
 * A probe runs at most one database query at a time and reuses a result for READY_CACHE_MS, so
 * probes (anyone may send them) cannot load the database; reasons carry no error text that
 * could name a host or a user, only codes.
 */
import { sql } from "drizzle-orm";
import { errorCodeOf, type Db } from "../db/client.ts";
import { errorBody, fail } from "../errors.ts";
import { TIMED_OUT, within } from "../within.ts";

export const READY_DATABASE_MS_MAX = 1_000;
export const READY_CACHE_MS = 250;

export interface ReadinessSources {
  db: Pick<Db, "rows">;
  bus: { kind: "local" | "nats"; connected?: boolean };
  writer: { accepting: boolean; buffered: number };
}

export interface CheckResult {
  ok: boolean;
  reason?: string;
  [detail: string]: unknown;
}

export interface Readiness {
  status: "ready" | "not_ready";
  checks: { database: CheckResult; bus: CheckResult; usage_writer: CheckResult; draining: CheckResult };
  /** The failed checks' reasons, in the order above. */
  reasons: string[];
}

export class Health {
  /** Set when shutdown begins: the node finishes what it has and takes nothing new. */
  draining = false;
  private cached: { atMs: number; result: Readiness } | null = null;
  private running: Promise<Readiness> | null = null;

  constructor(private readonly sources: ReadinessSources) {}

  /** The readiness, from cache when fresh; concurrent probes share one check. */
  ready(): Promise<Readiness> {
    if (this.cached && performance.now() - this.cached.atMs < READY_CACHE_MS && !this.draining) return Promise.resolve(this.cached.result);
    this.running ??= this.check().finally(() => (this.running = null));
    return this.running;
  }

  private async check(): Promise<Readiness> {
    const { bus, writer } = this.sources;
    const database = await this.database();
    const busOk = bus.kind === "local" || bus.connected !== false;
    const checks: Readiness["checks"] = {
      database,
      bus: busOk ? { ok: true, kind: bus.kind } : { ok: false, kind: bus.kind, reason: "NATS is disconnected (reconnecting)" },
      usage_writer: writer.accepting
        ? { ok: true, buffered: writer.buffered }
        : {
            ok: false,
            buffered: writer.buffered,
            reason:
              "usage records cannot be written (the usage log hung or disconnected, the database refusing writes, or the buffer full): paid requests are refused",
          },
      draining: this.draining ? { ok: false, reason: "the node is shutting down" } : { ok: true },
    };
    const reasons = Object.entries(checks).flatMap(([name, c]) => (c.ok ? [] : [`${name}: ${c.reason}`]));
    const result: Readiness = { status: reasons.length === 0 ? "ready" : "not_ready", checks, reasons };
    this.cached = { atMs: performance.now(), result };
    return result;
  }

  private async database(): Promise<CheckResult> {
    const startedMs = performance.now();
    try {
      const answer = await within(this.sources.db.rows(sql`SELECT 1`), READY_DATABASE_MS_MAX);
      if (answer === TIMED_OUT) return { ok: false, reason: `no answer within ${READY_DATABASE_MS_MAX} ms` };
      return { ok: true, ms: Math.round((performance.now() - startedMs) * 10) / 10 };
    } catch (error) {
      const code = errorCodeOf(error);
      return { ok: false, reason: `query failed${code ? ` (${code})` : ""}` };
    }
  }
}

/** The /ready reply: 200 or 503 with the checks (a 503 also carries the wire's error shape). */
export async function readyResponse(health: Health): Promise<Response> {
  const readiness = await health.ready();
  const body =
    readiness.status === "ready"
      ? readiness
      : { ...errorBody(fail("service_unavailable", `Not ready: ${readiness.reasons.join("; ")}`)), ...readiness };
  return new Response(JSON.stringify(body), {
    status: readiness.status === "ready" ? 200 : 503,
    headers: { "content-type": "application/json", "cache-control": "no-store" },
  });
}
