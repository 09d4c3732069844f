/**
 * Admit: a small ticket to the key actor over the bus: slot, limits, the reserve held; at the
 * wallet's edge, once more with the exact reserve when the operation can compute one, and once
 * more with the output limit the wallet covers. A refusal (402, 429, 503) is recorded here.
 */
import { ADMIT, type AdmitTicket, type RateInfo } from "../../actors/protocol.ts";
import { partitionOf } from "../../actors/subjects.ts";
import { describe, fail, type Failure } from "../errors.ts";
import { observeRefused } from "../metrics/observe.ts";
import type { GatewayDeps } from "./deps.ts";
import { exactly, loweredReserve, reserveMicro } from "./reserve.ts";
import { Admission, type AdmitRequest, type SettlementDeps } from "./settlement.ts";

/** A refusal, with the rate headers that still apply. */
export interface Refusal {
  failure: Failure;
  headers: Record<string, string>;
}

/** What admission uses: the usage writer's room, the key actor over the bus, and what the Admission it returns uses. */
export type AdmitDeps = SettlementDeps & Pick<GatewayDeps, "writer">;

const BILLING_BEHIND = fail("service_unavailable", "This node is behind on recording usage; try again shortly.", { retryAfterS: 1 });

/**
 * Admits a request: its reserve held by the key's actor, or the refusal (402, 429, 503) before any
 * upstream call. The refusal is recorded here; the caller only answers it.
 */
export async function admit(deps: AdmitDeps, r: AdmitRequest): Promise<Admission | Refusal> {
  const startedMs = r.startedMs ?? performance.now();
  // Backpressure: a node with more usage unwritten than one batch admits nothing new until it
  // catches up (a short wait), so that what a crash can lose stays within one batch.
  const behind = !deps.writer.hasRoom && !(await deps.writer.room());
  const result = behind ? { failure: BILLING_BEHIND, headers: {} } : await askKeyActor(deps, r, startedMs);
  if (result instanceof Admission) return result;
  const { key } = r.caller;
  recordRefusal(deps, { requestId: r.requestId, keyId: key.id, operation: r.operation, model: r.model.id, startedMs }, result.failure);
  return result;
}

/** The key's actor holds the reserve (asked again with an exact count when the cheap one does not fit), or refuses. */
async function askKeyActor(deps: AdmitDeps, r: AdmitRequest, startedMs: number): Promise<Admission | Refusal> {
  const { key } = r.caller;
  const subject = deps.subjects.keyAdmit(partitionOf(key.id));
  let reserve = r.reserve;
  let ticket: AdmitTicket = {
    keyId: key.id,
    requestId: r.requestId,
    model: r.model.id,
    reserveMicro: reserveMicro(reserve),
    reserveTokens: reserve.tokens,
    exact: reserve.exact,
    ...(r.caller.batch ? { batch: true as const } : {}),
  };
  try {
    let reply = await deps.bus.request(ADMIT, subject, ticket);
    if (!reply.ok && reply.exactNeeded && !reserve.exact && reserve.exactInputUnits) {
      reserve = await exactly(reserve);
      ticket = { ...ticket, reserveMicro: reserveMicro(reserve), reserveTokens: reserve.tokens, exact: true };
      reply = await deps.bus.request(ADMIT, subject, ticket);
    }
    // The wallet cannot cover the output limit: the request is served with the limit it covers.
    const lowered = !reply.ok && reply.availableMicro !== undefined ? loweredReserve(reserve, reply.availableMicro) : null;
    if (lowered) {
      reserve = lowered;
      ticket = { ...ticket, reserveMicro: reserveMicro(reserve), reserveTokens: reserve.tokens };
      reply = await deps.bus.request(ADMIT, subject, ticket);
    }
    const headers = rateHeaders(reply.rate);
    if (reply.ok) return new Admission(deps, { ...r, reserve, startedMs }, reply.holdId, ticket.reserveMicro, headers);
    return { failure: reply.failure, headers };
  } catch (error) {
    deps.log("error", "admit_unreachable", { requestId: r.requestId, error: (error as Error).message });
    return {
      failure: fail("service_unavailable", "Admission is unavailable right now; try again shortly.", { retryAfterS: 1 }),
      headers: {},
    };
  }
}

/** Records a request refused before any backend (bad input, key, money, limits). */
export function recordRefusal(
  deps: Pick<GatewayDeps, "env" | "metrics" | "log">,
  r: { requestId: string; keyId: string | null; operation: string; model: string | null; startedMs: number },
  failure: Failure,
): void {
  const status = describe(failure.code).status;
  observeRefused(deps, {
    requestId: r.requestId,
    keyId: r.keyId,
    operation: r.operation,
    model: r.model,
    status,
    code: failure.code,
    durationMs: performance.now() - r.startedMs,
  });
}

/** `x-ratelimit-*` headers, OpenAI's names, for the limits the key has. */
export function rateHeaders(rate: RateInfo | undefined): Record<string, string> {
  const headers: Record<string, string> = {};
  if (!rate) return headers;
  if (rate.limitRequests !== undefined) {
    headers["x-ratelimit-limit-requests"] = String(rate.limitRequests);
    headers["x-ratelimit-remaining-requests"] = String(rate.remainingRequests ?? 0);
    headers["x-ratelimit-reset-requests"] = `${rate.resetRequestsS ?? 0}s`;
  }
  if (rate.limitTokens !== undefined) {
    headers["x-ratelimit-limit-tokens"] = String(rate.limitTokens);
    headers["x-ratelimit-remaining-tokens"] = String(rate.remainingTokens ?? 0);
    headers["x-ratelimit-reset-tokens"] = `${rate.resetTokensS ?? 0}s`;
  }
  return headers;
}
